"""What injection adds to a pod, as RFC 6902 operations: the library and segment volumes, their mounts and the
intercepts' environment in every container, limits from the pod's annotations, each checked as the library
would read it, as are the limits a container sets itself (docs/injection.md).

Idempotent by content: each volume, mount and variable is added only where it is missing, so reviewing an
injected pod again yields no operation, and a container another webhook added since gets what it lacks
(reinvocationPolicy IfNeeded)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import limits

INJECT_LABEL = "alnair.io/inject"
INJECTED = "alnair.io/injected"
MEMORY_LIMIT = "alnair.io/memory-limit"
COMPUTE_LIMIT = "alnair.io/compute-limit"
COMPUTE_SHARE = "alnair.io/compute-share"
PYTHON_INTERCEPT = "alnair.io/python-intercept"

LIB_VOLUME, SHM_VOLUME = "alnair-lib", "alnair-shm"
LIB_MOUNT, SHM_MOUNT = "/opt/alnair", "/run/alnair/shm"
LIBRARY = f"{LIB_MOUNT}/lib/libalnair.so"
# The training-side package as `pip install --target python/` lays it out, with alnair-run's bootstrap
# sitecustomize.py at its top (the installer copies it there): a .pth file is read in site-packages only, never
# from PYTHONPATH, so the sitecustomize is what turns the intercept on at each interpreter's start.
PYTHON_PATH = f"{LIB_MOUNT}/python"

# Annotation -> (variable, its syntax's check): the intercept's own grammar (injector/limits.py).
LIMITS = {
    MEMORY_LIMIT: ("ALNAIR_MEMORY_LIMIT", limits.memory_limit),
    COMPUTE_LIMIT: ("ALNAIR_COMPUTE_LIMIT", limits.compute_limit),
    COMPUTE_SHARE: ("ALNAIR_COMPUTE_SHARE", limits.compute_share),
}
OWN_LIMITS = dict(LIMITS.values())  # variable -> check, for the values containers set themselves
_NOUNS = {"containers": "container", "initContainers": "init container"}  # as messages name a container
SHOWN_AT_MOST = 150  # characters of a refused value in the message, as the intercept cuts its own line
_PRELOAD_SEPARATORS = re.compile(r"[:\s]+")  # ld.so splits LD_PRELOAD on colons and white space


@dataclass(frozen=True)
class Settings:
    library_host_path: str
    shm_host_path: str
    python_intercept_default: bool
    version: str


class Refused(Exception):
    """A bad annotation value, or a bad limit a container sets: the review answers allowed false with this
    message."""


class NotAPod(Exception):
    """The object lacks the shape of a Pod where injection reads it."""


@dataclass(frozen=True)
class Container:
    """One of the pod's containers, its shape checked where injection reads it."""

    where: str  # its JSON Pointer
    label: str  # as messages name it: container 'trainer', init container 'fetch'
    fields: dict
    env: list[dict]


@dataclass
class Mutation:
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def mutate(pod: Any, settings: Settings) -> Mutation:
    """The operations that inject `pod`; none for a pod labelled alnair.io/inject: "false". Raises Refused for
    a bad annotation or a bad limit a container sets, NotAPod for an object that is not shaped as one."""
    pod = _mapping(pod, "it")
    metadata = _metadata(pod)
    if _strings(metadata.get("labels", {}), "/metadata/labels").get(INJECT_LABEL) == "false":
        return Mutation()
    annotations = _strings(metadata.get("annotations", {}), "/metadata/annotations")
    spec = _mapping(pod.get("spec"), "/spec")
    injected = containers(spec, "containers")  # not init containers: setup steps, rarely GPU programs
    mutation = Mutation()
    check(annotations, injected + containers(spec, "initContainers"), mutation.warnings)
    wanted = wanted_environment(annotations, settings.python_intercept_default)
    mutation.patch += volume_operations(spec, settings)
    for container in injected:
        mutation.patch += mount_operations(container)
        mutation.patch += env_operations(container, wanted, mutation.warnings)
    if INJECTED not in annotations:
        mutation.patch.append(annotation_operation(metadata, settings.version))
    return mutation


def containers(spec: dict, kind: str) -> list[Container]:
    """The pod's containers or initContainers (which may be absent), shape checked."""
    where, noun = f"/spec/{kind}", _NOUNS[kind]
    items = _list(spec.get(kind, None if kind == "containers" else []), where)  # a pod must have containers
    found = []
    for index, item in enumerate(items):
        fields = _mapping(item, f"{where}/{index}")
        name = _string(fields.get("name", ""), f"{where}/{index}/name")
        env = _list(fields.get("env", []), f"{where}/{index}/env")
        found.append(
            Container(
                f"{where}/{index}",
                f"{noun} {name!r}",
                fields,
                [_variable(e, f"{where}/{index}/env/{i}") for i, e in enumerate(env)],
            )
        )
    return found


def check(annotations: dict[str, str], checked: list[Container], warnings: list[str]) -> None:
    """Raises Refused naming each bad annotation and each bad limit a container sets itself, and why: the
    library would ignore either, and a container's own value wins over the annotation's."""
    problems = annotation_problems(annotations)
    for container in checked:
        problems += own_limit_problems(container, warnings)
    if problems:
        raise Refused("; ".join(problems))


def annotation_problems(annotations: dict[str, str]) -> list[str]:
    problems = []
    for annotation, (variable, syntax) in LIMITS.items():
        value = annotations.get(annotation, "")
        if why := _why(syntax, value):
            problems.append(f"annotation {annotation}={quoted(value)}: {why} (the syntax of {variable})")
    python = annotations.get(PYTHON_INTERCEPT, "")
    if python not in ("", "true", "false"):
        problems.append(f'annotation {PYTHON_INTERCEPT}={quoted(python)}: want "true" or "false"')
    return problems


def own_limit_problems(container: Container, warnings: list[str]) -> list[str]:
    """Every entry of the container's limits the library would ignore, a name given twice included (a later
    entry wins, but the earlier one is a mistake all the same). A value from valueFrom is read when the
    container starts, from an object the webhook is not sent: admitted, with a warning."""
    problems = []
    for entry in container.env:
        name, value = entry.get("name", ""), entry.get("value", "")
        if name not in OWN_LIMITS:
            continue
        if "valueFrom" in entry:
            warnings.append(
                f"{container.label} sets {name} from valueFrom, which the webhook cannot check: if the "
                "library refuses its value, that container runs without the limit (the library says "
                "so on its stderr)"
            )
        elif why := _why(OWN_LIMITS[name], value):
            problems.append(f"{container.label} sets {name}={quoted(value)}: {why}")
    return problems


def wanted_environment(annotations: dict[str, str], python_default: bool) -> dict[str, str]:
    """ALNAIR_* for every container, from the (checked) annotations."""
    wanted = {"ALNAIR_SHM_DIR": SHM_MOUNT}
    wanted.update((variable, annotations[a]) for a, (variable, _) in LIMITS.items() if annotations.get(a))
    python = annotations.get(PYTHON_INTERCEPT, "")
    if python == "true" or (python == "" and python_default):
        wanted["ALNAIR_PYTHON_INTERCEPT"] = "1"
    return wanted


def volume_operations(spec: dict, settings: Settings) -> list[dict]:
    """The two hostPath volumes, unless the pod already has volumes of those names (then they are used)."""
    volumes = _list(spec.get("volumes", []), "/spec/volumes")
    names = {
        _string(_mapping(v, f"/spec/volumes/{i}").get("name", ""), f"/spec/volumes/{i}/name")
        for i, v in enumerate(volumes)
    }
    missing = [
        {"name": name, "hostPath": {"path": path, "type": "Directory"}}
        for name, path in ((LIB_VOLUME, settings.library_host_path), (SHM_VOLUME, settings.shm_host_path))
        if name not in names
    ]
    return _appended("/spec/volumes", "volumes" in spec, missing)


def mount_operations(container: Container) -> list[dict]:
    """The library read-only and the segment directory, unless something is mounted at that path already (a
    second mount there is invalid)."""
    where = f"{container.where}/volumeMounts"
    mounts = _list(container.fields.get("volumeMounts", []), where)
    taken = {
        posixpath.normpath(_string(_mapping(m, f"{where}/{i}").get("mountPath", ""), f"{where}/{i}/mountPath"))
        for i, m in enumerate(mounts)
    }
    missing = [
        mount
        for mount in (
            {"name": LIB_VOLUME, "mountPath": LIB_MOUNT, "readOnly": True},
            {"name": SHM_VOLUME, "mountPath": SHM_MOUNT},
        )
        if mount["mountPath"] not in taken
    ]
    return _appended(where, "volumeMounts" in container.fields, missing)


def env_operations(container: Container, wanted: dict[str, str], warnings: list[str]) -> list[dict]:
    """LD_PRELOAD (and PYTHONPATH with the Python intercept) extended, the wanted ALNAIR_* added where the
    container does not set them: a container's own value wins."""
    env, where = container.env, f"{container.where}/env"
    index = {e.get("name", ""): i for i, e in enumerate(env)}  # a name given twice: the last one is the one in force
    extended = {"LD_PRELOAD": _with_library}
    if "ALNAIR_PYTHON_INTERCEPT" in wanted:
        extended["PYTHONPATH"] = _with_python_path
    operations, added = [], []
    for name, extend in extended.items():
        entry = env[index[name]] if name in index else None
        if entry is None:
            added.append({"name": name, "value": extend("")})
        elif "valueFrom" in entry:
            warnings.append(
                f"{container.label} sets {name} from valueFrom, which the webhook cannot extend: it is "
                "left as it is, without Alnair's entry"
            )
        elif (value := entry.get("value", "")) != extend(value):
            operations.append({"op": "add", "path": f"{where}/{index[name]}/value", "value": extend(value)})
    added += [{"name": n, "value": v} for n, v in wanted.items() if n not in index]
    return operations + _appended(where, "env" in container.fields, added)


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
    """A value for the message: in quotes, escaped, cut short past SHOWN_AT_MOST characters."""
    return f'"{escaped(value[:SHOWN_AT_MOST])}{"..." if len(value) > SHOWN_AT_MOST else ""}"'


def escaped(text: str) -> str:
    """Text on one line whatever it holds: control and non-ASCII characters, quotes and backslashes as \\xNN."""
    return "".join(c if " " <= c < "\x7f" and c not in '"\\' else _hex_bytes(c) for c in text)


def _hex_bytes(character: str) -> str:
    return "".join(f"\\x{byte:02x}" for byte in character.encode("utf-8", "surrogatepass"))


def _pointer(key: str) -> str:
    """A key as one JSON Pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _why(syntax: Callable[[str], str | None], value: str) -> str | None:
    """Why the library would ignore a limit; an empty value is unset, as the library reads an empty variable."""
    return syntax(value) if value else None


def _metadata(pod: dict) -> dict:
    metadata = _mapping(pod.get("metadata", {}), "/metadata")
    for key in ("name", "generateName"):  # the log names the pod by them
        _string(metadata.get(key, ""), f"/metadata/{key}")
    return metadata


def _variable(entry: Any, where: str) -> dict:
    """An env entry whose name and value, where given, are strings."""
    entry = _mapping(entry, where)
    for key in ("name", "value"):
        _string(entry.get(key, ""), f"{where}/{key}")
    return entry


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise NotAPod(f"{where} is not a string")
    return value


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
