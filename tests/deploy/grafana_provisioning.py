"""Grafana's file provisioning format (apiVersion 1), field by field, for the data source and dashboard provider files
of deploy/compose. Grafana publishes no schema for these files (only for dashboards); what is checked here comes from
the structs its provisioning reads the YAML into, in github.com/grafana/grafana:

- pkg/services/provisioning/datasources/types.go (commit 01c834234982c8ae5eba61acd1313c1c4443e9dd): configsV1,
  upsertDataSourceFromConfigV1, deleteDatasourceConfigV1; config_reader.go: access is proxy or direct, at most one
  default data source per organization, orgId 0 means 1.
- pkg/services/provisioning/dashboards/types.go (1411ff8797bd3fc717e206d6afa9bd1fccd9567f): configV1, configs;
  config_reader.go (0524cbafcfcf42e76480675784159fd31136e4d2): provider names unique, type "file" by default; the
  file reader's options `path` (required) and `foldersFromFilesStructure`, which Grafana's documentation says
  cannot be combined with `folder` or `folderUid`.

Stricter than Grafana in two ways, on purpose: Grafana ignores keys it does not know (a typo is silently dropped), these
checks refuse them; and each value must have its YAML type, where Grafana also takes a string holding a $VARIABLE (these
files use none). Each function returns problems, one line each; none means the file is well formed."""

from __future__ import annotations

import re

DATASOURCE_FILE_KEYS = {"apiVersion", "datasources", "deleteDatasources"}
DATASOURCE_KEYS = {
    "orgId": int,
    "orgName": str,
    "version": int,
    "name": str,
    "type": str,
    "access": str,
    "url": str,
    "user": str,
    "database": str,
    "basicAuth": bool,
    "basicAuthUser": str,
    "withCredentials": bool,
    "isDefault": bool,
    "correlations": list,
    "jsonData": dict,
    "secureJsonData": dict,
    "editable": bool,
    "uid": str,
}
DELETE_KEYS = {"orgId": int, "orgName": str, "name": str}
PROVIDER_FILE_KEYS = {"apiVersion", "providers"}
PROVIDER_KEYS = {
    "name": str,
    "type": str,
    "orgId": int,
    "folder": str,
    "folderUid": str,
    "editable": bool,
    "options": dict,
    "disableDeletion": bool,
    "updateIntervalSeconds": int,
    "allowUiUpdates": bool,
}
FILE_OPTIONS = {"path": str, "foldersFromFilesStructure": bool}
# Grafana's short UIDs: letters, digits, - and _, at most 40 characters.
UID = re.compile(r"[A-Za-z0-9_-]{1,40}")


def field_problems(where: str, item, fields: dict[str, type], required: tuple[str, ...] = ()) -> list[str]:
    """Unknown keys, values of the wrong type and missing required values of one mapping."""
    if not isinstance(item, dict):
        return [f"{where}: not a mapping"]
    problems = [f"{where}: unknown key {key!r}" for key in item if key not in fields]
    for key, kind in fields.items():
        value = item.get(key)
        # bool is an int to Python, never to Grafana's YAML decoder
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            problems.append(f"{where}: {key} must be {kind.__name__}, not {value!r}")
    problems += [f"{where}: {key} is required" for key in required if not item.get(key)]
    return problems


def file_problems(doc, keys: set[str]) -> list[str]:
    if not isinstance(doc, dict):
        return ["the file is not a mapping"]
    problems = [f"unknown top-level key {key!r}" for key in doc if key not in keys]
    if doc.get("apiVersion") != 1:
        problems.append(f"apiVersion must be 1, not {doc.get('apiVersion')!r}")
    return problems


def datasource_problems(doc) -> list[str]:
    problems = file_problems(doc, DATASOURCE_FILE_KEYS)
    if problems[:1] == ["the file is not a mapping"]:
        return problems
    defaults: dict[int, int] = {}
    for i, ds in enumerate(doc.get("datasources") or []):
        where = f"datasources[{i}]"
        problems += field_problems(where, ds, DATASOURCE_KEYS, ("name", "type"))
        if not isinstance(ds, dict):
            continue
        if ds.get("access", "proxy") not in ("proxy", "direct"):
            problems.append(f"{where}: access must be proxy or direct, not {ds['access']!r}")
        if "uid" in ds and not UID.fullmatch(str(ds["uid"])):
            problems.append(f"{where}: uid {ds['uid']!r} is not a Grafana UID")
        if ds.get("isDefault") is True:
            org = ds.get("orgId") or 1
            defaults[org] = defaults.get(org, 0) + 1
    problems += [f"organization {org} has {n} default data sources" for org, n in defaults.items() if n > 1]
    for i, gone in enumerate(doc.get("deleteDatasources") or []):
        problems += field_problems(f"deleteDatasources[{i}]", gone, DELETE_KEYS, ("name",))
    return problems


def provider_problems(doc) -> list[str]:
    problems = file_problems(doc, PROVIDER_FILE_KEYS)
    if problems[:1] == ["the file is not a mapping"]:
        return problems
    names = [p.get("name") for p in doc.get("providers") or [] if isinstance(p, dict)]
    problems += [f"provider name {n!r} is not unique" for n in sorted({n for n in names if names.count(n) > 1})]
    for i, provider in enumerate(doc.get("providers") or []):
        problems += one_provider_problems(f"providers[{i}]", provider)
    return problems


def one_provider_problems(where: str, provider) -> list[str]:
    problems = field_problems(where, provider, PROVIDER_KEYS, ("name",))
    if not isinstance(provider, dict):
        return problems
    if provider.get("type", "file") != "file":
        problems.append(f"{where}: type {provider['type']!r}: only the file provider is built in")
    options = provider.get("options")
    problems += field_problems(f"{where}.options", options, FILE_OPTIONS, ("path",))
    if isinstance(options, dict) and isinstance(options.get("path"), str) and not options["path"].startswith("/"):
        problems.append(f"{where}.options: path {options['path']!r} is not absolute")
    if (
        isinstance(options, dict)
        and options.get("foldersFromFilesStructure")
        and (provider.get("folder") or provider.get("folderUid"))
    ):
        problems.append(f"{where}: foldersFromFilesStructure cannot be combined with folder or folderUid")
    if "folderUid" in provider and not UID.fullmatch(str(provider["folderUid"])):
        problems.append(f"{where}: folderUid {provider['folderUid']!r} is not a Grafana UID")
    return problems
