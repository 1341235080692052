"""Turning the Python intercept on: the environment switch, and hooking PyTorch once it is imported."""

from __future__ import annotations

import os

ENV_SWITCH = "ALNAIR_PYTHON_INTERCEPT"
ON_VALUES = ("1", "true", "yes", "on")
PROFILE_VARIABLE = "ALNAIR_PROFILE"  # where the job's profile goes when it ends (docs/profile.md)


def switched_on(environ=os.environ) -> bool:
    return environ.get(ENV_SWITCH, "").strip().lower() in ON_VALUES


def activate() -> None:
    """Hook PyTorch now if it is imported, else as soon as it is; idempotent."""
    from . import torch_hooks

    torch_hooks.install_when_imported()


_started = False  # both start hooks may run in one interpreter (alnair-run sets the switch and its PYTHONPATH)


def activate_from_environment() -> None:
    """Run at interpreter start by alnair_intercept.pth and by alnair-run's sitecustomize; once."""
    global _started
    if _started:
        return
    _started = True
    if switched_on():
        if os.environ.get(PROFILE_VARIABLE):  # only then: it forks the job's watcher
            from .supervisor import profile_from_environment

            profile_from_environment(os.environ[PROFILE_VARIABLE], PROFILE_VARIABLE)
        activate()
