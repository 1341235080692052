"""Tests for alnair.exporter.webconfig: TLS handshakes against a real server, basic auth, errors, the rate limit
and reading the file again when it changes (test_toolkit_parity.py runs the toolkit's own cases)."""

from __future__ import annotations

import base64
import datetime
import http.client
import ipaddress
import itertools
import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import bcrypt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from alnair.exporter import web_tls, webconfig
from alnair.exporter.scrape import ScrapeAssembler
from alnair.exporter.server import ExporterServer
from alnair.exporter.webconfig import TokenBucket, WebConfigError, load_web_config
from support import serving_in_thread, write_tls_files

PASSWORD = b"s3cret"


def _issue(cn, key, issuer=None, issuer_key=None, *, ca=False, usage=None):
    """A cert for `key`, self-signed when no issuer is given."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key((issuer_key or key).public_key()), critical=False
        )
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key or key, hashes.SHA256())


NO_ENCRYPTION = serialization.NoEncryption()


def _write_key(path, key, encryption=NO_ENCRYPTION):
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """CA, server and client certs; configs are written here too so relative paths resolve."""
    d = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("test-ca", ca_key, ca=True)
    (d / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for role, usage in (("server", ExtendedKeyUsageOID.SERVER_AUTH), ("client", ExtendedKeyUsageOID.CLIENT_AUTH)):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(role, key, ca, ca_key, usage=usage)
        (d / f"{role}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(d / f"{role}.key", key)
    _write_key(d / "encrypted.key", ca_key, serialization.BestAvailableEncryption(b"pw"))
    (d / "garbage.pem").write_text("not a certificate\n")
    return d


_names = itertools.count()


def load(pki, text):
    path = pki / f"web{next(_names)}.yml"
    path.write_text(text)
    return load_web_config(str(path))


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
MTLS = TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def serving(ctx):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    return serving_in_thread(server)


def client_context(pki, *, cert=False, max_version=None):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
    if max_version:
        ctx.maximum_version = max_version
    return ctx


def fetch(port, ctx):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_no_path_means_plain_http_without_auth():
    for path in (None, ""):
        config = load_web_config(path)
        assert config.ssl_context is None
        assert config.auth_required is False
        assert dict(config.headers) == {}
        assert config.check_basic_auth(None) is True


def test_relative_paths_resolve_against_config_dir_and_tls_serves(pki):
    config = load(
        pki,
        TLS + "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\nhttp_server_config:\n"
        "  http2: false\n  headers:\n    X-Frame-Options: deny\n",
    )
    assert config.ssl_context.verify_mode == ssl.CERT_NONE
    assert config.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert dict(config.headers) == {"X-Frame-Options": "deny"}
    with serving(config.ssl_context) as port:
        assert fetch(port, client_context(pki)) == (200, b"ok")


def test_require_and_verify_client_cert(pki):
    config = load(pki, MTLS)
    assert config.ssl_context.verify_mode == ssl.CERT_REQUIRED
    with serving(config.ssl_context) as port:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            fetch(port, client_context(pki))
        assert fetch(port, client_context(pki, cert=True)) == (200, b"ok")


def test_min_version_tls13_refuses_tls12_client(pki):
    config = load(pki, TLS + "  min_version: TLS13\n")
    with serving(config.ssl_context) as port:
        with pytest.raises(ssl.SSLError):
            fetch(port, client_context(pki, max_version=ssl.TLSVersion.TLSv1_2))
        assert fetch(port, client_context(pki)) == (200, b"ok")


@pytest.fixture(scope="module")
def hashed():
    return bcrypt.hashpw(PASSWORD, bcrypt.gensalt(10)).decode()


def basic(user, password):
    return "Basic " + base64.b64encode(user.encode() + b":" + password).decode()


def test_basic_auth(pki, hashed):
    config = load(pki, f"basic_auth_users:\n  alice: '{hashed}'\n")
    assert config.auth_required is True
    assert config.check_basic_auth(basic("alice", PASSWORD)) is True
    assert config.check_basic_auth(basic("alice", b"wrong")) is False
    assert config.check_basic_auth(basic("bob", PASSWORD)) is False
    assert config.check_basic_auth(basic("alice", b"x" * 100)) is False
    for malformed in ("Bearer abc", "Basic !!!notbase64", "Basic " + base64.b64encode(b"nocolon").decode(), ""):
        assert config.check_basic_auth(malformed) is False
    assert config.check_basic_auth(None) is False


@pytest.fixture
def bcrypt_calls(monkeypatch):
    """Every bcrypt check the config makes, as (password, hash), still answered by the real bcrypt."""
    calls, real = [], webconfig._bcrypt_matches
    monkeypatch.setattr(
        webconfig,
        "_bcrypt_matches",
        lambda password, hashed: calls.append((password, hashed)) or real(password, hashed),
    )
    return calls


def test_a_repeated_attempt_costs_no_bcrypt_whether_it_failed_or_not(pki, hashed, bcrypt_calls):
    config = load(pki, f"basic_auth_users:\n  alice: '{hashed}'\n")
    attempts = [("alice", PASSWORD, True), ("alice", b"wrong", False), ("mallory", b"guess", False)]
    for user, password, expected in attempts * 3:
        assert config.check_basic_auth(basic(user, password)) is expected
    assert len(bcrypt_calls) == len(attempts)  # once each, the first time
    assert config.check_basic_auth(basic("alice", b"another guess")) is False and len(bcrypt_calls) == 4


def test_an_unknown_user_costs_one_bcrypt_against_a_configured_hash(pki, hashed, bcrypt_calls):
    """The same work as a known user's check: the time taken does not tell which users exist."""
    config = load(pki, f"basic_auth_users:\n  alice: '{hashed}'\n")
    assert config.check_basic_auth(basic("bob", PASSWORD)) is False  # alice's password, bob's name
    assert bcrypt_calls == [(PASSWORD, hashed.encode())]


def test_logins_are_checked_in_parallel_not_behind_one_lock(pki, hashed, monkeypatch):
    config = load(pki, f"basic_auth_users:\n  alice: '{hashed}'\n")
    both_inside = threading.Barrier(2, timeout=30)  # passes only if two checks are in bcrypt at once
    monkeypatch.setattr(webconfig, "_bcrypt_matches", lambda password, hashed: both_inside.wait() is not None and False)
    results = []
    threads = [
        threading.Thread(target=lambda p=p: results.append(config.check_basic_auth(basic("alice", p))))
        for p in (b"one", b"two")
    ]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert results == [False, False] and not both_inside.broken


def test_check_basic_auth_is_thread_safe(pki, hashed):
    config = load(pki, f"basic_auth_users:\n  alice: '{hashed}'\n")
    headers = [basic("alice", PASSWORD), basic("alice", b"wrong")] * 4
    results = [None] * len(headers)

    def check(i):
        results[i] = config.check_basic_auth(headers[i])

    threads = [threading.Thread(target=check, args=(i,)) for i in range(len(headers))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert results == [True, False] * 4


@pytest.mark.parametrize("cost", ["04", "09", "17", "31", "99"])
def test_a_bcrypt_cost_outside_10_to_16_is_refused(pki, cost):
    too = "$2b$" + cost + "$" + "a" * 53
    with pytest.raises(WebConfigError, match=f"basic_auth_users.alice has bcrypt cost {cost}, outside 10-16"):
        load(pki, f"basic_auth_users:\n  alice: '{too}'\n")


@pytest.mark.parametrize(
    "text, offending",
    [
        ("tls_server_config: [unclosed\n", "invalid YAML"),
        ("- a list\n", "top level"),
        ("rate_limit:\n  interval: 5\n", "rate_limit.interval"),  # Go would read 5 ns
        ("rate_limit:\n  interval: -1s\n", "rate_limit.interval"),
        ("rate_limit:\n  interval: 1s\n  burst: -1\n", "rate_limit.burst"),
        ("rate_limit:\n  interval: 1s\n  burst: true\n", "rate_limit.burst"),
        (TLS + "  client_allowed_sans: [a]\n", "tls_server_config.client_allowed_sans"),
        (TLS + "  client_allowed_sans: [a]\n", "unverified certificate"),
        (
            TLS + "  client_auth_type: RequireAnyClientCert\n",
            "client_auth_type RequireAnyClientCert takes a client certificate unverified",
        ),
        (TLS + "  curve_preferences: [X25519, CurveP256]\n", "curve_preferences names 2 curves"),
        (TLS + "  cert: inline\n", "both cert and cert_file"),
        (TLS + "  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n", "unknown cipher TLS_RSA_WITH_AES_128_CBC_SHA"),
        (TLS + "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n  max_version: TLS12\n", "TLS 1.3 suites only"),
        (TLS + "  curve_preferences: [X448]\n", "unknown curve X448"),
        (TLS + "  prefer_server_cipher_suites: yes please\n", "prefer_server_cipher_suites"),
        (TLS + "  key_file: client.key\n", "tls_server_config.key_file is given twice"),
        ("http_server_config:\n  http2: 'no'\n", "http_server_config.http2"),
        ("http_server_config:\n  gzip: true\n", "http_server_config.gzip"),
        ("tls_server_config:\n  key_file: server.key\n", "missing one of cert or cert_file"),
        ("tls_server_config:\n  cert_file: server.crt\n", "missing one of key or key_file"),
        ("tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n", "cert_file missing.crt"),
        ("tls_server_config:\n  cert_file: garbage.pem\n  key_file: server.key\n", "cert_file garbage.pem"),
        ("tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n", "key_file client.key"),
        ("tls_server_config:\n  cert_file: ca.crt\n  key_file: encrypted.key\n", "key_file encrypted.key"),
        (TLS + "  client_auth_type: Sometimes\n", "client_auth_type"),
        (TLS + "  client_ca_file: ca.crt\n", "client_ca_file"),
        (TLS + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: garbage.pem\n", "client_ca_file"),
        (TLS + "  min_version: TLS14\n", "min_version"),
        (TLS + "  max_version: 1.2\n", "max_version"),
        (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "min_version"),
        ("basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice"),
        ("basic_auth_users:\n  yes: '$2b$10$abc'\n", "basic_auth_users"),
        ("http_server_config:\n  headers:\n    X-Powered-By: me\n", "headers.X-Powered-By"),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "headers.X-Frame-Options"),
        ('http_server_config:\n  headers:\n    X-XSS-Protection: "1\\r\\nSet-Cookie: a"\n', "headers.X-XSS-Protection"),
    ],
)
def test_errors_are_one_line_and_name_the_key(pki, text, offending):
    with pytest.raises(WebConfigError) as raised:
        load(pki, text)
    message = str(raised.value)
    assert message.startswith(f"web config {pki}")
    assert offending in message
    assert "\n" not in message


def test_unreadable_file(tmp_path):
    missing = tmp_path / "nope.yml"
    with pytest.raises(WebConfigError, match=f"^web config {missing}: cannot read file"):
        load_web_config(str(missing))


def test_client_auth_without_a_ca_verifies_against_the_system_pool(pki):
    """As Go: no client_ca_file means the system's CAs, which never signed the test client."""
    config = load(pki, TLS + "  client_auth_type: RequireAndVerifyClientCert\n")
    with serving(config.ssl_context) as port:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            fetch(port, client_context(pki, cert=True))


@pytest.mark.parametrize("auth", ["RequestClientCert", "RequireAnyClientCert", "RequireClientCert"])
def test_a_client_auth_that_takes_certificates_unverified_is_refused_in_one_line(pki, auth):
    """Go takes such a certificate unverified; OpenSSL does only when a verify callback says yes, which Python's
    ssl module never sets."""
    with pytest.raises(WebConfigError, match=f"client_auth_type {auth} takes a client certificate unverified"):
        load(pki, TLS + f"  client_auth_type: {auth}\n")


def test_cipher_suites_naming_only_tls13_suites_leave_tls12_out(pki):
    """Go would then find no suite for a TLS 1.2 client; not offering TLS 1.2 fails it the same."""
    config = load(pki, TLS + "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n")
    assert config.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_3


def test_one_curve_is_the_only_one_offered(pki):
    config = load(pki, TLS + "  curve_preferences: [X25519]\n")
    with serving(config.ssl_context) as port:
        assert fetch(port, client_context(pki)) == (200, b"ok")
        only_p384 = client_context(pki)
        only_p384.set_ecdh_curve("secp384r1")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            fetch(port, only_p384)


def test_header_values_are_served_as_written(pki):
    config = load(
        pki,
        "http_server_config:\n  headers:\n    X-XSS-Protection: 1\n"
        "    Strict-Transport-Security: 0x10\n    Content-Security-Policy:\n",
    )
    # as Go reads them into strings
    assert dict(config.headers) == {
        "X-XSS-Protection": "1",
        "Strict-Transport-Security": "0x10",
        "Content-Security-Policy": "",
    }


def test_client_names_are_the_toolkits_kinds_with_ips_as_go_writes_them():
    peer = {
        "subjectAltName": (
            ("DNS", "node-a"),
            ("email", "a@b.c"),
            ("URI", "spiffe://x/y"),
            ("IP Address", "2001:DB8:0:0:0:0:0:1\n"),
            ("IP Address", "10.0.0.1"),
            ("DirName", "CN=other"),
            ("othername", "<unsupported>"),
        )
    }
    assert web_tls.certificate_names(peer) == {"node-a", "a@b.c", "spiffe://x/y", "2001:db8::1", "10.0.0.1"}
    assert web_tls.certificate_names(None) == set()  # no certificate: no name can match


def test_rate_limit_is_a_token_bucket():
    clock = [0.0]
    bucket = TokenBucket(2.0, 3, clock=lambda: clock[0])
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]  # full at start: the burst
    clock[0] += 2.0
    assert [bucket.allow(), bucket.allow()] == [True, False]  # then a token per interval
    clock[0] += 100
    assert sum(bucket.allow() for _ in range(5)) == 3  # never more held than the burst
    assert TokenBucket(1.0, 0).allow() is False  # a burst of 0 refuses everything, as Go's limiter does


def test_rate_limit_interval_reads_go_durations(pki):
    assert load(pki, "rate_limit:\n  interval: 1m30s\n  burst: 2\n").rate_limit.interval == 90.0
    assert load(pki, "rate_limit:\n  interval: 250ms\n").rate_limit.interval == 0.25
    for off in ("0", "0s", "'0'"):
        assert load(pki, f"rate_limit:\n  interval: {off}\n  burst: 5\n").rate_limit is None


def exporter_serving(config_path, **kwargs):
    server = ExporterServer(
        ("127.0.0.1", 0),
        load_web_config(str(config_path)),
        ScrapeAssembler([], "node-a"),
        [],
        [],
        "/metrics",
        0,
        **kwargs,
    )
    return serving_in_thread(server)


def served_certificate(port, max_version=None) -> bytes:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # the test compares the certificate itself
    if max_version:
        ctx.maximum_version = max_version
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(raw) as tls:
        return tls.getpeercert(binary_form=True)


def der(path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


@pytest.fixture
def tls_files(tmp_path):
    write_tls_files(tmp_path)
    (tmp_path / "web.yml").write_text(TLS)
    return tmp_path


def test_a_certificate_rotated_on_disk_is_served_to_the_next_connection(tls_files):
    with exporter_serving(tls_files / "web.yml") as port:
        first = served_certificate(port)
        assert first == der(tls_files / "server.crt")
        write_tls_files(tls_files)  # a new key and certificate, as cert-manager renews them
        assert served_certificate(port) == der(tls_files / "server.crt") != first


def web_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == webconfig.__name__]


def test_a_broken_new_file_keeps_the_config_before_with_one_log_line(tls_files, caplog, monkeypatch):
    monkeypatch.setattr(webconfig, "RETRY_SECONDS", 0)  # read again on every connection, to show the one line
    config = tls_files / "web.yml"
    with exporter_serving(config) as port:
        config.write_text("tls_server_config: [unclosed\n")
        for _ in range(3):
            assert served_certificate(port) == der(tls_files / "server.crt")
        [warning] = web_warnings(caplog)
        assert "invalid YAML" in warning and "still serving with the web config read before" in warning
        config.write_text(TLS + "  min_version: TLS13\n")
        with pytest.raises(ssl.SSLError):  # the fixed file is the one served now
            served_certificate(port, max_version=ssl.TLSVersion.TLSv1_2)


def test_switching_between_http_and_https_needs_a_restart(tls_files, caplog):
    config = tls_files / "web.yml"
    with exporter_serving(config) as port:
        config.write_text("")  # plain HTTP
        assert served_certificate(port) == der(tls_files / "server.crt")
        assert ["needs a restart" in warning for warning in web_warnings(caplog)] == [True]


def status_from(port, source) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


def test_rate_limit_answers_429_but_never_to_a_priority_source(tmp_path):
    (tmp_path / "web.yml").write_text("rate_limit:\n  interval: 1h\n  burst: 1\n")
    with exporter_serving(tmp_path / "web.yml", priority_sources=[ipaddress.ip_network("127.0.0.2/32")]) as port:
        assert [status_from(port, "127.0.0.1") for _ in range(2)] == [200, 429]
        assert [status_from(port, "127.0.0.2") for _ in range(3)] == [200, 200, 200]
