"""Put first on PYTHONPATH by alnair-run: turns on the intercept in every Python it starts,
then runs the sitecustomize this one shadows, if there is one."""
import importlib.machinery
import importlib.util
import os
import sys


def _activate() -> None:
    try:
        from alnair.intercept.activation import activate_from_environment
    except ImportError:  # a Python without alnair installed: nothing to hook
        return
    activate_from_environment()


def _run_shadowed_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_activate()
_run_shadowed_sitecustomize()
