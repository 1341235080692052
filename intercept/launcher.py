"""alnair-run: runs a command with the Python intercept switched on and the CUDA intercept preloaded.

    alnair-run python train.py --epochs 3
    alnair-run torchrun --nproc-per-node 8 train.py
    alnair-run --profile profile.json python train.py

It replaces itself with the command (same pid, same signals), so every Python the
command starts, children included, inherits the switch through the environment. With
--profile (or ALNAIR_PROFILE) it stays the command's parent instead, to write the job's
profile when it ends (supervisor.py), and exits as the command did.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import alnair.intercept as intercept
from alnair.commandline import fail, version

from . import supervisor
from .activation import ENV_SWITCH, PROFILE_VARIABLE

PROG = "alnair-run"
BOOTSTRAP_DIR = intercept.SOURCE_DIR / "bootstrap"  # holds the sitecustomize that activates each interpreter
USAGE = (
    f"usage: {PROG} [--version] [--profile PATH] COMMAND [ARG...]   (runs COMMAND with Alnair's Python and CUDA "
    f"intercepts; --profile, or {PROFILE_VARIABLE}: write the job's profile to PATH when it ends, %p its pid)"
)


def cuda_library() -> Path | None:
    """The CUDA intercept library, if it has been built (`make -C intercept`)."""
    locate = getattr(intercept, "library_path", None)
    path = Path(locate()) if locate else intercept.SOURCE_DIR / "build" / "libalnair.so"
    return path if path.is_file() else None


def prepend(value: str, existing: str | None, separator: str) -> str:
    parts = [value] + [p for p in (existing or "").split(separator) if p and p != value]
    return separator.join(parts)


def intercept_environment(environ: dict[str, str], library: Path | None) -> dict[str, str]:
    env = dict(environ)
    env[ENV_SWITCH] = "1"
    env["PYTHONPATH"] = prepend(str(BOOTSTRAP_DIR), env.get("PYTHONPATH"), os.pathsep)
    if library is not None:
        env["LD_PRELOAD"] = prepend(str(library), env.get("LD_PRELOAD"), " ")  # ld.so also splits on spaces
    return env


def split_options(args: list[str]) -> tuple[str | None, list[str]]:
    """--profile's value (None if not given) and the command: options end at the command, or at --."""
    profile = None
    while args and (args[0] == "--profile" or args[0].startswith("--profile=")):
        if "=" in args[0]:
            profile, args = args[0].partition("=")[2], args[1:]
        elif len(args) > 1:
            profile, args = args[1], args[2:]
        else:
            fail(PROG, "--profile needs a PATH")
    return profile, args[1:] if args[:1] == ["--"] else args


def main(argv: list[str] | None = None) -> None:
    profile, args = split_options(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        sys.exit(2 if not args else 0)
    if args[0] == "--version":
        print(f"{PROG} {version()}")
        return
    library = cuda_library()
    if library is None:
        print(
            f"{PROG}: CUDA intercept library not built (make -C {intercept.SOURCE_DIR}); "
            "running with the Python intercept only",
            file=sys.stderr,
        )
    env = intercept_environment(dict(os.environ), library)
    value = os.environ.get(PROFILE_VARIABLE, "") if profile is None else profile
    path = supervisor.target(value, PROFILE_VARIABLE if profile is None else "--profile", PROG)
    if path is not None:
        supervisor.fork_watched(path, args, env)  # returns in the child, which runs the command
    try:
        os.execvpe(args[0], args, env)
    except OSError as e:
        print(f"{PROG}: cannot run {args[0]}: {e.strerror}", file=sys.stderr)
        sys.exit(127 if isinstance(e, FileNotFoundError) else 126)


if __name__ == "__main__":
    main()
