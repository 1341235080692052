"""Watching a job to its end and writing its profile (docs/profile.md).

The job runs as this process's child. This process forwards it the signals sent to this process, holds the
segments of the job's processes (job_segments.py), and once the job's command has ended writes the profile,
prints the summary and exits as the command did (its code, or its signal). alnair-run --profile runs its command
so; with ALNAIR_PROFILE in a pod's environment, the job's first intercepted Python forks at start: the child goes
on as the program and the parent, keeping the pid the container runtime signals, watches it.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import NoReturn

from alnair.abi import naming

from . import profile, profile_summary
from .job_segments import JobSegments, start_ticks

WATCHER_VARIABLE = "ALNAIR_PROFILE_WATCHER"  # in the job's environment (the watcher's pid): its processes are watched
POLL_SECONDS = 0.25  # how often new segments of the job are looked for (inotify finds them sooner)
GRACE_SECONDS = 2.0  # how long the job's other processes (DataLoader workers, ranks) may outlive its command
FORWARDED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2}
WAITED = FORWARDED | {signal.SIGCHLD}
PR_SET_PDEATHSIG = 1
SHOWN_AT_MOST = 150  # characters of a refused value shown, as the C library shows them


def target(value: str, setting: str, prog: str) -> str | None:
    """The profile's path from a setting's value (%p: this process's pid), or None: unset, or unwritable, which
    is one line on stderr."""
    if not value:
        return None
    path = os.path.abspath(value.replace("%p", str(os.getpid())))
    reason = profile.unwritable(path)
    if reason:
        print(
            f"{prog}: ignoring {setting}={_quoted(value)}: cannot write there ({reason}); writing no profile",
            file=sys.stderr,
        )
        return None
    return path


def profile_from_environment(value: str, setting: str) -> None:
    """At interpreter start: unless the job is watched already, fork; returns in the child, the program."""
    if os.environ.get(WATCHER_VARIABLE):
        return
    path = target(value, setting, "alnair")
    if path is not None:
        fork_watched(path, _command_line(), os.environ)


def fork_watched(path: str, command: list[str], env: MutableMapping[str, str]) -> None:
    """Forks. Returns in the child, which is the job (it execs the command, or goes on as the program) with
    WATCHER_VARIABLE set in `env`; this process watches it to its end and exits as it did."""
    env[WATCHER_VARIABLE] = str(os.getpid())
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # where it is ignored, the kernel reaps the command unseen
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, WAITED)  # before the fork: no signal is lost in between
    started_unix, start_ns, watcher = time.time(), time.monotonic_ns(), os.getpid()
    child = os.fork()
    if child == 0:
        _end_with(watcher)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return
    _watch(child, path, command, naming.segment_directory(env), started_unix, start_ns)


def _watch(child: int, path: str, command: list[str], directory: str, started_unix: float, start_ns: int) -> NoReturn:
    ticks = start_ticks(child)
    job = JobSegments(directory, child)
    status = _wait_forwarding(child, job.poll)
    end = profile.JobEnd(command, started_unix, ticks, time.monotonic_ns() - start_ns, status)
    _write_profile(path, end, job)
    _exit_as(status)


def _wait_forwarding(child: int, poll: Callable[[], None]) -> int:
    """Polls for the job's segments and forwards signals until the command ends; returns its wait status."""
    next_poll = 0.0
    while True:
        if time.monotonic() >= next_poll:
            poll = _guarded(poll)
            next_poll = time.monotonic() + POLL_SECONDS
        info = signal.sigtimedwait(WAITED, max(0.0, next_poll - time.monotonic()))
        # Sent by a process (kill, a container runtime): forwarded. The kernel's (a terminal's ^C, a hangup) went to
        # the job's whole process group already.
        if info is not None and info.si_signo != signal.SIGCHLD and info.si_code <= 0:
            os.kill(child, info.si_signo)
        status = _reap(child)
        if status is not None:
            return status


def _guarded(poll: Callable[[], None]) -> Callable[[], None]:
    """Runs poll; after a failure, says so once and polls no more: the job runs on, and so does the watch."""
    try:
        poll()
        return poll
    except Exception as e:  # noqa: BLE001  the profile is not worth the job
        print(f"alnair: the profile stops looking for the job's processes: {e!r}", file=sys.stderr)
        return lambda: None


def _reap(child: int) -> int | None:
    """Reaps every child that ended (as a container's pid 1, this process inherits orphans); the command's wait
    status once it has ended."""
    status = None
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child:
            status = wait_status


def _write_profile(path: str, end: profile.JobEnd, job: JobSegments) -> None:
    """Writes the profile and prints the summary. Whatever fails here is one line: never the job's exit status."""
    try:
        built = profile.build(end, job.final_records(GRACE_SECONDS))
        failure = profile.write(path, built)
        if failure:
            print(f"alnair: cannot write the profile to {path}: {failure}", file=sys.stderr)
        else:
            print(profile_summary.summary(built, path), file=sys.stderr)
    except Exception as e:  # noqa: BLE001  the profile is not worth the job's exit status
        print(f"alnair: no profile written: {e!r}", file=sys.stderr)


def _exit_as(status: int) -> NoReturn:
    """Exits with the command's code, or dies of its signal (without a core of its own)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if not os.WIFSIGNALED(status):
        os._exit(os.waitstatus_to_exitcode(status))
    number = os.WTERMSIG(status)
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    if number not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
    os.kill(os.getpid(), number)
    os._exit(128 + number)  # still here: pid 1 of a container ignores its own default-action signals


def _end_with(watcher: int) -> None:
    """In the job: SIGTERM if the watcher dies first, so that killing alnair-run still ends its command, as it
    did when alnair-run replaced itself with the command."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != watcher:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _command_line() -> list[str]:
    """This process's command line as it was started (sys.argv is not set yet at interpreter start)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [os.fsdecode(arg) for arg in f.read().split(b"\0")[:-1]]
    except OSError:
        return list(sys.orig_argv)


def _quoted(value: str) -> str:
    """In quotes on one line, as the C library shows a refused value: quotes, backslashes, control and non-ASCII
    bytes as \\xNN, cut short past SHOWN_AT_MOST characters."""
    shown = "".join(
        c
        if " " <= c < "\x7f" and c not in '"\\'
        else "".join(f"\\x{b:02x}" for b in c.encode("utf-8", "surrogateescape"))
        for c in value[:SHOWN_AT_MOST]
    )
    return f'"{shown}{"..." if len(value) > SHOWN_AT_MOST else ""}"'
