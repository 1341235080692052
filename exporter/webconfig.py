"""The exporter-toolkit web config file (--web.config.file): TLS, basic auth and extra
response headers for the HTTP endpoint, validated as strictly as node_exporter does."""
from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import ssl
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import yaml


class WebConfigError(Exception):
    """The web config file cannot be used; the message is one line naming file and problem."""

    def __init__(self, path: str, problem: str):
        super().__init__(" ".join(f"web config {path}: {problem}".split()))


class _Invalid(Exception):
    """A problem found while parsing; load_web_config adds the file name."""


_SECTIONS = {"tls_server_config", "http_server_config", "basic_auth_users"}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
# Go crypto/tls tuning with no stdlib equivalent: accepted so node_exporter configs load unchanged.
_TLS_IGNORED = {"cipher_suites", "prefer_server_cipher_suites", "curve_preferences"}
# http.server speaks HTTP/1.1 only, so the http2 switch has nothing to switch.
_HTTP_IGNORED = {"http2"}

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# client_auth_type -> (verify_mode, whether client_ca_file is required).
_CLIENT_AUTH = {
    "NoClientCert": (ssl.CERT_NONE, False),
    # Go asks for a cert but never checks or uses it, so it grants nothing: same as not asking.
    "RequestClientCert": (ssl.CERT_NONE, False),
    # stdlib ssl cannot accept an unverified client cert; verifying against the CA is the
    # stricter reading, never a looser one. "RequireClientCert" is Go's legacy alias.
    "RequireAnyClientCert": (ssl.CERT_REQUIRED, True),
    "RequireClientCert": (ssl.CERT_REQUIRED, True),
    "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, True),
    "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, True),
}

# exporter-toolkit's allow-list: header -> allowed values (empty: any value).
_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
# Below 10 a stolen hash is cheap to crack; above 16 one login takes seconds of a core (31: days).
BCRYPT_COSTS = range(10, 17)
# bcrypt runs outside the GIL: this many logins are checked at once, so one slow check never holds up the
# rest, while a flood of guesses costs at most this many cores.
BCRYPT_PARALLEL = min(4, max(2, (os.cpu_count() or 1) // 2))
OUTCOMES_KEPT = 4096  # (user, password digest) -> verdict, least recently used dropped first


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Verdicts by (user, sha256 of the password): a repeated attempt, failed or not, costs a hash, not a bcrypt.
    _outcomes: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False, compare=False)
    _cache_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    _bcrypt_slots: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(BCRYPT_PARALLEL),
                                                      init=False, repr=False, compare=False)

    @property
    def auth_required(self) -> bool:
        return bool(self.basic_auth_users)

    def check_basic_auth(self, authorization_header: str | None) -> bool:
        """True when auth is off or the header carries a configured user's password."""
        if not self.auth_required:
            return True
        credentials = _parse_basic(authorization_header)
        if credentials is None:
            return False
        user, password = credentials
        key = (user, hashlib.sha256(password).digest())
        with self._cache_lock:
            known = self._outcomes.get(key)
            if known is not None:
                self._outcomes.move_to_end(key)
                return known
        hashed = self.basic_auth_users.get(user)
        # An unknown user is checked against a configured user's hash: the same cost, so the time taken
        # does not tell which users exist, and the verdict is still no.
        with self._bcrypt_slots:
            ok = _bcrypt_matches(password, hashed or next(iter(self.basic_auth_users.values()))) and hashed is not None
        with self._cache_lock:
            self._outcomes[key] = ok
            if len(self._outcomes) > OUTCOMES_KEPT:
                self._outcomes.popitem(last=False)
        return ok


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    scheme, _, encoded = (header or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except binascii.Error:
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


def _bcrypt_matches(password: bytes, hashed: bytes) -> bool:
    import bcrypt  # only configs with basic_auth_users need it

    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # bcrypt>=5 refuses passwords over 72 bytes, as Go's bcrypt does
        return False


def load_web_config(path: str | None) -> WebConfig:
    """Parse and validate the file; None or "" means plain HTTP without auth."""
    if not path:
        return WebConfig()
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block start-up forever, a directory fail later
            raise WebConfigError(path, "not a regular file")
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise WebConfigError(path, f"cannot read file: {e}") from None
    except yaml.YAMLError as e:
        raise WebConfigError(path, f"invalid YAML: {e}") from None
    try:
        return _build(_section(doc, "", _SECTIONS), os.path.dirname(os.path.abspath(path)))
    except _Invalid as e:
        raise WebConfigError(path, str(e)) from None


def _build(doc: dict, base_dir: str) -> WebConfig:
    tls = _section(doc.get("tls_server_config"), "tls_server_config", _TLS_KEYS | _TLS_IGNORED)
    http = _section(doc.get("http_server_config"), "http_server_config", {"headers"} | _HTTP_IGNORED)
    users = _section(doc.get("basic_auth_users"), "basic_auth_users", None)
    return WebConfig(
        ssl_context=_ssl_context(tls, base_dir),
        basic_auth_users=MappingProxyType(_users(users)),
        headers=MappingProxyType(_headers(http)),
    )


def _section(value: Any, name: str, allowed: set[str] | None) -> dict:
    """The mapping at `name` (empty when absent), refusing keys outside `allowed`."""
    what = name or "the top level"
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid(f"{what} must be a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise _Invalid(f"{what} has a non-string key {key!r} (quote it)")
        if allowed is not None and key not in allowed:
            raise _Invalid(f"unknown or unsupported key {name + '.' if name else ''}{key}")
    return value


def _string(section: dict, name: str, key: str) -> str | None:
    value = section.get(key)
    if value is not None and not isinstance(value, str):
        raise _Invalid(f"{name}.{key} must be a string, got {type(value).__name__}")
    return value or None


def _ssl_context(tls: dict, base_dir: str) -> ssl.SSLContext | None:
    if not tls:
        return None
    cert, key, ca = (_string(tls, "tls_server_config", k) for k in ("cert_file", "key_file", "client_ca_file"))
    for missing, value in (("cert_file", cert), ("key_file", key)):
        if value is None:
            raise _Invalid(f"tls_server_config.{missing} is required when tls_server_config is set")
    verify_mode = _verify_mode(tls, ca)
    min_version, max_version = _version(tls, "min_version", "TLS12"), _version(tls, "max_version", "TLS13")
    if min_version > max_version:
        raise _Invalid("tls_server_config.min_version is above tls_server_config.max_version")

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = min_version, max_version
    try:
        ctx.load_cert_chain(os.path.join(base_dir, cert), os.path.join(base_dir, key), password=_no_password)
    except (OSError, ValueError) as e:
        raise _Invalid(f"cannot load tls_server_config.cert_file {cert} with key_file {key}: {e}") from None
    if ca is not None:
        try:
            ctx.load_verify_locations(cafile=os.path.join(base_dir, ca))
        except OSError as e:
            raise _Invalid(f"cannot load tls_server_config.client_ca_file {ca}: {e}") from None
    ctx.verify_mode = verify_mode
    return ctx


def _verify_mode(tls: dict, ca: str | None) -> ssl.VerifyMode:
    auth = _string(tls, "tls_server_config", "client_auth_type") or "NoClientCert"
    if auth not in _CLIENT_AUTH:
        raise _Invalid(f"tls_server_config.client_auth_type {auth!r} is not one of {', '.join(_CLIENT_AUTH)}")
    verify_mode, needs_ca = _CLIENT_AUTH[auth]
    if needs_ca and ca is None:
        raise _Invalid(f"tls_server_config.client_ca_file is required for client_auth_type {auth}")
    if ca is not None and auth == "NoClientCert":
        raise _Invalid("tls_server_config.client_ca_file is set but client_auth_type is NoClientCert")
    return verify_mode


def _version(tls: dict, key: str, default: str) -> ssl.TLSVersion:
    value = _string(tls, "tls_server_config", key) or default
    if value not in _TLS_VERSIONS:
        raise _Invalid(f"tls_server_config.{key} {value!r} is not one of {', '.join(_TLS_VERSIONS)}")
    return _TLS_VERSIONS[value]


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal and hang the daemon.
    raise ValueError("the key is encrypted, which is not supported")


def _users(users: dict) -> dict[str, bytes]:
    for user, hashed in users.items():
        match = _BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None:
            raise _Invalid(f"basic_auth_users.{user} is not a bcrypt hash ($2a$, $2b$ or $2y$)")
        if int(match[1]) not in BCRYPT_COSTS:
            raise _Invalid(f"basic_auth_users.{user} has bcrypt cost {match[1]}, outside "
                           f"{BCRYPT_COSTS.start}-{BCRYPT_COSTS.stop - 1}: hash it again (htpasswd -nbBC 12 USER PASSWORD)")
    return {user: hashed.encode("ascii") for user, hashed in users.items()}


def _headers(http: dict) -> dict[str, str]:
    headers = _section(http.get("headers"), "http_server_config.headers", set(_HEADERS))
    for header, value in headers.items():
        allowed = _HEADERS[header]
        if not isinstance(value, str) or (allowed and value not in allowed):
            raise _Invalid(f"http_server_config.headers.{header} must be {' or '.join(allowed) or 'a string'}")
        if any(ch in value for ch in "\r\n\0"):
            raise _Invalid(f"http_server_config.headers.{header} contains CR, LF or NUL")
    return dict(headers)
