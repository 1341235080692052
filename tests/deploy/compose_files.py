"""deploy/compose as files: the compose file's services and their bind mounts, resolved to paths of this checkout, so
the tests check what the containers will see rather than a copy of it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from support import ROOT

COMPOSE_DIR = ROOT / "deploy" / "compose"
COMPOSE = COMPOSE_DIR / "compose.yaml"
GPU_OVERRIDE = COMPOSE_DIR / "compose.gpu.yaml"
# ${NAME:-default}: the one interpolation form the compose file uses (docker compose and podman-compose both read it).
VARIABLE = re.compile(r"\$\{(\w+):-([^}]*)\}")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def service(name: str) -> dict:
    return load(COMPOSE)["services"][name]


def with_defaults(value: str) -> str:
    """A compose value as it is when no variable is set."""
    return VARIABLE.sub(lambda m: m.group(2), value)


def bind_mounts(name: str) -> dict[str, Path]:
    """A service's bind mounts, container path -> host path (relative sources are relative to the compose file's
    folder, as both tools resolve them); named volumes are left out."""
    mounts = {}
    for volume in service(name).get("volumes", []):
        source, target = with_defaults(volume).split(":")[:2]
        if source.startswith((".", "/")):
            mounts[target] = (COMPOSE_DIR / source).resolve()
    return mounts


def host_path(name: str, container_path: str) -> Path:
    """The file of this checkout that a service sees at container_path, through the longest mount above it."""
    mounts = bind_mounts(name)
    above = [m for m in mounts if container_path == m or container_path.startswith(m.rstrip("/") + "/")]
    assert above, f"{name} mounts nothing at {container_path}"
    mount = max(above, key=len)
    return mounts[mount] / container_path[len(mount) :].lstrip("/")


def flag(name: str, option: str) -> str:
    """The value of --option=VALUE in a service's command."""
    [value] = [a.split("=", 1)[1] for a in service(name)["command"] if a.startswith(f"{option}=")]
    return value
