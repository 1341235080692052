"""The exporter-toolkit web config file (--web.config.file): TLS, basic auth, response headers and a rate limit
for the HTTP endpoint. It is read as prometheus/exporter-toolkit reads it, and read again when it, or a file it
names, changes; docs/security.md lists where the exporter differs from the toolkit, and why. tls_server_config's
context is made in web_tls.py; web_fields.py reads the file and its typed values."""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml

from .web_fields import FileRead, Invalid, check_boolean, read_regular, stamps
from .web_tls import TLS_KEYS, server_context

log = logging.getLogger(__name__)


class WebConfigError(Exception):
    """The web config file cannot be used; the message is one line naming file and problem."""

    def __init__(self, path: str, problem: str):
        super().__init__(" ".join(f"web config {path}: {problem}".split()))


_SECTIONS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
# aiohttp speaks HTTP/1.1 only, so http2 has nothing to switch: it is checked for its type alone.
_HTTP_KEYS = {"headers", "http2"}
_RATE_KEYS = {"interval", "burst"}


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
    _bcrypt_slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(BCRYPT_PARALLEL), init=False, repr=False, compare=False
    )

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
        credentials = _parse_basic(authorization_header)
        return False if credentials is None else self._verdict(credentials)

    def _verdict(self, credentials: tuple[str, bytes]) -> bool | None:
        """The kept verdict of an attempt seen before, else None."""
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
        if credentials is None:  # a malformed header
            return False
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
        if stamps(read.path for read in self._files) == tuple(read.stamp for read in self._files):
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
        doc, node = _parse_yaml(read_regular(path, reads).decode("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise WebConfigError(path, f"cannot read file: {e}") from None
    except yaml.YAMLError as e:
        raise WebConfigError(path, f"invalid YAML: {e}") from None
    try:
        return _build(doc, node, os.path.dirname(os.path.abspath(path)), reads, path)
    except Invalid as e:
        raise WebConfigError(path, str(e)) from None


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
    tls = _section(top.get("tls_server_config"), "tls_server_config", TLS_KEYS)
    http = _section(top.get("http_server_config"), "http_server_config", _HTTP_KEYS)
    users = _section(top.get("basic_auth_users"), "basic_auth_users", None)
    rate = _section(top.get("rate_limit"), "rate_limit", _RATE_KEYS)
    check_boolean(http, "http_server_config", "http2")
    basic_auth_users = _users(users)  # before TLS, as the toolkit validates users first
    ssl_context = server_context(tls, base_dir, reads)
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
        raise Invalid(f"{what} must be a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise Invalid(f"{what} has a non-string key {key!r} (quote it)")
        if allowed is not None and key not in allowed:
            raise Invalid(f"unknown or unsupported key {name + '.' if name else ''}{key}")
    return value


def _refuse_duplicate_keys(node: yaml.Node | None, where: str = "", levels: int = 3) -> None:
    """As Go's strict YAML decoding: a key given twice (a second alice, say) is an error, not an override.
    The format nests three mappings deep; stopping there also ends any recursive alias."""
    if not isinstance(node, yaml.MappingNode) or not levels:
        return
    keys = [key.value for key, _ in node.value if isinstance(key, yaml.ScalarNode)]
    twice = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
    if twice is not None:
        raise Invalid(f"{where}{twice} is given twice")
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
    return {
        key.value: "" if value.tag == _NULL_TAG else value.value
        for key, value in node.value
        if isinstance(key, yaml.ScalarNode) and isinstance(value, yaml.ScalarNode)
    }


def _users(users: dict) -> dict[str, bytes]:
    for user, hashed in users.items():
        match = _BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None:
            raise Invalid(f"basic_auth_users.{user} is not a bcrypt hash ($2a$, $2b$ or $2y$)")
        if int(match[1]) not in BCRYPT_COSTS:
            raise Invalid(
                f"basic_auth_users.{user} has bcrypt cost {match[1]}, outside "
                f"{BCRYPT_COSTS.start}-{BCRYPT_COSTS.stop - 1}: hash it again (htpasswd -nbBC 12 USER PASSWORD)"
            )
    return {user: hashed.encode("ascii") for user, hashed in users.items()}


def _headers(http: dict, node: yaml.Node | None) -> dict[str, str]:
    headers = _section(http.get("headers"), "http_server_config.headers", set(_HEADERS))
    texts = _scalar_texts(node)
    for header in headers:
        value, allowed = texts.get(header), _HEADERS[header]
        if value is None or (allowed and value not in allowed):
            raise Invalid(f"http_server_config.headers.{header} must be {' or '.join(allowed) or 'a string'}")
        if any(ch in value for ch in "\r\n\0"):
            raise Invalid(f"http_server_config.headers.{header} contains CR, LF or NUL")
    return {header: texts[header] for header in headers}


def _rate_limit(rate: dict) -> TokenBucket | None:
    interval = _interval_seconds(rate.get("interval"))
    burst = 0 if rate.get("burst") is None else rate["burst"]
    if type(burst) is not int or burst < 0:  # bool is an int to Python, not to Go
        raise Invalid("rate_limit.burst must be a whole number, 0 or more")
    return TokenBucket(interval, burst) if interval else None


def _interval_seconds(value: Any) -> float:
    """Go's duration text, or 0 for no limit. A bare number is refused: Go would read 5 as 5 nanoseconds."""
    if type(value) is not bool and value in (None, 0, "0"):
        return 0.0
    if isinstance(value, str) and _DURATION.fullmatch(value):
        return sum(float(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_PART.findall(value))
    raise Invalid("rate_limit.interval must be a duration such as 1s or 250ms, or 0 for no limit")
