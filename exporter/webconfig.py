"""The exporter-toolkit web config file (--web.config.file): TLS, basic auth, response headers and a rate limit
for the HTTP endpoint. It is read as prometheus/exporter-toolkit reads it, and read again when it, or a file it
names, changes; docs/security.md lists where the exporter differs from the toolkit, and why."""
from __future__ import annotations

import _ssl
import base64
import binascii
import contextlib
import ctypes
import functools
import hashlib
import ipaddress
import logging
import os
import re
import ssl
import stat
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import yaml

log = logging.getLogger(__name__)


class WebConfigError(Exception):
    """The web config file cannot be used; the message is one line naming file and problem."""

    def __init__(self, path: str, problem: str):
        super().__init__(" ".join(f"web config {path}: {problem}".split()))


class _Invalid(Exception):
    """A problem found while parsing; load_web_config adds the file name."""


_SECTIONS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
# The toolkit's TLSConfig.IsEnabled: any of these, non-empty, turns TLS on; min_version and the like alone do not.
_TLS_SWITCHES = ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file", "client_auth_type")
_TLS_KEYS = set(_TLS_SWITCHES) | {"cipher_suites", "curve_preferences", "min_version", "max_version",
                                  "prefer_server_cipher_suites", "client_allowed_sans"}
# http.server speaks HTTP/1.1 only, so http2 has nothing to switch: it is checked for its type alone.
_HTTP_KEYS = {"headers", "http2"}
_RATE_KEYS = {"interval", "burst"}

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# client_auth_type -> (verify_mode, whether the certificate is verified), as Go's tls.ClientAuthType.
_CLIENT_AUTH = {
    "NoClientCert": (ssl.CERT_NONE, False),
    "RequestClientCert": (ssl.CERT_OPTIONAL, False),
    "RequireAnyClientCert": (ssl.CERT_REQUIRED, False),
    "RequireClientCert": (ssl.CERT_REQUIRED, False),  # the toolkit's old name for RequireAnyClientCert
    "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, True),
    "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, True),
}

# Go's TLS 1.0-1.2 suites (tls.CipherSuites() of Go 1.25) -> OpenSSL's names, in Go's server preference order:
# since Go 1.17, Go ignores the order in the file and prefer_server_cipher_suites, and picks by this one.
_TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
}
# Valid names too, but TLS 1.3 suites are not configurable in Go, nor through OpenSSL's cipher list.
_TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
# Go's curve names -> OpenSSL's group names.
_CURVES = {"CurveP256": "P-256", "CurveP384": "P-384", "CurveP521": "P-521", "X25519": "X25519"}

# exporter-toolkit's allow-list: header -> allowed values (empty: any value).
_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
_NULL_TAG = "tag:yaml.org,2002:null"

_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
# Below 10 a stolen hash is cheap to crack; above 16 one login takes seconds of a core (31: days).
BCRYPT_COSTS = range(10, 17)
# bcrypt runs outside the GIL: this many logins are checked at once, so one slow check never holds up the
# rest, while a flood of guesses costs at most this many cores.
BCRYPT_PARALLEL = min(4, max(2, (os.cpu_count() or 1) // 2))
OUTCOMES_KEPT = 4096  # (user, password digest) -> verdict, least recently used dropped first

# Go's time.ParseDuration syntax, less the sign: a negative interval is refused rather than read as "no limit".
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION = re.compile(f"(?:{_DURATION_PART.pattern})+")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

RETRY_SECONDS = 1.0  # a new web config file that does not load is read again no sooner than this

# Go's net/http answers a TLS port's plain HTTP request (the first five bytes tell) with this, then closes.
_HTTP_STARTS = {b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"}
PLAIN_HTTP_REFUSAL = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"

# OpenSSL's verify callback: int (*)(int preverify_ok, X509_STORE_CTX *).
_VERIFY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
# Go's RequestClientCert and RequireAnyClientCert take a client certificate unverified; OpenSSL does only when a
# verify callback says yes. Module-level, so the callback outlives every context that holds it.
_ACCEPT_ANY_CERTIFICATE = _VERIFY_CALLBACK(lambda preverify_ok, store: 1)
_SSL_CTRL_SET_GROUPS_LIST = 92  # SSL_CTX_set1_groups_list is this SSL_CTX_ctrl in OpenSSL 1.1.1 and 3.x


class FileRead(NamedTuple):
    path: str
    # Taken before the read, so a write after it shows at the next check. None while the file is less than a
    # second old: a second write in the same clock tick could keep mtime and size, so such a file is looked at
    # again until it is older (as git treats a racily clean file).
    stamp: tuple[int, ...] | None
    digest: bytes  # sha256 of the content: a new stamp over the same bytes keeps the config as it is


class TokenBucket:
    """rate_limit as golang.org/x/time/rate's Limiter: a token every `interval` seconds, at most `burst` held, full
    at start; a request takes one or is refused. A burst of 0 refuses every request, as Go's does."""

    def __init__(self, interval: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.interval, self.burst, self._clock = interval, burst, clock
        self._tokens, self._last = float(burst), clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) / self.interval)
            self._last = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    rate_limit: TokenBucket | None = None
    source: str = ""  # the file this was read from; "" (no file) is never read again
    files: tuple[FileRead, ...] = ()  # the file and those it names, as read
    # Verdicts by (user, sha256 of the password): a repeated attempt, failed or not, costs a hash, not a bcrypt.
    _outcomes: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False, compare=False)
    _cache_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    _bcrypt_slots: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(BCRYPT_PARALLEL),
                                                      init=False, repr=False, compare=False)

    @property
    def auth_required(self) -> bool:
        return bool(self.basic_auth_users)

    def allows_request(self) -> bool:
        """False when rate_limit has no token left for this request."""
        return self.rate_limit is None or self.rate_limit.allow()

    def known_verdict(self, authorization_header: str | None) -> bool | None:
        """check_basic_auth's answer where it costs no bcrypt (auth off, a malformed header, an attempt seen
        before), else None: the server asks check_basic_auth off its event loop only then."""
        if not self.auth_required:
            return True
        return self._verdict(_parse_basic(authorization_header))

    def _verdict(self, credentials: tuple[str, bytes] | None) -> bool | None:
        """False for a malformed header, the kept verdict of an attempt seen before, else None."""
        if credentials is None:
            return False
        key = _attempt_key(credentials)
        with self._cache_lock:
            known = self._outcomes.get(key)
            if known is not None:
                self._outcomes.move_to_end(key)
            return known

    def check_basic_auth(self, authorization_header: str | None) -> bool:
        """True when auth is off or the header carries a configured user's password."""
        if not self.auth_required:
            return True
        credentials = _parse_basic(authorization_header)
        known = self._verdict(credentials)
        if known is not None:
            return known
        user, password = credentials
        hashed = self.basic_auth_users.get(user)
        # An unknown user is checked against a configured user's hash: the same cost, so the time taken
        # does not tell which users exist, and the verdict is still no.
        with self._bcrypt_slots:
            ok = _bcrypt_matches(password, hashed or next(iter(self.basic_auth_users.values()))) and hashed is not None
        with self._cache_lock:
            self._outcomes[_attempt_key(credentials)] = ok
            if len(self._outcomes) > OUTCOMES_KEPT:
                self._outcomes.popitem(last=False)
        return ok


class LiveWebConfig:
    """The config to serve with now. Each call checks whether the file, or a file it names, has changed since it
    was read (a few stat calls, against a TLS handshake's milliseconds), and reads it again if so, as the toolkit
    reads it for every connection. A new file that does not load keeps the old config: it is logged once per
    distinct problem and tried again at most once every RETRY_SECONDS."""

    def __init__(self, config: WebConfig):
        self._config = config
        self._files = config.files  # as last read, stamps included, whether or not the content changed
        self._problem = ""
        self._retry_at = 0.0
        self._lock = threading.Lock()

    def current(self) -> WebConfig:
        # Non-blocking: while one caller reads the file, the others go on with the config as it is.
        if self._config.source and time.monotonic() >= self._retry_at and self._lock.acquire(blocking=False):
            try:
                self._reload_if_changed()
            finally:
                self._lock.release()
        return self._config

    def _reload_if_changed(self) -> None:
        old = self._config
        if _stamps(read.path for read in self._files) == tuple(read.stamp for read in self._files):
            return
        try:
            new = load_web_config(old.source)
            if (new.ssl_context is None) != (old.ssl_context is None):  # an HTTPS endpoint never turns to plain HTTP
                raise WebConfigError(old.source, "switching between HTTP and HTTPS needs a restart")
        except WebConfigError as e:
            self._retry_at = time.monotonic() + RETRY_SECONDS
            if str(e) != self._problem:
                self._problem = str(e)
                log.warning("%s; still serving with the web config read before", e)
            return
        self._files, self._problem = new.files, ""
        if [(read.path, read.digest) for read in new.files] != [(read.path, read.digest) for read in old.files]:
            self._config = new
            log.info("web config %s read again", old.source)


def is_plain_http(first_bytes: bytes) -> bool:
    """True when a client's first five bytes on the HTTPS port are an HTTP request line, not a TLS record:
    it is answered PLAIN_HTTP_REFUSAL and closed, as Go's server does."""
    return first_bytes in _HTTP_STARTS


def refusal_after_handshake(tls: ssl.SSLObject) -> str:
    """The reason to close a connection whose handshake succeeded, or "": with client_allowed_sans set, a verified
    client certificate without any of those names (or no certificate)."""
    allowed = getattr(tls.context, "client_allowed_sans", None)
    if allowed is not None and allowed.isdisjoint(_sans(tls.getpeercert())):
        return "its certificate has none of client_allowed_sans"
    return ""


def _sans(peer_cert: dict | None) -> set[str]:
    """The DNS, e-mail, IP and URI names the toolkit matches, IPs written as Go writes them."""
    names = set()
    for kind, value in (peer_cert or {}).get("subjectAltName", ()):
        if kind == "IP Address":
            address = ipaddress.ip_address(value.strip())
            names.add(str(getattr(address, "ipv4_mapped", None) or address))  # Go prints ::ffff:a.b.c.d as a.b.c.d
        elif kind in ("DNS", "email", "URI"):
            names.add(value)
    return names


class _ServerContext(ssl.SSLContext):
    """An SSLContext that carries client_allowed_sans to the check after the handshake (refusal_after_handshake)."""

    client_allowed_sans: frozenset[str] | None = None


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


def _attempt_key(credentials: tuple[str, bytes]) -> tuple[str, bytes]:
    """(user, sha256 of the password): the key a login's verdict is kept under."""
    return credentials[0], hashlib.sha256(credentials[1]).digest()


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
    reads: list[FileRead] = []
    try:
        doc, node = _parse_yaml(_read_regular(path, reads).decode("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise WebConfigError(path, f"cannot read file: {e}") from None
    except yaml.YAMLError as e:
        raise WebConfigError(path, f"invalid YAML: {e}") from None
    try:
        return _build(doc, node, os.path.dirname(os.path.abspath(path)), reads, path)
    except _Invalid as e:
        raise WebConfigError(path, str(e)) from None


def _read_regular(path: str, reads: list[FileRead]) -> bytes:
    """The file's bytes, also noted in `reads`; anything but a regular file is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once, to be refused, not waited on
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError("not a regular file")
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
    finally:
        os.close(fd)
    fresh = abs(time.time_ns() - status.st_mtime_ns) < 1_000_000_000  # abs: a future mtime is no reason to read on
    reads.append(FileRead(path, None if fresh else _stamp(status), hashlib.sha256(data).digest()))
    return data


def _stamp(status: os.stat_result) -> tuple[int, ...]:
    # Inode and device too: a Kubernetes secret volume swaps a symlink, and a copy may keep size and mtime.
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def _stamps(paths) -> tuple[tuple[int, ...] | None, ...]:
    def stamp(path: str) -> tuple[int, ...] | None:
        try:
            return _stamp(os.stat(path))
        except OSError:  # gone: the next read tells why
            return None

    return tuple(stamp(path) for path in paths)


def _parse_yaml(text: str) -> tuple[Any, yaml.Node | None]:
    """The document and its node tree, which keeps each scalar as written (see _scalar_texts)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return (None if node is None else loader.construct_document(node)), node
    finally:
        loader.dispose()


def _build(doc: Any, node: yaml.Node | None, base_dir: str, reads: list, source: str) -> WebConfig:
    top = _section(doc, "", _SECTIONS)
    _refuse_duplicate_keys(node)
    tls = _section(top.get("tls_server_config"), "tls_server_config", _TLS_KEYS)
    http = _section(top.get("http_server_config"), "http_server_config", _HTTP_KEYS)
    users = _section(top.get("basic_auth_users"), "basic_auth_users", None)
    rate = _section(top.get("rate_limit"), "rate_limit", _RATE_KEYS)
    _boolean(http, "http_server_config", "http2")
    basic_auth_users = _users(users)  # before TLS, as the toolkit validates users first
    ssl_context = _ssl_context(tls, base_dir, reads)
    return WebConfig(
        ssl_context=ssl_context,
        basic_auth_users=MappingProxyType(basic_auth_users),
        headers=MappingProxyType(_headers(http, _node_at(node, "http_server_config", "headers"))),
        rate_limit=_rate_limit(rate),
        source=source,
        files=tuple(reads),
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


def _refuse_duplicate_keys(node: yaml.Node | None, where: str = "", levels: int = 3) -> None:
    """As Go's strict YAML decoding: a key given twice (a second alice, say) is an error, not an override.
    The format nests three mappings deep; stopping there also ends any recursive alias."""
    if not isinstance(node, yaml.MappingNode) or not levels:
        return
    keys = [key.value for key, _ in node.value if isinstance(key, yaml.ScalarNode)]
    twice = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
    if twice is not None:
        raise _Invalid(f"{where}{twice} is given twice")
    for key, value in node.value:
        _refuse_duplicate_keys(value, f"{where}{key.value}.", levels - 1)


def _node_at(node: yaml.Node | None, *keys: str) -> yaml.Node | None:
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
    return node


def _scalar_texts(node: yaml.Node | None) -> dict[str, str]:
    """Each scalar value of a mapping as written, null as "": Go reads `X-XSS-Protection: 1` into a string as "1"."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {key.value: "" if value.tag == _NULL_TAG else value.value for key, value in node.value
            if isinstance(key, yaml.ScalarNode) and isinstance(value, yaml.ScalarNode)}


def _string(section: dict, name: str, key: str) -> str | None:
    value = section.get(key)
    if value is not None and not isinstance(value, str):
        raise _Invalid(f"{name}.{key} must be a string, got {type(value).__name__}")
    return value or None


def _boolean(section: dict, name: str, key: str) -> None:
    if section.get(key) is not None and not isinstance(section[key], bool):
        raise _Invalid(f"{name}.{key} must be true or false")


def _strings(tls: dict, key: str) -> list[str] | None:
    value = tls.get(key)
    if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
        raise _Invalid(f"tls_server_config.{key} must be a list of strings")
    return value


def _names(tls: dict, key: str, known, what: str) -> list[str]:
    names = _strings(tls, key) or []
    unknown = next((name for name in names if name not in known), None)
    if unknown is not None:
        raise _Invalid(f"tls_server_config.{key}: unknown {what} {unknown}")
    return names


class _Pem(NamedTuple):
    data: bytes
    label: str  # where it came from, for messages


def _ssl_context(tls: dict, base_dir: str, reads: list) -> ssl.SSLContext | None:
    # Every name is checked first: as with Go's YAML decoding, a bad one is an error even when TLS stays off.
    min_version, max_version = _version(tls, "min_version", "TLS12"), _version(tls, "max_version", "TLS13")
    suites = _names(tls, "cipher_suites", _TLS12_SUITES.keys() | _TLS13_SUITES, "cipher")
    curves = _names(tls, "curve_preferences", _CURVES, "curve")
    sans = _strings(tls, "client_allowed_sans")
    _boolean(tls, "tls_server_config", "prefer_server_cipher_suites")  # no effect in Go since 1.17, none here
    if not any(_string(tls, "tls_server_config", key) for key in _TLS_SWITCHES):
        return None
    for name in ("cert", "key"):
        if not (_string(tls, "tls_server_config", name) or _string(tls, "tls_server_config", f"{name}_file")):
            raise _Invalid(f"tls_server_config is missing one of {name} or {name}_file")
    if min_version > max_version:
        raise _Invalid("tls_server_config.min_version is above tls_server_config.max_version")

    ctx = _ServerContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = min_version, max_version
    _load_cert_chain(ctx, _pem(tls, "cert", base_dir, reads), _pem(tls, "key", base_dir, reads))
    ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE  # Go picks the suite by its own order, never the client's
    _set_cipher_suites(ctx, suites)
    _set_curves(ctx, curves)
    _client_auth(ctx, tls, base_dir, reads, sans)
    return ctx


def _version(tls: dict, key: str, default: str) -> ssl.TLSVersion:
    value = _string(tls, "tls_server_config", key) or default
    if value not in _TLS_VERSIONS:
        raise _Invalid(f"tls_server_config.{key} {value!r} is not one of {', '.join(_TLS_VERSIONS)}")
    return _TLS_VERSIONS[value]


def _pem(tls: dict, name: str, base_dir: str, reads: list) -> _Pem | None:
    """The PEM text of `name` given inline, or read from `name`_file (relative to the config's directory)."""
    inline, path = _string(tls, "tls_server_config", name), _string(tls, "tls_server_config", f"{name}_file")
    if inline and path:  # the toolkit would silently take the file
        raise _Invalid(f"tls_server_config has both {name} and {name}_file: give one")
    if inline:
        return _Pem(inline.encode(), f"tls_server_config.{name}")
    if path is None:
        return None
    label = f"tls_server_config.{name}_file {path}"
    try:
        return _Pem(_read_regular(os.path.join(base_dir, path), reads), label)
    except OSError as e:
        raise _Invalid(f"cannot read {label}: {e}") from None


def _load_cert_chain(ctx: ssl.SSLContext, cert: _Pem, key: _Pem) -> None:
    try:
        with _memory_file(cert.data) as cert_path, _memory_file(key.data) as key_path:
            ctx.load_cert_chain(cert_path, key_path, password=_no_password)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        raise _Invalid(f"cannot load {cert.label} with {key.label}: {e}") from None


@contextlib.contextmanager
def _memory_file(data: bytes) -> Iterator[str]:
    """A path to `data` that never touches a disk: load_cert_chain reads paths only, and a key in a temporary
    file could outlive the process."""
    with open(os.memfd_create("alnair-web-config", os.MFD_CLOEXEC), "wb") as f:
        f.write(data)
        f.flush()
        yield f"/proc/self/fd/{f.fileno()}"


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal and hang the daemon.
    raise ValueError("the key is encrypted, which is not supported")


def _set_cipher_suites(ctx: ssl.SSLContext, names: list[str]) -> None:
    if not names:
        return
    tls12 = [openssl for go, openssl in _TLS12_SUITES.items() if go in names]
    if tls12:
        ctx.set_ciphers(":".join(tls12))
    elif ctx.maximum_version < ssl.TLSVersion.TLSv1_3:
        raise _Invalid("tls_server_config.cipher_suites names TLS 1.3 suites only and max_version is below TLS13: "
                       "no handshake could succeed")
    else:
        # Go then has no suite for TLS 1.2 and fails those handshakes; OpenSSL refuses an empty list, so TLS 1.2
        # is not offered at all, which fails them the same.
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3


def _set_curves(ctx: ssl.SSLContext, names: list[str]) -> None:
    """The ssl module sets one curve only (set_ecdh_curve); Go's list is SSL_CTX_set1_groups_list."""
    if not names:
        return
    lib, pointer = _openssl(ctx, "tls_server_config.curve_preferences")
    groups = ":".join(dict.fromkeys(_CURVES[name] for name in names))  # in the file's order, once each
    if lib.SSL_CTX_ctrl(pointer, _SSL_CTRL_SET_GROUPS_LIST, 0, groups.encode()) != 1:
        raise _Invalid(f"OpenSSL refuses tls_server_config.curve_preferences {groups}")


def _client_auth(ctx: ssl.SSLContext, tls: dict, base_dir: str, reads: list, sans: list[str] | None) -> None:
    auth = _string(tls, "tls_server_config", "client_auth_type") or "NoClientCert"
    if auth not in _CLIENT_AUTH:
        raise _Invalid(f"tls_server_config.client_auth_type {auth!r} is not one of {', '.join(_CLIENT_AUTH)}")
    verify_mode, verified = _CLIENT_AUTH[auth]
    if verify_mode == ssl.CERT_NONE and (tls.get("client_ca") or tls.get("client_ca_file")):
        raise _Invalid("tls_server_config.client_ca_file (or client_ca) is set but client_auth_type is NoClientCert")
    if sans is not None and not verified:  # the toolkit ignores them, or checks a certificate anyone can make
        raise _Invalid("tls_server_config.client_allowed_sans needs client_auth_type VerifyClientCertIfGiven or "
                       "RequireAndVerifyClientCert: the names of an unverified certificate prove nothing")
    _load_client_ca(ctx, _pem(tls, "client_ca", base_dir, reads), verified)
    ctx.verify_mode = verify_mode
    if verify_mode != ssl.CERT_NONE and not verified:
        _accept_any_certificate(ctx, f"tls_server_config.client_auth_type {auth}")
    ctx.client_allowed_sans = None if sans is None else frozenset(sans)


def _load_client_ca(ctx: ssl.SSLContext, ca: _Pem | None, verified: bool) -> None:
    if ca is not None:
        try:
            ctx.load_verify_locations(cadata=ca.data.decode("latin-1"))
        except (ssl.SSLError, ValueError) as e:
            raise _Invalid(f"cannot load {ca.label}: {e}") from None
    elif verified:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Go verifies against the system pool when no CA is given


def _accept_any_certificate(ctx: ssl.SSLContext, what: str) -> None:
    """Sets _ACCEPT_ANY_CERTIFICATE on ctx, keeping its verify mode. The ssl module passes on a callback once set
    whenever verify_mode changes, so it stays."""
    lib, pointer = _openssl(ctx, what)
    lib.SSL_CTX_set_verify(pointer, lib.SSL_CTX_get_verify_mode(pointer), _ACCEPT_ANY_CERTIFICATE)


@functools.cache
def _libssl() -> ctypes.CDLL | None:
    """libssl as the ssl module links it (dlsym on the module's handle searches the libraries it was linked with),
    or None where that cannot be had: not CPython, or a build that hides OpenSSL's symbols."""
    if sys.implementation.name != "cpython":
        return None
    try:
        lib = ctypes.CDLL(_ssl.__file__)
        for name, argtypes, restype in (
                ("SSL_CTX_get_options", [ctypes.c_void_p], ctypes.c_uint64),
                ("SSL_CTX_get_verify_mode", [ctypes.c_void_p], ctypes.c_int),
                ("SSL_CTX_set_verify", [ctypes.c_void_p, ctypes.c_int, _VERIFY_CALLBACK], None),
                ("SSL_CTX_ctrl", [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_char_p], ctypes.c_long)):
            getattr(lib, name).argtypes, getattr(lib, name).restype = argtypes, restype
    except (OSError, AttributeError):
        return None
    return lib


def _openssl(ctx: ssl.SSLContext, what: str) -> tuple[ctypes.CDLL, int]:
    """libssl and ctx's SSL_CTX*, which CPython's SSLContext holds right after the object header. The options
    read back through the pointer must be the context's own: a layout that changed is refused, never used."""
    lib = _libssl()
    pointer = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value if lib else None
    if lib is None or not pointer or lib.SSL_CTX_get_options(pointer) != ctx.options:
        raise _Invalid(f"{what} needs an OpenSSL call this Python's ssl module does not make, and it cannot be "
                       "reached here")
    return lib, pointer


def _users(users: dict) -> dict[str, bytes]:
    for user, hashed in users.items():
        match = _BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None:
            raise _Invalid(f"basic_auth_users.{user} is not a bcrypt hash ($2a$, $2b$ or $2y$)")
        if int(match[1]) not in BCRYPT_COSTS:
            raise _Invalid(f"basic_auth_users.{user} has bcrypt cost {match[1]}, outside "
                           f"{BCRYPT_COSTS.start}-{BCRYPT_COSTS.stop - 1}: hash it again (htpasswd -nbBC 12 USER PASSWORD)")
    return {user: hashed.encode("ascii") for user, hashed in users.items()}


def _headers(http: dict, node: yaml.Node | None) -> dict[str, str]:
    headers = _section(http.get("headers"), "http_server_config.headers", set(_HEADERS))
    texts = _scalar_texts(node)
    for header in headers:
        value, allowed = texts.get(header), _HEADERS[header]
        if value is None or (allowed and value not in allowed):
            raise _Invalid(f"http_server_config.headers.{header} must be {' or '.join(allowed) or 'a string'}")
        if any(ch in value for ch in "\r\n\0"):
            raise _Invalid(f"http_server_config.headers.{header} contains CR, LF or NUL")
    return {header: texts[header] for header in headers}


def _rate_limit(rate: dict) -> TokenBucket | None:
    interval = _interval_seconds(rate.get("interval"))
    burst = 0 if rate.get("burst") is None else rate["burst"]
    if type(burst) is not int or burst < 0:  # bool is an int to Python, not to Go
        raise _Invalid("rate_limit.burst must be a whole number, 0 or more")
    return TokenBucket(interval, burst) if interval else None


def _interval_seconds(value: Any) -> float:
    """Go's duration text, or 0 for no limit. A bare number is refused: Go would read 5 as 5 nanoseconds."""
    if type(value) is not bool and value in (None, 0, "0"):
        return 0.0
    if isinstance(value, str) and _DURATION.fullmatch(value):
        return sum(float(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_PART.findall(value))
    raise _Invalid("rate_limit.interval must be a duration such as 1s or 250ms, or 0 for no limit")
