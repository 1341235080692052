"""tls_server_config as exporter-toolkit's Go reads it, made into an ssl.SSLContext through the ssl module's public
API alone: versions, Go's cipher suites and a curve by their Go names, client certificates by Go's
client_auth_type, client_allowed_sans checked after the handshake. What that API cannot set (several curves, a
client certificate taken unverified) is refused in one line."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import ssl
from collections.abc import Iterator
from typing import NamedTuple

from .web_fields import Invalid, check_boolean, optional_string, read_regular

# The toolkit's TLSConfig.IsEnabled: any of these, non-empty, turns TLS on; min_version and the like alone do not.
_TLS_SWITCHES = ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file", "client_auth_type")
# tls_server_config's keys
TLS_KEYS = set(_TLS_SWITCHES) | {
    "cipher_suites",
    "curve_preferences",
    "min_version",
    "max_version",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
}

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# client_auth_type -> verify_mode, as Go's tls.ClientAuthType, for the types that verify the certificate.
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# Go's types that take a client certificate unverified (RequireClientCert: the toolkit's old name for
# RequireAnyClientCert). OpenSSL does so only when a verify callback says yes, which the ssl module never sets.
_UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")

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

# Go's curve names -> OpenSSL's short names, as SSLContext.set_ecdh_curve takes them.
_CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}


def refusal_after_handshake(tls: ssl.SSLObject | None) -> str:
    """The reason to close a connection whose handshake succeeded, or "": with client_allowed_sans set, a verified
    client certificate without any of those names (or no certificate)."""
    allowed = getattr(getattr(tls, "context", None), "client_allowed_sans", None)
    if tls is not None and allowed is not None and allowed.isdisjoint(certificate_names(tls.getpeercert())):
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
        if not (
            optional_string(tls, "tls_server_config", name) or optional_string(tls, "tls_server_config", f"{name}_file")
        ):
            raise Invalid(f"tls_server_config is missing one of {name} or {name}_file")
    if min_version > max_version:
        raise Invalid("tls_server_config.min_version is above tls_server_config.max_version")

    ctx = _ServerContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = min_version, max_version
    cert, key = _pem(tls, "cert", base_dir, reads), _pem(tls, "key", base_dir, reads)
    assert cert is not None and key is not None  # each is given, inline or as a file: checked above
    _load_cert_chain(ctx, cert, key)
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
    inline, path = (
        optional_string(tls, "tls_server_config", name),
        optional_string(tls, "tls_server_config", f"{name}_file"),
    )
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
        raise Invalid(
            "tls_server_config.cipher_suites names TLS 1.3 suites only and max_version is below TLS13: "
            "no handshake could succeed"
        )
    else:
        # Go then has no suite for TLS 1.2 and fails those handshakes; OpenSSL refuses an empty list, so TLS 1.2
        # is not offered at all, which fails them the same.
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3


def _set_curves(ctx: ssl.SSLContext, names: list[str]) -> None:
    """The ssl module sets one curve, and then only that one is offered (set_ecdh_curve); Go's list of several
    needs SSL_CTX_set1_groups_list, which it does not call."""
    curves = list(dict.fromkeys(names))
    if len(curves) > 1:
        raise Invalid(
            f"tls_server_config.curve_preferences names {len(curves)} curves; Python's ssl module sets one: "
            "give one, or none for OpenSSL's defaults"
        )
    if curves:
        ctx.set_ecdh_curve(_CURVES[curves[0]])


def _client_auth(ctx: _ServerContext, tls: dict, base_dir: str, reads: list, sans: list[str] | None) -> None:
    auth = optional_string(tls, "tls_server_config", "client_auth_type") or "NoClientCert"
    if auth in _UNVERIFIED_CLIENT_AUTH:
        raise Invalid(
            f"tls_server_config.client_auth_type {auth} takes a client certificate unverified, which "
            "Python's ssl module cannot: use VerifyClientCertIfGiven or RequireAndVerifyClientCert"
        )
    if auth not in _CLIENT_AUTH:
        raise Invalid(
            f"tls_server_config.client_auth_type {auth!r} is not one of "
            f"{', '.join([*_CLIENT_AUTH, *_UNVERIFIED_CLIENT_AUTH])}"
        )
    verify_mode = _CLIENT_AUTH[auth]
    if verify_mode == ssl.CERT_NONE and (tls.get("client_ca") or tls.get("client_ca_file")):
        raise Invalid("tls_server_config.client_ca_file (or client_ca) is set but client_auth_type is NoClientCert")
    if sans is not None and verify_mode == ssl.CERT_NONE:  # the toolkit ignores them
        raise Invalid(
            "tls_server_config.client_allowed_sans needs client_auth_type VerifyClientCertIfGiven or "
            "RequireAndVerifyClientCert: the names of an unverified certificate prove nothing"
        )
    _load_client_ca(ctx, _pem(tls, "client_ca", base_dir, reads), verify_mode != ssl.CERT_NONE)
    ctx.verify_mode = verify_mode
    ctx.client_allowed_sans = None if sans is None else frozenset(sans)


def _load_client_ca(ctx: ssl.SSLContext, ca: _Pem | None, verified: bool) -> None:
    if ca is not None:
        try:
            ctx.load_verify_locations(cadata=ca.data.decode("latin-1"))
        except (ssl.SSLError, ValueError) as e:
            raise Invalid(f"cannot load {ca.label}: {e}") from None
    elif verified:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Go verifies against the system pool when no CA is given
