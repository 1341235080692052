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


# Directories whose copy of this file already ran in this interpreter. Two copies on the path (an injected pod's
# /opt/alnair/python and alnair-run's bootstrap) would otherwise run each other until a RecursionError.
_RAN = "_alnair_bootstrap_dirs"


def _run_shadowed_sitecustomize() -> None:
    ran = sys.__dict__[_RAN]
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) not in ran]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if _RAN not in sys.__dict__:
    setattr(sys, _RAN, set())
    _activate()
sys.__dict__[_RAN].add(os.path.dirname(os.path.abspath(__file__)))
_run_shadowed_sitecustomize()
