"""tls_server_config as exporter-toolkit's Go reads it, made into an ssl.SSLContext: versions, Go's cipher suites
and curves by their Go names, client certificates by Go's client_auth_type (through OpenSSL calls the ssl module
does not make), client_allowed_sans checked after the handshake, and Go's answer to plain HTTP on a TLS port."""
from __future__ import annotations

import _ssl
import contextlib
import ctypes
import functools
import ipaddress
import os
import ssl
import sys
from typing import Iterator, NamedTuple

from .web_fields import Invalid, check_boolean, optional_string, read_regular

# The toolkit's TLSConfig.IsEnabled: any of these, non-empty, turns TLS on; min_version and the like alone do not.
_TLS_SWITCHES = ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file", "client_auth_type")
TLS_KEYS = set(_TLS_SWITCHES) | {"cipher_suites", "curve_preferences", "min_version", "max_version",
                                 "prefer_server_cipher_suites", "client_allowed_sans"}  # tls_server_config's keys

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

# Go's net/http answers a TLS port's plain HTTP request (the first five bytes tell) with this, then closes.
_HTTP_STARTS = {b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"}
PLAIN_HTTP_REFUSAL = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"

# OpenSSL's verify callback: int (*)(int preverify_ok, X509_STORE_CTX *).
_VERIFY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)

# Go's RequestClientCert and RequireAnyClientCert take a client certificate unverified; OpenSSL does only when a
# verify callback says yes. Module-level, so the callback outlives every context that holds it.
_ACCEPT_ANY_CERTIFICATE = _VERIFY_CALLBACK(lambda preverify_ok, store: 1)

_SSL_CTRL_SET_GROUPS_LIST = 92  # SSL_CTX_set1_groups_list is this SSL_CTX_ctrl in OpenSSL 1.1.1 and 3.x


def is_plain_http(first_bytes: bytes) -> bool:
    """True when a client's first five bytes on the HTTPS port are an HTTP request line, not a TLS record:
    it is answered PLAIN_HTTP_REFUSAL and closed, as Go's server does."""
    return first_bytes in _HTTP_STARTS


def refusal_after_handshake(tls: ssl.SSLObject) -> str:
    """The reason to close a connection whose handshake succeeded, or "": with client_allowed_sans set, a verified
    client certificate without any of those names (or no certificate)."""
    allowed = getattr(tls.context, "client_allowed_sans", None)
    if allowed is not None and allowed.isdisjoint(certificate_names(tls.getpeercert())):
        return "its certificate has none of client_allowed_sans"
    return ""


def certificate_names(peer_cert: dict | None) -> set[str]:
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


def _strings(tls: dict, key: str) -> list[str] | None:
    value = tls.get(key)
    if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
        raise Invalid(f"tls_server_config.{key} must be a list of strings")
    return value


def _names(tls: dict, key: str, known, what: str) -> list[str]:
    names = _strings(tls, key) or []
    unknown = next((name for name in names if name not in known), None)
    if unknown is not None:
        raise Invalid(f"tls_server_config.{key}: unknown {what} {unknown}")
    return names


class _Pem(NamedTuple):
    data: bytes
    label: str  # where it came from, for messages


def server_context(tls: dict, base_dir: str, reads: list) -> ssl.SSLContext | None:
    # Every name is checked first: as with Go's YAML decoding, a bad one is an error even when TLS stays off.
    min_version, max_version = _version(tls, "min_version", "TLS12"), _version(tls, "max_version", "TLS13")
    suites = _names(tls, "cipher_suites", _TLS12_SUITES.keys() | _TLS13_SUITES, "cipher")
    curves = _names(tls, "curve_preferences", _CURVES, "curve")
    sans = _strings(tls, "client_allowed_sans")
    check_boolean(tls, "tls_server_config", "prefer_server_cipher_suites")  # no effect in Go since 1.17, none here
    if not any(optional_string(tls, "tls_server_config", key) for key in _TLS_SWITCHES):
        return None
    for name in ("cert", "key"):
        if not (optional_string(tls, "tls_server_config", name) or optional_string(tls, "tls_server_config", f"{name}_file")):
            raise Invalid(f"tls_server_config is missing one of {name} or {name}_file")
    if min_version > max_version:
        raise Invalid("tls_server_config.min_version is above tls_server_config.max_version")

    ctx = _ServerContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = min_version, max_version
    _load_cert_chain(ctx, _pem(tls, "cert", base_dir, reads), _pem(tls, "key", base_dir, reads))
    ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE  # Go picks the suite by its own order, never the client's
    _set_cipher_suites(ctx, suites)
    _set_curves(ctx, curves)
    _client_auth(ctx, tls, base_dir, reads, sans)
    return ctx


def _version(tls: dict, key: str, default: str) -> ssl.TLSVersion:
    value = optional_string(tls, "tls_server_config", key) or default
    if value not in _TLS_VERSIONS:
        raise Invalid(f"tls_server_config.{key} {value!r} is not one of {', '.join(_TLS_VERSIONS)}")
    return _TLS_VERSIONS[value]


def _pem(tls: dict, name: str, base_dir: str, reads: list) -> _Pem | None:
    """The PEM text of `name` given inline, or read from `name`_file (relative to the config's directory)."""
    inline, path = optional_string(tls, "tls_server_config", name), optional_string(tls, "tls_server_config", f"{name}_file")
    if inline and path:  # the toolkit would silently take the file
        raise Invalid(f"tls_server_config has both {name} and {name}_file: give one")
    if inline:
        return _Pem(inline.encode(), f"tls_server_config.{name}")
    if path is None:
        return None
    label = f"tls_server_config.{name}_file {path}"
    try:
        return _Pem(read_regular(os.path.join(base_dir, path), reads), label)
    except OSError as e:
        raise Invalid(f"cannot read {label}: {e}") from None


def _load_cert_chain(ctx: ssl.SSLContext, cert: _Pem, key: _Pem) -> None:
    try:
        with _memory_file(cert.data) as cert_path, _memory_file(key.data) as key_path:
            ctx.load_cert_chain(cert_path, key_path, password=_no_password)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        raise Invalid(f"cannot load {cert.label} with {key.label}: {e}") from None


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
        raise Invalid("tls_server_config.cipher_suites names TLS 1.3 suites only and max_version is below TLS13: "
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
        raise Invalid(f"OpenSSL refuses tls_server_config.curve_preferences {groups}")


def _client_auth(ctx: ssl.SSLContext, tls: dict, base_dir: str, reads: list, sans: list[str] | None) -> None:
    auth = optional_string(tls, "tls_server_config", "client_auth_type") or "NoClientCert"
    if auth not in _CLIENT_AUTH:
        raise Invalid(f"tls_server_config.client_auth_type {auth!r} is not one of {', '.join(_CLIENT_AUTH)}")
    verify_mode, verified = _CLIENT_AUTH[auth]
    if verify_mode == ssl.CERT_NONE and (tls.get("client_ca") or tls.get("client_ca_file")):
        raise Invalid("tls_server_config.client_ca_file (or client_ca) is set but client_auth_type is NoClientCert")
    if sans is not None and not verified:  # the toolkit ignores them, or checks a certificate anyone can make
        raise Invalid("tls_server_config.client_allowed_sans needs client_auth_type VerifyClientCertIfGiven or "
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
            raise Invalid(f"cannot load {ca.label}: {e}") from None
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
        raise Invalid(f"{what} needs an OpenSSL call this Python's ssl module does not make, and it cannot be "
                       "reached here")
    return lib, pointer
