"""The exporter container's one deviation in capabilities, DAC_OVERRIDE as root, is needed and enough: a workload's
segment is its own user's, mode 0640, in the 1777 directory the init container makes. The real exporter, run as
root with exactly the chart's capability set (bounding set DAC_OVERRIDE only, no new privileges), serves a segment
written by another user and removes it once that writer is dead (the directory is root's: its owner may remove any
file despite the sticky bit); with no capability it cannot read it (counted unreadable). Needs root, as CI has."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from chart_support import objects
from support import Writer, scrape_text, wait_until

WORKLOAD_UID = 4321  # any user but root; no account is needed


def chart_capabilities() -> list[str]:
    daemonset = next(o for o in objects({}) if o["kind"] == "DaemonSet")
    context = daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert (context["runAsUser"], context["capabilities"]["drop"], context["allowPrivilegeEscalation"]) == (
        0,
        ["ALL"],
        False,
    )
    return context["capabilities"]["add"]


@pytest.fixture
def shared_directory():
    """A root-owned 1777 directory that another user can reach, as the kubelet and the init container leave it."""
    if os.geteuid() != 0:
        pytest.fail("tests/helm/test_chart_privileges.py runs as root (as CI does): it switches users with setpriv")
    base = Path(tempfile.mkdtemp(prefix="alnair-privileges-"))
    base.chmod(0o755)
    directory = base / "shm"
    directory.mkdir()
    directory.chmod(0o1777)
    yield directory
    shutil.rmtree(base)


@pytest.fixture
def wrap(tmp_path):
    """A `python` for start_exporter that runs the exporter as root with only `capabilities`, no new privileges."""
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv is missing (util-linux)"
    tmp_path.chmod(0o755)

    def wrapper(capabilities: list[str]) -> str:
        bounding = ",".join(["-all", *(f"+{c.lower()}" for c in capabilities)])
        path = tmp_path / f"python-{'-'.join(capabilities) or 'nocaps'}"
        path.write_text(
            f"#!/bin/sh\nexec {setpriv} --bounding-set={bounding} --inh-caps=-all --no-new-privs -- "
            f'{sys.executable} "$@"\n'
        )
        path.chmod(0o755)
        return str(path)

    return wrapper


def workload_writer(test_writer_binary, directory: Path) -> Writer:
    setpriv = shutil.which("setpriv")
    writer = Writer(
        Path(setpriv),
        directory,
        [
            f"--reuid={WORKLOAD_UID}",
            f"--regid={WORKLOAD_UID}",
            "--clear-groups",
            "--",
            str(test_writer_binary),
            "--devices",
            "1",
            "--set",
            "kernel_launches=4242",
        ],
    )
    info = writer.path.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (WORKLOAD_UID, 0o640)
    return writer


def launches(url: str, pid: int) -> list[str]:
    return [
        line
        for line in scrape_text(url).splitlines()
        if line.startswith("alnair_cuda_kernel_launches_total{") and f'pid="{pid}"' in line
    ]


def test_dac_override_as_root_reads_and_reclaims_another_users_segments(
    shared_directory, wrap, start_exporter, test_writer_binary
):
    capabilities = chart_capabilities()
    assert capabilities == ["DAC_OVERRIDE"]
    writer = workload_writer(test_writer_binary, shared_directory)
    exporter = start_exporter(
        f"--shm.dir={shared_directory}",
        "--shm.linger=1s",
        "--collector.cuda.interval=200ms",
        "--no-collector.nvml",
        python=wrap(capabilities),
    )
    wait_until(lambda: launches(exporter.url, writer.pid), timeout=15)
    assert launches(exporter.url, writer.pid)[0].endswith(" 4242")
    writer.proc.send_signal(signal.SIGKILL)
    writer.proc.wait(10)
    wait_until(lambda: not writer.path.exists(), timeout=15)  # a dead writer's segment, removed after its linger


def test_without_a_capability_another_users_segment_is_unreadable(
    shared_directory, wrap, start_exporter, test_writer_binary
):
    writer = workload_writer(test_writer_binary, shared_directory)
    exporter = start_exporter(
        f"--shm.dir={shared_directory}", "--collector.cuda.interval=200ms", "--no-collector.nvml", python=wrap([])
    )

    def unreadable() -> bool:
        return any(
            line.startswith('alnair_cuda_segments_skipped{reason="unreadable"}')
            and line.rsplit(" ", 1)[1] not in ("0", "0.0")
            for line in scrape_text(exporter.url).splitlines()
        )

    wait_until(unreadable, timeout=15)
    assert launches(exporter.url, writer.pid) == []
    writer.stop()
