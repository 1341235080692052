"""The certificate is read again when cert-manager rotates it: new connections get the new one, open ones keep
theirs, and files that do not load keep the certificate served before, said once in the log."""

from __future__ import annotations

import os
import shutil
import ssl
import time

import pytest

from alnair.injector.server import RETRY_SECONDS
from support import wait_until, write_tls_files


def rotate(tls_dir, new_dir) -> None:
    """As the kubelet updates a Secret volume: each file replaced whole by a rename, never written in place."""
    new_dir.mkdir()
    write_tls_files(new_dir)
    for name in ("server.crt", "server.key"):
        shutil.copy(new_dir / name, tls_dir / f".{name}.new")
        os.replace(tls_dir / f".{name}.new", tls_dir / name)


def test_a_rotated_certificate_serves_new_connections_and_open_ones_go_on(start_injector, tmp_path):
    injector = start_injector()
    old_ca = tmp_path / "old-ca.crt"
    shutil.copy(injector.tls_dir / "ca.crt", old_ca)
    open_connection = injector.connect(old_ca)
    open_connection.request("GET", "/healthz")
    assert open_connection.getresponse().read() == b"ok\n"

    rotate(injector.tls_dir, tmp_path / "new")
    wait_until(lambda: injector.healthy(tmp_path / "new" / "ca.crt"))
    with pytest.raises(ssl.SSLCertVerificationError):
        injector.get("/healthz", old_ca)
    open_connection.request("GET", "/healthz")  # still the old certificate, on the connection it began
    assert open_connection.getresponse().read() == b"ok\n"
    open_connection.close()
    assert "certificate" in injector.log() and "read again" in injector.log()


def test_files_that_do_not_load_keep_the_certificate_served_before(start_injector):
    injector = start_injector()
    (injector.tls_dir / "server.key").write_text("half-written\n")
    # a connection makes it look at the files: it is still served, with the old certificate
    wait_until(lambda: injector.healthy() and "new connections keep the certificate read before" in injector.log())
    retries_until = time.monotonic() + 2.5 * RETRY_SECONDS  # the files are tried again twice meanwhile
    while time.monotonic() < retries_until:
        assert injector.healthy()
    assert injector.log().count("new connections keep the certificate read before") == 1
