"""alnair-injector's start: flags, the certificate, the listening socket, then serving until SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading

from alnair import logs
from alnair.commandline import version

from .config import PROG, fail, parse_options
from .patch import Settings
from .server import InjectorServer, LiveTLS, TLSError

log = logging.getLogger("alnair.injector")


def main(argv: list[str] | None = None) -> None:
    logs.configure(PROG, argv)
    options = parse_options(argv)
    try:
        tls = LiveTLS(options.tls_cert_file, options.tls_key_file)
    except TLSError as e:
        fail(str(e))
    settings = Settings(options.library_host_path, options.shm_host_path, options.python_intercept_default, version())
    host, port = options.web_listen_address
    try:
        server = InjectorServer((host, port), tls, settings)  # ":port" falls back to IPv4 without IPv6
    except OSError as e:
        fail(f"cannot listen on {host or '*'}:{port}: {e.strerror or e}")
    log.info(
        "listening on %s:%d (https); library %s, segments %s, Python intercept %s by default",
        *server.server_address[:2],
        settings.library_host_path,
        settings.shm_host_path,
        "on" if settings.python_intercept_default else "off",
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    stop.wait()
    log.info("shutting down")
    server.shutdown()
    server.server_close()
