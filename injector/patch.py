"""What injection adds to a pod, as RFC 6902 operations: the library and segment volumes, their mounts and the
intercepts' environment in every container, limits from the pod's annotations (docs/injection.md).

Idempotent by content: each volume, mount and variable is added only where it is missing, so reviewing an
injected pod again yields no operation, and a container another webhook added since gets what it lacks
(reinvocationPolicy IfNeeded)."""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from . import limits

INJECT_LABEL = "alnair.io/inject"
INJECTED = "alnair.io/injected"
MEMORY_LIMIT = "alnair.io/memory-limit"
COMPUTE_LIMIT = "alnair.io/compute-limit"
PYTHON_INTERCEPT = "alnair.io/python-intercept"

LIB_VOLUME, SHM_VOLUME = "alnair-lib", "alnair-shm"
LIB_MOUNT, SHM_MOUNT = "/opt/alnair", "/run/alnair/shm"
LIBRARY = f"{LIB_MOUNT}/lib/libalnair.so"
# The training-side package as `pip install --target python/` lays it out, with alnair-run's bootstrap
# sitecustomize.py at its top (the installer copies it there): a .pth file is read in site-packages only, never
# from PYTHONPATH, so the sitecustomize is what turns the intercept on at each interpreter's start.
PYTHON_PATH = f"{LIB_MOUNT}/python"

# Annotation -> (variable, its syntax's check): the intercept's own grammar (injector/limits.py).
LIMITS = {MEMORY_LIMIT: ("ALNAIR_MEMORY_LIMIT", limits.memory_limit),
          COMPUTE_LIMIT: ("ALNAIR_COMPUTE_LIMIT", limits.compute_limit)}
SHOWN_AT_MOST = 150  # characters of a refused value in the message, as the intercept cuts its own line
_PRELOAD_SEPARATORS = re.compile(r"[:\s]+")  # ld.so splits LD_PRELOAD on colons and white space


@dataclass(frozen=True)
class Settings:
    library_host_path: str
    shm_host_path: str
    python_intercept_default: bool
    version: str


class Refused(Exception):
    """A bad annotation value: the review answers allowed false with this message."""


class NotAPod(Exception):
    """The object lacks the shape of a Pod where injection reads it."""


@dataclass
class Mutation:
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def mutate(pod: Any, settings: Settings) -> Mutation:
    """The operations that inject `pod`; none for a pod labelled alnair.io/inject: "false". Raises Refused for
    a bad annotation, NotAPod for an object that is not shaped as one."""
    pod = _mapping(pod, "it")
    metadata = _mapping(pod.get("metadata", {}), "/metadata")
    if _strings(metadata.get("labels", {}), "/metadata/labels").get(INJECT_LABEL) == "false":
        return Mutation()
    annotations = _strings(metadata.get("annotations", {}), "/metadata/annotations")
    wanted = wanted_environment(annotations, settings.python_intercept_default)
    spec = _mapping(pod.get("spec"), "/spec")
    mutation = Mutation(volume_operations(spec, settings))
    for index, container in enumerate(_list(spec.get("containers"), "/spec/containers")):
        where = f"/spec/containers/{index}"
        container = _mapping(container, where)
        mutation.patch += mount_operations(container, where)
        mutation.patch += env_operations(container, where, wanted, mutation.warnings)
    if INJECTED not in annotations:
        mutation.patch.append(annotation_operation(metadata, settings.version))
    return mutation


def wanted_environment(annotations: dict[str, str], python_default: bool) -> dict[str, str]:
    """ALNAIR_* for every container, from the annotations; raises Refused naming each bad one and why."""
    wanted, problems = {"ALNAIR_SHM_DIR": SHM_MOUNT}, []
    for annotation, (variable, check) in LIMITS.items():
        value = annotations.get(annotation, "")  # empty is unset, as the intercept reads an empty variable
        why = check(value) if value else None
        if why:
            problems.append(f"annotation {annotation}={quoted(value)}: {why} (the syntax of {variable})")
        elif value:
            wanted[variable] = value
    python = annotations.get(PYTHON_INTERCEPT, "")
    if python not in ("", "true", "false"):
        problems.append(f'annotation {PYTHON_INTERCEPT}={quoted(python)}: want "true" or "false"')
    if problems:
        raise Refused("; ".join(problems))
    if python == "true" or (python == "" and python_default):
        wanted["ALNAIR_PYTHON_INTERCEPT"] = "1"
    return wanted


def volume_operations(spec: dict, settings: Settings) -> list[dict]:
    """The two hostPath volumes, unless the pod already has volumes of those names (then they are used)."""
    volumes = _list(spec.get("volumes", []), "/spec/volumes")
    names = {_mapping(v, f"/spec/volumes/{i}").get("name") for i, v in enumerate(volumes)}
    missing = [{"name": name, "hostPath": {"path": path, "type": "Directory"}}
               for name, path in ((LIB_VOLUME, settings.library_host_path), (SHM_VOLUME, settings.shm_host_path))
               if name not in names]
    return _appended("/spec/volumes", "volumes" in spec, missing)


def mount_operations(container: dict, where: str) -> list[dict]:
    """The library read-only and the segment directory, unless something is mounted at that path already (a
    second mount there is invalid)."""
    mounts = _list(container.get("volumeMounts", []), f"{where}/volumeMounts")
    taken = {posixpath.normpath(str(_mapping(m, f"{where}/volumeMounts/{i}").get("mountPath", "")))
             for i, m in enumerate(mounts)}
    missing = [mount for mount in ({"name": LIB_VOLUME, "mountPath": LIB_MOUNT, "readOnly": True},
                                   {"name": SHM_VOLUME, "mountPath": SHM_MOUNT})
               if mount["mountPath"] not in taken]
    return _appended(f"{where}/volumeMounts", "volumeMounts" in container, missing)


def env_operations(container: dict, where: str, wanted: dict[str, str], warnings: list[str]) -> list[dict]:
    """LD_PRELOAD (and PYTHONPATH with the Python intercept) extended, the wanted ALNAIR_* added where the
    container does not set them: a container's own value wins."""
    env = [_mapping(e, f"{where}/env/{i}") for i, e in enumerate(_list(container.get("env", []), f"{where}/env"))]
    index = {e.get("name"): i for i, e in enumerate(env)}  # a name given twice: the last one is the one in force
    extended = {"LD_PRELOAD": _with_library}
    if "ALNAIR_PYTHON_INTERCEPT" in wanted:
        extended["PYTHONPATH"] = _with_python_path
    operations, added = [], []
    for name, extend in extended.items():
        entry = env[index[name]] if name in index else None
        if entry is None:
            added.append({"name": name, "value": extend("")})
        elif "valueFrom" in entry:
            warnings.append(f"container {container.get('name')!r} sets {name} from valueFrom, which the webhook "
                            "cannot extend: it is left as it is, without Alnair's entry")
        elif (value := str(entry.get("value", ""))) != extend(value):
            operations.append({"op": "add", "path": f"{where}/env/{index[name]}/value", "value": extend(value)})
    added += [{"name": n, "value": v} for n, v in wanted.items() if n not in index]
    return operations + _appended(f"{where}/env", "env" in container, added)


def annotation_operation(metadata: dict, version: str) -> dict:
    if "annotations" not in metadata:
        return {"op": "add", "path": "/metadata/annotations", "value": {INJECTED: version}}
    return {"op": "add", "path": f"/metadata/annotations/{_pointer(INJECTED)}", "value": version}


def _with_library(value: str) -> str:
    """LD_PRELOAD with the library appended after what the container preloads, once."""
    if LIBRARY in _PRELOAD_SEPARATORS.split(value):
        return value
    return f"{value}:{LIBRARY}" if value else LIBRARY


def _with_python_path(value: str) -> str:
    """PYTHONPATH led by Alnair's entry, once; the rest kept byte for byte (an empty entry means the cwd)."""
    if PYTHON_PATH in value.split(":"):
        return value
    return f"{PYTHON_PATH}:{value}" if value else PYTHON_PATH


def _appended(path: str, exists: bool, items: list[dict]) -> list[dict]:
    """Operations adding items to the list at path: the list itself when the object has none yet."""
    if not items:
        return []
    if not exists:
        return [{"op": "add", "path": path, "value": items}]
    return [{"op": "add", "path": f"{path}/-", "value": item} for item in items]


def quoted(value: str) -> str:
    """A value for the message: in quotes, control and non-ASCII characters, quotes and backslashes escaped (one
    line whatever it holds), cut short past SHOWN_AT_MOST characters."""
    shown = "".join(c if " " <= c < "\x7f" and c not in '"\\' else _escaped(c) for c in value[:SHOWN_AT_MOST])
    return f'"{shown}{"..." if len(value) > SHOWN_AT_MOST else ""}"'


def _escaped(character: str) -> str:
    return "".join(f"\\x{byte:02x}" for byte in character.encode("utf-8", "surrogatepass"))


def _pointer(key: str) -> str:
    """A key as one JSON Pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise NotAPod(f"{where} is not an object")
    return value


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise NotAPod(f"{where} is not a list")
    return value


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise NotAPod(f"{where} is not a map of strings")
    return value
