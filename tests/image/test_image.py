"""The Dockerfile's two images, built and run with real podman on a Debian base that debootstrap makes
(docs/image.md): the exporter serves /metrics as its non-root user and holds no compiler; the installer
lays out a version that a plain Python on the host runs the intercepts from; hadolint passes the file.

Podman runs rootful with runc (crun refuses this kernel's hybrid cgroups) and explicit ulimits."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from debian_base import LIMITS, podman_command, run
from project_images import EXPORTER_IMAGE, INTERCEPT_IMAGE, SOURCE, VERSION, base_image as make_base_image, build
from support import (
    ROOT,
    free_port,
    newest_glibc_needed,
    parse_samples,
    python_records,
    read_line,
    require_binary,
    scrape_text,
    wait_until,
)

# What the chart's securityContext allows both containers: a read-only root and no capability at all.
RESTRICTED = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
UID = 65532


@pytest.fixture(scope="module")
def podman() -> list[str]:
    return podman_command()


@pytest.fixture(scope="module")
def base_image(podman, tmp_path_factory) -> str:
    return make_base_image(podman, tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def exporter_image(podman, base_image) -> str:
    return build(podman, "exporter", EXPORTER_IMAGE)


@pytest.fixture(scope="module")
def intercept_image(podman, base_image) -> str:
    return build(podman, "intercept", INTERCEPT_IMAGE)


def inspect(podman: list[str], image: str) -> dict:
    [data] = json.loads(run([*podman, "image", "inspect", image]).stdout)
    return data


def in_container(podman: list[str], image: str, script: str, user: str | None = None) -> str:
    """The stdout of a shell script run in a fresh container of image."""
    result = run(
        [
            *podman,
            "run",
            "--rm",
            *LIMITS,
            *(["--user", user] if user else []),
            "--entrypoint",
            "/bin/sh",
            image,
            "-c",
            script,
        ]
    )
    return result.stdout


def test_hadolint_passes_the_dockerfile():
    hadolint = require_binary("hadolint")
    result = run([hadolint, "--no-color", str(ROOT / "Dockerfile")], check=False)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    # and it does lint: an unpinned install is found in a file that has no ignore comment for it
    bad = run([hadolint, "--no-color", "-"], check=False, input="FROM debian:bookworm\nRUN apt-get install -y gcc\n")
    assert bad.returncode == 1 and "DL3008" in bad.stdout, bad.stdout


def test_every_hadolint_ignore_says_why():
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    for i in [i for i, line in enumerate(lines) if line.startswith("# hadolint ignore=")]:
        assert i > 0 and lines[i - 1].startswith("# ") and "hadolint" not in lines[i - 1], lines[i]


def test_exporter_serves_its_version_and_the_host_cpus_and_stops_on_sigterm(podman, exporter_image):
    port = free_port()
    name = f"alnair-test-{uuid.uuid4().hex[:12]}"
    run(
        [
            *podman,
            "run",
            "--detach",
            "--name",
            name,
            "--network",
            "host",
            *LIMITS,
            *RESTRICTED,
            exporter_image,
            f"--web.listen-address=127.0.0.1:{port}",
        ]
    )
    try:

        def answered() -> str | None:  # with the host collector's first sample (each samples on its own thread)
            state = json.loads(run([*podman, "inspect", "--format", "{{json .State}}", name]).stdout)
            assert state["Running"], run([*podman, "logs", name]).stderr
            try:
                text = scrape_text(f"http://127.0.0.1:{port}")
            except OSError:
                return None
            return text if "\nalnair_host_cpus " in text else None

        samples = parse_samples(wait_until(answered, timeout=60, interval=0.2))
        [info] = [k for k in samples if k.startswith("alnair_exporter_build_info{")]
        assert f'version="{VERSION}"' in info, info
        assert samples["alnair_host_cpus"] > 0
        run([*podman, "stop", "--time", "30", name])  # SIGTERM to the exporter, pid 1 in the container
        assert run([*podman, "inspect", "--format", "{{.State.ExitCode}}", name]).stdout.strip() == "0"
        assert "shutting down" in run([*podman, "logs", name]).stderr
    finally:
        run([*podman, "rm", "--force", name], check=False)


def test_exporter_image_config_labels_user_and_port(podman, exporter_image):
    config = inspect(podman, exporter_image)["Config"]
    assert config["Entrypoint"] == ["alnair-exporter"]
    assert config["User"] == f"{UID}:{UID}"
    assert set(config["ExposedPorts"]) == {"9876/tcp"}
    labels = config["Labels"]
    assert (
        labels["org.opencontainers.image.version"],
        labels["org.opencontainers.image.licenses"],
        labels["org.opencontainers.image.source"],
    ) == (VERSION, "Apache-2.0", SOURCE)


def test_exporter_runs_as_its_fixed_non_root_user(podman, exporter_image):
    assert in_container(podman, exporter_image, "id -u; id -g; id -un") == f"{UID}\n{UID}\nalnair\n"


def test_exporter_image_holds_no_compiler_no_pip_and_no_bytecode_of_its_own(podman, exporter_image):
    found = in_container(
        podman,
        exporter_image,
        textwrap.dedent("""
        for c in gcc cc c++ g++ cpp clang make as ld pip pip3; do command -v "$c"; done
        ls -d /usr/lib/gcc /usr/libexec/gcc 2>/dev/null
        find /opt/alnair /root /tmp -name '*.pyc' -o -name __pycache__ -o -name .cache
        true
    """),
        user="0",
    )
    assert found == ""
    # the venv is whole: the library is there and the exporter side imports
    code = "import alnair.intercept as i, prometheus_client, psutil; print(i.library_path().is_file())"
    assert in_container(podman, exporter_image, f"python3 -c '{code}'") == "True\n"


def test_installer_image_is_busybox_the_library_and_the_package(podman, intercept_image):
    data = inspect(podman, intercept_image)
    assert data["Config"]["Cmd"] == ["/install", "/host"]
    assert data["Config"]["Labels"]["org.opencontainers.image.version"] == VERSION
    assert data["Size"] < 8 * 2**20, data["Size"]
    mounted = Path(run([*podman, "image", "mount", intercept_image]).stdout.strip())
    try:
        assert sorted(p.name for p in mounted.iterdir()) == ["alnair", "bin", "install"]
        assert sorted(p.name for p in (mounted / "alnair").iterdir()) == ["VERSION", "lib", "python"]
        programs = {
            str(p.relative_to(mounted))
            for p in mounted.rglob("*")
            if p.is_file() and not p.is_symlink() and p.read_bytes()[:4] == b"\x7fELF"
        }
        assert programs == {"bin/busybox", "alnair/lib/libalnair.so", "alnair/python/alnair/intercept/libalnair.so"}
        assert newest_glibc_needed(mounted / "alnair" / "lib" / "libalnair.so") == "GLIBC_2.17"  # not the base's 2.36
        assert os.readlink(mounted / "bin" / "sh") == "busybox"
    finally:
        run([*podman, "image", "unmount", intercept_image])


def install(podman: list[str], image: str, dest: Path, *command: str) -> subprocess.CompletedProcess:
    """The installer as the chart's init container runs it: root, without a capability."""
    return run(
        [*podman, "run", "--rm", *LIMITS, *RESTRICTED, "--user", "0", "--volume", f"{dest}:/host", image, *command],
        check=False,
    )


def snapshot(tree: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(tree)): (s.st_ino, s.st_mtime_ns, s.st_mode)
        for p in sorted(tree.rglob("*"))
        for s in [p.lstat()]
    }


def test_installer_lays_out_the_version_atomically_and_leaves_it_on_a_second_run(podman, intercept_image, tmp_path):
    dest = tmp_path / "host"
    dest.mkdir()
    first = install(podman, intercept_image, dest)
    assert (first.returncode, first.stdout, first.stderr) == (0, f"install: installed /host/{VERSION}\n", "")
    assert [p.name for p in dest.iterdir()] == [VERSION]  # the temporary copy was renamed, nothing else written
    tree = dest / VERSION
    assert sorted(p.name for p in tree.iterdir()) == ["lib", "python"]
    assert (tree / "lib" / "libalnair.so").read_bytes()[:4] == b"\x7fELF"
    for name in ("sitecustomize.py", "alnair/__init__.py", "alnair/intercept/activation.py", "alnair/abi/layout.py"):
        assert (tree / "python" / name).is_file(), name
    assert list((tree / "python").glob(f"alnair_gpu-{VERSION}.dist-info/METADATA"))  # alnair.__version__ reads it
    for path in [tree, *tree.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_dir():
            assert mode == 0o755, (path, oct(mode))
        else:
            assert mode & 0o444 == 0o444 and mode & 0o022 == 0, (path, oct(mode))
    before = snapshot(tree)
    second = install(podman, intercept_image, dest)
    assert (second.returncode, second.stdout) == (0, f"install: /host/{VERSION} is already installed\n")
    assert [p.name for p in dest.iterdir()] == [VERSION] and snapshot(tree) == before


def test_installer_refuses_a_missing_destination_and_bad_usage(podman, intercept_image, tmp_path):
    missing = install(podman, intercept_image, tmp_path, "/install", "/host/absent")
    assert (missing.returncode, missing.stderr) == (2, "install: /host/absent is not a directory\n")
    usage = install(podman, intercept_image, tmp_path, "/install")
    assert (usage.returncode, usage.stderr) == (2, "usage: /install DEST\n")
    assert list(tmp_path.iterdir()) == []


PROGRAM = textwrap.dedent("""
    import sys
    import alnair
    alnair.counter("images_decoded").inc(5)
    with open("/proc/self/maps") as maps:
        preloaded = any(line.rstrip().endswith("/lib/libalnair.so") for line in maps)
    activated = "alnair.intercept.activation" in sys.modules
    print("ready", alnair.__file__, alnair.__version__, activated, preloaded, flush=True)
    sys.stdin.read()
""")


def test_a_python_without_alnair_runs_both_intercepts_from_the_installed_version(podman, intercept_image, tmp_path):
    dest, shm = tmp_path / "host", tmp_path / "shm"
    dest.mkdir()
    shm.mkdir()
    assert install(podman, intercept_image, dest).returncode == 0
    tree = dest / VERSION
    venv = tmp_path / "venv"  # a workload's Python: nothing of this checkout's install in it
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALNAIR_", "PYTHON")) and k != "LD_PRELOAD"}
    env |= {
        "PYTHONPATH": str(tree / "python"),
        "LD_PRELOAD": str(tree / "lib" / "libalnair.so"),
        "ALNAIR_SHM_DIR": str(shm),
        "ALNAIR_PYTHON_INTERCEPT": "1",
    }
    proc = subprocess.Popen(
        [str(venv / "bin" / "python"), "-c", PROGRAM],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        line = read_line(proc.stdout, 60)
        assert line.split()[1:] == [str(tree / "python" / "alnair" / "__init__.py"), VERSION, "True", "True"], line
        record = wait_until(lambda: python_records(shm).get(proc.pid), timeout=60)
        assert {c.name: c.value for c in record.counters[: record.counter_count]} == {b"images_decoded": 5}
        proc.stdin.close()
        assert (proc.wait(30), proc.stderr.read()) == (0, "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            print("the program's stderr:", proc.stderr.read())  # shown with the failure
