"""Bad flags, bad environment, bad config and a busy port: one clear line and exit code 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import requests

from alnair.commandline import env_name
from alnair.exporter.config import parse_options
from support import parse_samples, wait_until


def run_exporter(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "alnair.exporter", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_exit_2(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("alnair-exporter: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--no-such-flag"], "--no-such-flag"),
        (["--web.listen-address", "nonsense"], "host:port"),
        (["--web.listen-address", ":99999"], "host:port"),
        (["--web.max-requests", "-1"], "0 to 256"),
        (["--web.max-requests", "99999999999999999999"], "0 to 256"),
        (["--collector.cuda.interval", "0"], "longer than 0"),
        (["--collector.cuda.interval", "1x"], "not a duration"),
        (["--collector.nosuch"], "--collector.nosuch"),
        (["--log.level", "loud"], "loud"),
        (["--shm.dir", "/nonexistent/dir"], "/nonexistent/dir"),
        (["--web.telemetry-path", "metrics"], "telemetry-path"),
        (["--web.telemetry-path", "/healthz"], "another endpoint"),
        (["--web.telemetry-path", "/"], "another endpoint"),
        (["--node.name", ""], "must not be empty"),
        (["--collector.cuda.interval", "inf"], "not a duration"),
        (["--collector.cuda.interval", "nan"], "not a duration"),
        (["--collector.cuda.interval", "1e308"], "at most 1d"),
        (["--collector.cuda.interval", "2d"], "at most 1d"),
        (["--shm.max-segments", "0"], "1 to 4096"),
        (["--shm.max-segments", "99999999999999999999"], "1 to 4096"),
        (["--web.config.file", "/nonexistent/web.yml"], "/nonexistent/web.yml"),
    ],
)
def test_bad_flag_exits_2_with_one_line(args, fragment):
    assert_one_line_exit_2(run_exporter(*args), fragment)


@pytest.mark.parametrize(
    "flag, value, allowed",
    [
        ("--shm.max-segments", "4097", "1 to 4096"),  # docs/security.md's memory bound is for 4096 writers a kind
        ("--web.max-requests", "257", "0 to 256"),  # more would never bind: at most 256 connections are open
    ],
)
def test_a_count_out_of_range_names_the_flag_and_the_range(flag, value, allowed):
    assert_one_line_exit_2(run_exporter(flag, value), flag, allowed)
    assert_one_line_exit_2(run_exporter(env={env_name(flag): value}), env_name(flag), allowed)


def fake_procfs(root, *, stat: str = "cpu  1 2 3\nbtime 1700000000\n", process: str | None = "1") -> str:
    """A copy of the parts of a procfs the exporter checks for: its stat, and a process's stat."""
    root.mkdir()
    if stat is not None:
        (root / "stat").write_text(stat)
    if process is not None:
        (root / process).mkdir()
        (root / process / "stat").write_text("1 (init) S 0 1 1 0 -1\n")
    return str(root)


@pytest.mark.parametrize(
    "missing",
    [
        dict(stat=None, process=None),  # an empty directory, as /tmp would be
        dict(stat=None),
        dict(stat="cpu  1 2 3\n"),  # no btime: the cuda and python collectors turn start ticks into times with it
        dict(process=None),  # no process directories: pod identity reads <pid>/cgroup
    ],
    ids=["empty", "no stat", "no btime", "no process"],
)
def test_a_procfs_path_that_is_no_procfs_exits_2(tmp_path, missing):
    procfs = fake_procfs(tmp_path / "proc", **missing)
    assert_one_line_exit_2(run_exporter("--path.procfs", procfs), "--path.procfs", procfs, "not a procfs")
    assert_one_line_exit_2(run_exporter(env={"ALNAIR_PATH_PROCFS": procfs}), "--path.procfs", procfs, "not a procfs")


def test_a_fifo_named_stat_in_the_procfs_path_exits_2_at_once(tmp_path):
    procfs = fake_procfs(tmp_path / "proc", stat=None)
    os.mkfifo(os.path.join(procfs, "stat"))  # opening it to read would wait for a writer forever
    assert_one_line_exit_2(run_exporter("--path.procfs", procfs), procfs, "not a procfs")


@pytest.mark.parametrize("process", ["1", "self"])  # self alone: a procfs mounted hidepid=invisible
def test_a_copy_of_a_procfs_is_one_as_the_hosts_proc_mounted_in_a_container_is(tmp_path, process):
    procfs = fake_procfs(tmp_path / "proc", process=process)
    assert parse_options(["--path.procfs", procfs], []).procfs == procfs


@pytest.mark.parametrize(
    "variable, value",
    [
        ("ALNAIR_WEB_MAX_REQUESTS", "many"),
        ("ALNAIR_COLLECTOR_HOST", "perhaps"),
        ("ALNAIR_COLLECTOR_CUDA_INTERVAL", "-3"),
    ],
)
def test_bad_environment_value_exits_2_naming_the_variable(variable, value):
    assert_one_line_exit_2(run_exporter(env={variable: value}), variable)


def test_a_fifo_or_a_directory_as_the_web_config_exits_2_at_once(tmp_path):
    fifo = tmp_path / "web.yml"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    assert_one_line_exit_2(run_exporter("--web.config.file", str(fifo)), str(fifo), "not a regular file")
    assert_one_line_exit_2(run_exporter("--web.config.file", str(tmp_path)), str(tmp_path), "not a regular file")


def test_a_bad_environment_value_is_ignored_when_its_flag_is_given(start_exporter):
    exporter = start_exporter("--collector.cuda.interval=2s", env={"ALNAIR_COLLECTOR_CUDA_INTERVAL": "-3"})
    assert "listening on" in exporter.log()


def test_a_world_writable_segment_directory_without_the_sticky_bit_is_refused(tmp_path, start_exporter):
    shared = tmp_path / "segments"
    shared.mkdir()
    shared.chmod(0o777)
    assert_one_line_exit_2(run_exporter("--shm.dir", str(shared)), str(shared), "sticky bit", "chmod 1777")
    shared.chmod(0o1777)  # as /dev/shm: only a segment's owner may remove it
    assert "listening on" in start_exporter("--shm.dir", str(shared)).log()


@pytest.mark.parametrize("cost", ["04", "31", "99"])
def test_a_web_config_with_a_bcrypt_cost_outside_10_to_16_exits_2(tmp_path, cost):
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users:\n  alice: '$2b${cost}${'a' * 53}'\n")
    assert_one_line_exit_2(run_exporter("--web.config.file", str(config)), f"bcrypt cost {cost}, outside 10-16")


def test_invalid_web_config_exits_2(tmp_path):
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n")
    assert_one_line_exit_2(run_exporter("--web.config.file", str(config)), str(config))


def test_port_in_use_exits_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert_one_line_exit_2(run_exporter(f"--web.listen-address=127.0.0.1:{port}"), f"127.0.0.1:{port}", "in use")


def test_environment_sets_flags_and_flags_win(start_exporter, shm_dir):
    exporter = start_exporter(
        "--collector.host",
        env={
            "ALNAIR_COLLECTOR_HOST": "false",
            "ALNAIR_COLLECTOR_CUDA": "false",
            "ALNAIR_NODE_NAME": "gpu-node-7",
            "ALNAIR_SHM_DIR": str(shm_dir),
        },
    )
    host_ok = 'alnair_exporter_collector_success{collector="host"}'
    samples = wait_until(lambda: (s := parse_samples(requests.get(exporter.url + "/metrics").text)).get(host_ok) and s)
    assert samples['alnair_node_info{node="gpu-node-7"}'] == 1
    assert samples[host_ok] == 1  # enabled by the flag
    assert not any('collector="cuda"' in k for k in samples)  # disabled by the environment


def test_disable_defaults_keeps_only_named_collectors(start_exporter):
    exporter = start_exporter("--collector.disable-defaults", "--collector.host")
    text = requests.get(exporter.url + "/metrics").text
    assert 'collector="host"' in text and 'collector="cuda"' not in text


def test_disable_defaults_from_the_environment(start_exporter):
    exporter = start_exporter("--collector.cuda", env={"ALNAIR_COLLECTOR_DISABLE_DEFAULTS": "true"})
    text = requests.get(exporter.url + "/metrics").text
    assert 'collector="cuda"' in text and 'collector="host"' not in text
