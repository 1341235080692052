"""prometheus/exporter-toolkit's own web config tests, run against the exporter.

Each case is one of the toolkit's test cases (web/tls_config_test.go and web/handler_test.go, at the commit
toolkit_testdata/README.md names), its id the toolkit's test name: the toolkit's config file and client, and
the outcome the toolkit expects. TestYAMLFiles runs each file twice (run/ and validate/); the exporter has one
path for both, load_web_config, so each file is one case here. The table's 58 cases and the five test_Test*
functions are the toolkit's 63; a case with `differs`, and a function in FUNCTIONS_THAT_DIFFER, expects the
exporter's own outcome, for the reason docs/security.md gives (its count is checked there). A refused file is
matched on the exporter's message (one line naming the key), not on the toolkit's wording. The TLS clients are Python's
ssl, the server the real ExporterServer; where the toolkit's handler answers "Hello World!", /healthz answers "ok"."""

from __future__ import annotations

import base64
import concurrent.futures
import http.client
import shutil
import ssl
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from alnair.exporter.scrape import ScrapeAssembler
from alnair.exporter.server import ExporterServer
from alnair.exporter.webconfig import WebConfigError, load_web_config
from support import serving_in_thread

DATA = Path(__file__).parent / "toolkit_testdata"
ROOT = Path(__file__).resolve().parents[2]
# The toolkit's users files hold bob's hash at bcrypt cost 18, which the exporter refuses (docs/security.md):
# those cases check that refusal, then run on the same file without bob.
BCRYPT = "bcrypt cost 10-16"
HTTP2 = "HTTP/1.1 only"
# asyncio closes a failed handshake without the alert OpenSSL wrote (CPython gh-98078): the client reads an EOF.
ALERT = "no TLS alert"
ONE_CURVE = "one curve"  # Python's ssl module sets one curve; a list of several is refused
UNVERIFIED = "no unverified client certificate"  # it takes none unverified; those client_auth_types are refused
# What a client sees when the connection fails before any response.
FAILURES = (ssl.SSLError, ConnectionError, http.client.HTTPException)


@dataclass(frozen=True)
class Client:
    tls: bool = False
    cert: str = ""  # the toolkit's client certificate and key, by name
    max_version: ssl.TLSVersion | None = None
    ciphers: str = ""  # OpenSSL's names for the Go client's CipherSuites, in its order
    curve: str = ""  # the one group offered, as the Go client's CurvePreferences
    user: str = ""
    password: str = ""
    requests: int = 0  # the toolkit's Requests: 1 + this many are made


@dataclass(frozen=True)
class Case:
    config: str  # a file in toolkit_testdata ("" for no --web.config.file)
    client: Client = Client()
    text: str = ""  # the config itself, written next to the toolkit's files, where the toolkit has no file
    refused: str = ""  # load_web_config refuses the file, its message matching this
    fails: str | None = None  # the request fails before any response, the error matching this
    status: int = 200
    body: str = ""  # matched against a non-200 body
    cipher: str = ""  # the TLS 1.2 suite the server must pick
    without_user: str = ""  # the file is refused for this user's bcrypt cost, and runs without that user
    differs: str = ""  # where the exporter's outcome is not the toolkit's: docs/security.md says why


TLS = Client(tls=True)
NO_SUCH_FILE = "No such file or directory"
UNVERIFIED_REFUSAL = "client_auth_type RequireAnyClientCert takes a client certificate unverified"


def case(peer_test: str, *args, **kwargs):
    return pytest.param(Case(*args, **kwargs), id=peer_test)


YAML_FILES = "TestYAMLFiles/"
CASES = [
    case(YAML_FILES + "path to config yml invalid", "somefile", refused=NO_SUCH_FILE),
    case(YAML_FILES + "empty config yml", "web_config_empty.yml"),
    case(
        YAML_FILES + "invalid config yml (invalid structure)",
        "web_config_junk.yml",
        refused="the top level must be a mapping",
    ),
    case(
        YAML_FILES + "invalid config yml (invalid key)",
        "web_config_junk_key.yml",
        refused="unknown or unsupported key tls_server_config.cert_filse",
    ),
    case(
        YAML_FILES + "invalid config yml (cert path empty)",
        "web_config_noAuth_certPath_empty.bad.yml",
        refused="missing one of cert or cert_file",
    ),
    case(
        YAML_FILES + "invalid config yml (cert empty)",
        "web_config_noAuth_cert_empty.bad.yml",
        refused="missing one of cert or cert_file",
    ),
    case(
        YAML_FILES + "invalid config yml (key path empty)",
        "web_config_noAuth_keyPath_empty.bad.yml",
        refused="missing one of key or key_file",
    ),
    case(
        YAML_FILES + "invalid config yml (key empty)",
        "web_config_noAuth_key_empty.bad.yml",
        refused="missing one of key or key_file",
    ),
    case(
        YAML_FILES + "invalid config yml (cert path and key path empty)",
        "web_config_noAuth_certPath_keyPath_empty.bad.yml",
        refused="missing one of cert or cert_file",
    ),
    case(
        YAML_FILES + "invalid config yml (cert path invalid)",
        "web_config_noAuth_certPath_invalid.bad.yml",
        refused=NO_SUCH_FILE,
    ),
    case(
        YAML_FILES + "invalid config yml (key path invalid)",
        "web_config_noAuth_keyPath_invalid.bad.yml",
        refused=NO_SUCH_FILE,
    ),
    case(
        YAML_FILES + "invalid config yml (cert path and key path invalid)",
        "web_config_noAuth_certPath_keyPath_invalid.bad.yml",
        refused=NO_SUCH_FILE,
    ),
    case(
        YAML_FILES + "invalid config yml (invalid ClientAuth)",
        "web_config_noAuth.bad.yml",
        refused="client_ca_file .or client_ca. is set but client_auth_type is NoClientCert",
    ),
    # The toolkit reads the CA file before it looks at the policy, so it names the missing file first; the
    # exporter names the policy first. Both refuse the file.
    case(
        YAML_FILES + "invalid config yml (invalid ClientCAs filepath)",
        "web_config_auth_clientCAs_invalid.bad.yml",
        refused="client_auth_type is NoClientCert",
    ),
    case(
        YAML_FILES + "invalid config yml (invalid user list)",
        "web_config_auth_user_list_invalid.bad.yml",
        refused="basic_auth_users.john is not a bcrypt hash",
    ),
    case(
        YAML_FILES + "invalid config yml (bad cipher)",
        "web_config_noAuth_inventedCiphers.bad.yml",
        refused="unknown cipher TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA2048",
    ),
    case(
        YAML_FILES + "invalid config yml (bad curves)",
        "web_config_noAuth_inventedCurves.bad.yml",
        refused="unknown curve CurveP257",
    ),
    case(
        YAML_FILES + "invalid config yml (bad TLS version)",
        "web_config_noAuth_wrongTLSVersion.bad.yml",
        refused="min_version 'TLS111' is not one of",
    ),
]

SERVER = "TestServerBehaviour/"
AES128_GCM, AES256_GCM = "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384"
CASES += [
    case(SERVER + "empty string YAMLConfigPath and default client", ""),
    case(SERVER + "empty string YAMLConfigPath and TLS client", "", TLS, fails="WRONG_VERSION_NUMBER"),
    case(
        SERVER + "valid tls config yml and default client",
        "web_config_noAuth.good.yml",
        status=400,
        body="Client sent an HTTP request to an HTTPS server",
    ),
    case(SERVER + "valid tls config yml and tls client", "web_config_noAuth.good.yml", TLS),
    case(
        SERVER + "valid tls config yml (cert and key inline) and tls client",
        "web_config_noAuth_tlsInline.good.yml",
        TLS,
    ),
    case(
        SERVER + "valid tls config yml with TLS 1.1 client",
        "web_config_noAuth.good.yml",
        Client(tls=True, max_version=ssl.TLSVersion.TLSv1_1),
        fails="(?i)protocol version|EOF",
        differs=ALERT,
    ),
    case(SERVER + "valid tls config yml with all ciphers", "web_config_noAuth_allCiphers.good.yml", TLS),
    case(
        SERVER + "valid tls config yml with some ciphers",
        "web_config_noAuth_someCiphers.good.yml",
        Client(tls=True, ciphers=AES128_GCM),
    ),
    case(
        SERVER + "valid tls config yml with no common cipher",
        "web_config_noAuth_someCiphers.good.yml",
        Client(tls=True, ciphers="ECDHE-RSA-AES256-SHA"),
        fails="(?i)handshake failure|EOF",
        differs=ALERT,
    ),
    case(
        SERVER + "valid tls config yml with multiple client ciphers",
        "web_config_noAuth_someCiphers.good.yml",
        Client(tls=True, ciphers=f"{AES128_GCM}:{AES256_GCM}"),
        cipher=AES128_GCM,
    ),
    case(
        SERVER + "valid tls config yml with multiple client ciphers, client chooses cipher",
        "web_config_noAuth_someCiphers_noOrder.good.yml",
        Client(tls=True, ciphers=f"{AES128_GCM}:{AES256_GCM}"),
        cipher=AES128_GCM,
    ),
    case(
        SERVER + "valid tls config yml with all curves",
        "web_config_noAuth_allCurves.good.yml",
        TLS,
        refused="names 4 curves",
        differs=ONE_CURVE,
    ),
    case(
        SERVER + "valid tls config yml with some curves",
        "web_config_noAuth_someCurves.good.yml",
        Client(tls=True, curve="secp521r1"),
    ),
    case(
        SERVER + "valid tls config yml with no common curves",
        "web_config_noAuth_someCurves.good.yml",
        Client(tls=True, curve="secp384r1"),
        fails="(?i)handshake failure|EOF",
        differs=ALERT,
    ),
    case(SERVER + "valid tls config yml with non-http2 ciphers", "web_config_noAuth_noHTTP2.good.yml", TLS),
    # The toolkit refuses this cipher list because HTTP/2 needs an AES-128-GCM suite; the exporter never
    # speaks HTTP/2, so the list serves.
    case(
        SERVER + "valid tls config yml with non-http2 ciphers but http2 enabled",
        "web_config_noAuth_noHTTP2Cipher.bad.yml",
        TLS,
        differs=HTTP2,
    ),
    case(SERVER + "valid headers config", "web_config_headers.good.yml"),
    case(
        SERVER + "invalid X-Content-Type-Options headers config",
        "web_config_headers_content_type_options.bad.yml",
        refused="headers.X-Content-Type-Options must be nosniff",
    ),
    case(
        SERVER + "invalid X-Frame-Options headers config",
        "web_config_headers_frame_options.bad.yml",
        refused="headers.X-Frame-Options must be deny or sameorigin",
    ),
    case(
        SERVER + "HTTP header that can not be overridden",
        "web_config_headers_extra_header.bad.yml",
        refused="unknown or unsupported key http_server_config.headers.Content-Type",
    ),
    case(
        SERVER + "valid tls config yml and tls client with RequireAnyClientCert (present certificate)",
        "tls_config_noAuth.requireanyclientcert.good.yml",
        Client(tls=True, cert="client_selfsigned"),
        refused=UNVERIFIED_REFUSAL,
        differs=UNVERIFIED,
    ),
    # The toolkit's table names the same file as the case above, not ...keyinline.good.yml: kept as it is.
    # test_webconfig.py serves the key-inline file itself.
    case(
        SERVER + "valid tls config yml (cert from file, key inline) and tls client with RequireAnyClientCert "
        "(present certificate)",
        "tls_config_noAuth.requireanyclientcert.good.yml",
        Client(tls=True, cert="client_selfsigned"),
        refused=UNVERIFIED_REFUSAL,
        differs=UNVERIFIED,
    ),
    case(
        SERVER + "valid tls config yml and tls client with RequireAndVerifyClientCert (present certificate)",
        "tls_config_noAuth.requireandverifyclientcert.good.yml",
        Client(tls=True, cert="client_selfsigned"),
    ),
    case(
        SERVER + "valid tls config yml and tls client with VerifyPeerCertificate (present good SAN DNS entry)",
        "web_config_auth_client_san.good.yaml",
        Client(tls=True, cert="client2_selfsigned"),
    ),
    # Go fails the handshake ("bad certificate"); the exporter checks the names just after it and closes the
    # connection unanswered. Either way the client gets no response.
    case(
        SERVER + "valid tls config yml and tls client with VerifyPeerCertificate (present invalid SAN DNS entries)",
        "web_config_auth_client_san.bad.yaml",
        Client(tls=True, cert="client2_selfsigned"),
        fails="(?i)closed|reset|eof",
    ),
    case(
        SERVER + "valid rate limiter (no rate limiter set up) that doesn't block",
        "web_config_rate_limiter_nonblocking.yaml",
        Client(requests=10),
    ),
    case(
        SERVER + "valid rate limiter with an interval of one second",
        "web_config_rate_limiter_one_second.yaml",
        Client(requests=10),
        status=429,
        body="Too Many Requests",
    ),
]

USERS, USERS_TLS = "web_config_users_noTLS.good.yml", "web_config_users.good.yml"
CASES += [
    case("TestUsers/" + name, config, client, status=status, without_user="bob", differs=BCRYPT)
    for name, config, client, status in [
        ("without basic auth", USERS, Client(), 401),
        ("with correct basic auth", USERS, Client(user="dave", password="dave123"), 200),
        ("without basic auth and TLS", USERS_TLS, TLS, 401),
        ("with correct basic auth and TLS", USERS_TLS, Client(tls=True, user="dave", password="dave123"), 200),
        (
            "with another correct basic auth and TLS",
            USERS_TLS,
            Client(tls=True, user="carol", password="carol123"),
            200,
        ),
        ("with bad password and TLS", USERS_TLS, Client(tls=True, user="dave", password="bad"), 401),
        ("with bad username and TLS", USERS_TLS, Client(tls=True, user="nonexistent", password="nonexistent"), 401),
    ]
]

# TestTLSConfigIsEnabled checks which TLSConfig turns TLS on: written here as files, TLS on shows as TLS served
# or a TLS problem refused, TLS off as plain HTTP served.
ENABLED = "TestTLSConfigIsEnabled/"
CASES += [
    case(ENABLED + "empty config", "is_enabled.yml", text="tls_server_config: {}\n"),
    case(
        ENABLED + "only non-enabling fields set",
        "is_enabled.yml",
        text="tls_server_config:\n  min_version: TLS12\n  prefer_server_cipher_suites: true\n",
    ),
    case(
        ENABLED + "cert_file and key_file set",
        "is_enabled.yml",
        TLS,
        text="tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    ),
    case(
        ENABLED + "inline cert and key set",
        "is_enabled.yml",
        text="tls_server_config:\n  cert: cert\n  key: key\n",
        refused="cannot load tls_server_config.cert with tls_server_config.key",
    ),
    case(
        ENABLED + "only client CA file set",
        "is_enabled.yml",
        text="tls_server_config:\n  client_ca_file: client_ca.crt\n",
        refused="missing one of cert or cert_file",
    ),
    case(
        ENABLED + "only client auth type set",
        "is_enabled.yml",
        text="tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n",
        refused="missing one of cert or cert_file",
    ),
]


@pytest.fixture
def data(tmp_path) -> Path:
    """A copy of the toolkit's files, so a case may add or change one."""
    return Path(shutil.copytree(DATA, tmp_path / "testdata"))


def config_path(case: Case, data: Path) -> str:
    if not case.config:
        return ""
    path = data / case.config
    if case.text:
        path.write_text(case.text)
    if case.without_user:
        with pytest.raises(WebConfigError, match=f"basic_auth_users.{case.without_user} has bcrypt cost 18"):
            load_web_config(str(path))
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(line for line in lines if not line.startswith(f"  {case.without_user}:")))
    return str(path)


def serving(path: str):
    web = load_web_config(path)
    return serving_in_thread(
        ExporterServer(("127.0.0.1", 0), web, ScrapeAssembler([], "node-a"), [], [], "/metrics", 0)
    )


def client_context(client: Client) -> ssl.SSLContext:
    # The toolkit's client trusts tls-ca-chain.pem. That chain's CAs name anyExtendedKeyUsage alone, which Go
    # takes for a server's chain and OpenSSL 3.0 does not, so this client trusts the server's certificate
    # itself: the server is still verified, its name included.
    ctx = ssl.create_default_context(cafile=str(DATA / "server.crt"))
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    if client.cert:
        ctx.load_cert_chain(str(DATA / f"{client.cert}.pem"), str(DATA / f"{client.cert}.key"))
    if client.max_version is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # an old TLS version is the point here
            ctx.minimum_version, ctx.maximum_version = ssl.TLSVersion.TLSv1, client.max_version
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL 3 offers TLS 1.1 only at security level 0
    if client.ciphers:
        ctx.set_ciphers(client.ciphers)
    if client.curve:
        ctx.set_ecdh_curve(client.curve)
    return ctx


def get(port: int, client: Client) -> tuple[int, bytes, str]:
    """(status, body, TLS suite) of one GET /healthz."""
    if client.tls:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=client_context(client), timeout=10)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        credentials = base64.b64encode(f"{client.user}:{client.password}".encode()).decode()
        conn.request("GET", "/healthz", headers={"Authorization": "Basic " + credentials} if client.user else {})
        response = conn.getresponse()
        body = response.read()
        return response.status, body, conn.sock.cipher()[0] if client.tls else ""
    finally:
        conn.close()


@pytest.mark.parametrize("case", CASES)
def test_toolkit_case(case: Case, data: Path):
    path = config_path(case, data)
    if case.refused:
        with pytest.raises(WebConfigError, match=case.refused):
            load_web_config(path)
        return
    with serving(path) as port:
        if case.fails is not None:
            with pytest.raises(FAILURES, match=case.fails):
                get(port, case.client)
            return
        for _ in range(case.client.requests + 1):
            status, body, cipher = get(port, case.client)
            assert status == case.status, body
            if status != 200:
                assert case.body.encode() in body
                return
            assert body == b"ok\n"
            if case.cipher:
                assert cipher == case.cipher


def users_file(data: Path) -> str:
    """The toolkit's web_config_users_noTLS.good.yml without bob (BCRYPT above)."""
    return config_path(Case(USERS, without_user="bob"), data)


def login(port: int, user: str, password: str) -> int:
    return get(port, Client(user=user, password=password))[0]


def test_TestBasicAuthCache(data):  # differs: BCRYPT
    with serving(users_file(data)) as port:
        assert login(port, "alice", "alice123") == 200
        assert login(port, "alice", "alice1234") == 401
        # The toolkit starts 150 of each at once; here 32 at a time, below the exporter's 256 open connections
        # (more are answered 503 by design).
        attempts = [("alice123", 200), ("alice1234", 401)] * 150
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            codes = list(pool.map(lambda attempt: login(port, "alice", attempt[0]), attempts))
        assert codes == [code for _, code in attempts]


def test_TestBasicAuthWithFakepassword(data):  # differs: BCRYPT
    with serving(users_file(data)) as port:
        assert login(port, "fakeuser", "fakepassword") == 401  # cold cache
        assert login(port, "fakeuser", "fakepassword") == 401  # cached


def test_TestByPassBasicAuthVuln(data):  # differs: BCRYPT; CVE-2022-46146
    with serving(users_file(data)) as port:
        assert login(port, "alice$2y$12$1DpfPeqF9HzHJt.EWswy1exHluGfbhnn3yXhR7Xes6m3WJqFg0Wby", "fakepassword") == 401
        assert login(port, "alice", "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSifakepassword") == 401


def test_TestHTTPHeaders():
    with serving(str(DATA / "web_config_headers.good.yml")) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        conn.close()
    assert {
        name: response.headers[name]
        for name in ("Strict-Transport-Security", "X-Frame-Options", "X-Content-Type-Options", "X-XSS-Protection")
    } == {
        "Strict-Transport-Security": "max-age=31536000; includeSubDomains",
        "X-Frame-Options": "deny",
        "X-Content-Type-Options": "nosniff",
        "X-XSS-Protection": "1",  # `X-XSS-Protection: 1` in the file: a YAML integer, served as written
    }


def test_TestConfigReloading(data):  # differs: ALERT
    """Served with the blocking file (RequireAndVerifyClientCert), a client without a certificate fails; once
    the file holds the good one (VerifyClientCertIfGiven), new connections succeed without a restart."""
    good, config = data / "web_config_noAuth.good.yml", data / "web_config_noAuth.good.blocking.yml"
    with serving(str(config)) as port:
        with pytest.raises(FAILURES, match="(?i)certificate required|closed|EOF"):
            get(port, TLS)
        config.write_text(good.read_text())
        assert get(port, TLS)[0] == 200  # the very next connection: the toolkit's test waits 250 ms, no more


def test_the_key_inline_file_the_toolkit_meant_serves_with_a_verified_client(data):
    """Not one of the toolkit's cases: the file its "cert from file, key inline" case was meant to name, refused as
    the file of that case is (UNVERIFIED), serves once its client certificate is verified."""
    path = data / "tls_config_noAuth.requireanyclientcertkeyinline.good.yml"
    with pytest.raises(WebConfigError, match=UNVERIFIED_REFUSAL):
        load_web_config(str(path))
    path.write_text(
        path.read_text().replace(
            'client_auth_type: "RequireAnyClientCert"',
            "client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: client_selfsigned.pem",
        )
    )
    with serving(str(path)) as port:
        assert get(port, Client(tls=True, cert="client_selfsigned"))[:2] == (200, b"ok\n")


# The test_Test* functions whose outcome is the exporter's own, and why.
FUNCTIONS_THAT_DIFFER = {
    "test_TestBasicAuthCache": BCRYPT,
    "test_TestBasicAuthWithFakepassword": BCRYPT,
    "test_TestByPassBasicAuthVuln": BCRYPT,
    "test_TestConfigReloading": ALERT,
}


def test_docs_security_md_counts_the_cases_that_end_as_the_toolkits():
    functions = [name for name in globals() if name.startswith("test_Test")]
    assert set(FUNCTIONS_THAT_DIFFER) <= set(functions)
    differing = sum(1 for param in CASES if param.values[0].differs) + len(FUNCTIONS_THAT_DIFFER)
    total = len(CASES) + len(functions)
    text = " ".join((ROOT / "docs" / "security.md").read_text().split())
    assert f"the toolkit's own {total} test cases" in text
    assert f"{total - differing} end as the toolkit's do; the other {differing} differ" in text
