"""The helm test's script (helm/alnair/files/check-metrics.py, run by the hook pod) against a real exporter: plain
HTTP, HTTPS verified against the CA for the certificate's name (as the ServiceMonitor's tlsConfig does), basic
auth; and its failures: a wrong password, an unknown CA, another name, nothing listening."""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import sys

import bcrypt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from chart_support import CHART
from support import free_port

SCRIPT = CHART / "files" / "check-metrics.py"
SERVICE_NAME = "alnair.monitoring.svc"


def check(port: int, **env: str) -> subprocess.CompletedProcess:
    variables = {"ALNAIR_HOST": "127.0.0.1", "ALNAIR_PORT": str(port), "ALNAIR_PATH": "/metrics", **env}
    return subprocess.run(
        [sys.executable, "-I", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], **variables},
    )


def issue(directory, name: str) -> None:
    """ca.crt, and tls.crt / tls.key for `name` (and 127.0.0.1) signed by it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "alnair-test-ca")])

    def certificate(subject, public_key, ca, extensions):
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        return builder.sign(ca_key, hashes.SHA256())

    ca = certificate(ca_name, ca_key.public_key(), True, [])
    served = certificate(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]),
        key.public_key(),
        False,
        [x509.SubjectAlternativeName([x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])],
    )
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.crt").write_bytes(served.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


@pytest.fixture
def secured_exporter(start_exporter, shm_dir, tmp_path):
    """An exporter with TLS for SERVICE_NAME and a basic-auth user, as the chart's web config mounts them."""
    issue(tmp_path, SERVICE_NAME)
    digest = bcrypt.hashpw(b"scrape-password", bcrypt.gensalt(10)).decode()
    (tmp_path / "web-config.yml").write_text(
        f"tls_server_config:\n  cert_file: {tmp_path}/tls.crt\n  key_file: {tmp_path}/tls.key\n"
        f"basic_auth_users:\n  prometheus: '{digest}'\n"
    )
    exporter = start_exporter(
        f"--shm.dir={shm_dir}", f"--web.config.file={tmp_path}/web-config.yml", "--no-collector.nvml"
    )
    return exporter, tmp_path


def test_plain_http(start_exporter, shm_dir):
    exporter = start_exporter(f"--shm.dir={shm_dir}", "--no-collector.nvml")
    result = check(exporter.port, ALNAIR_SCHEME="http")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"ok http://127.0.0.1:{exporter.port}/metrics: ")


def test_https_with_the_ca_for_the_service_name_and_basic_auth(secured_exporter):
    exporter, pki = secured_exporter
    result = check(
        exporter.port,
        ALNAIR_SCHEME="https",
        ALNAIR_CA_FILE=str(pki / "ca.crt"),
        ALNAIR_SERVER_NAME=SERVICE_NAME,
        ALNAIR_USERNAME="prometheus",
        ALNAIR_PASSWORD="scrape-password",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok https://")


@pytest.mark.parametrize(
    "env,why",
    [
        ({"ALNAIR_PASSWORD": "wrong"}, "401"),
        ({"ALNAIR_USERNAME": ""}, "401"),
        ({"ALNAIR_SERVER_NAME": "other.monitoring.svc"}, "certificate verify failed"),
        ({"ALNAIR_CA_FILE": ""}, "certificate verify failed"),
        ({"ALNAIR_SCHEME": "http"}, "400"),
    ],
    ids=["wrong-password", "no-credentials", "other-name", "system-cas-only", "http-to-https"],
)
def test_failures_exit_1_with_one_line(secured_exporter, env, why):
    exporter, pki = secured_exporter
    settings = {
        "ALNAIR_SCHEME": "https",
        "ALNAIR_CA_FILE": str(pki / "ca.crt"),
        "ALNAIR_SERVER_NAME": SERVICE_NAME,
        "ALNAIR_USERNAME": "prometheus",
        "ALNAIR_PASSWORD": "scrape-password",
        **env,
    }
    result = check(exporter.port, **settings)
    assert result.returncode == 1
    assert result.stderr.startswith("FAIL ") and why in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_insecure_skip_verify_takes_any_certificate(secured_exporter):
    exporter, _ = secured_exporter
    result = check(
        exporter.port,
        ALNAIR_SCHEME="https",
        ALNAIR_INSECURE_SKIP_VERIFY="true",
        ALNAIR_USERNAME="prometheus",
        ALNAIR_PASSWORD="scrape-password",
    )
    assert result.returncode == 0, result.stderr


def test_nothing_listening():
    result = check(free_port(), ALNAIR_SCHEME="http")
    assert result.returncode == 1 and result.stderr.startswith("FAIL http://127.0.0.1:")
