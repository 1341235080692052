"""alnair-exporter: parse flags, start one sampler per enabled collector, serve HTTP."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from alnair import logs

from .config import PROG, enabled_collectors, fail, parse_options
from .registry import discover_collectors
from .sampler import CollectorRunner
from .scrape import ScrapeAssembler
from .server import MAX_CONNECTIONS, ExporterServer
from .webconfig import WebConfigError, load_web_config

log = logging.getLogger("alnair.exporter")
# The HTTP loop gives up the GIL at every wait and must take it back from a sampler thread that may be in the
# middle of a long sample: at Python's default 5 ms, a large reply's several writes each waited that long.
GIL_SWITCH_SECONDS = 0.0005
# What collectors get, together, to end their samples at shutdown; their threads are daemons, and the HTTP
# server's own bound comes first (alnair.webserver.server.SHUTDOWN_GRACE): SIGTERM ends the exporter in seconds.
COLLECTORS_STOP_SECONDS = 1.0


def listen(options, web, assembler, runners, known) -> ExporterServer:
    host, port = options.web_listen_address
    args = (
        web,
        assembler,
        runners,
        known,
        options.web_telemetry_path,
        options.web_max_requests,
        MAX_CONNECTIONS,
        options.web_priority_sources,
    )
    try:
        return ExporterServer((host, port), *args)  # ":port" falls back to IPv4 on a host without IPv6
    except OSError as e:
        fail(f"cannot listen on {host or '*'}:{port}: {e.strerror or e}")


def main(argv: list[str] | None = None) -> None:
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    logs.configure(PROG, argv)  # first: loading the collectors may log
    known = discover_collectors()
    options = parse_options(argv, known)
    try:
        web = load_web_config(options.web_config_file)
    except WebConfigError as e:
        fail(str(e))
    chosen = enabled_collectors(options, known)
    runners = [
        CollectorRunner(
            spec,
            options,
            getattr(options, f"collector_{spec.name}_interval"),
            retry_after=options.collector_retry_interval,
        )
        for spec in chosen
    ]
    assembler = ScrapeAssembler(runners, options.node_name)
    server = listen(options, web, assembler, runners, [c.name for c in known])
    for runner in runners:
        runner.start()
    host, port = server.server_address[:2]
    log.info(
        "listening on %s:%d (%s), collectors: %s",
        host,
        port,
        "https" if web.ssl_context else "http",
        ", ".join(r.name for r in runners) or "none",
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    stop.wait()
    log.info("shutting down")
    server.shutdown()
    server.server_close()  # its loop too: left to the garbage collector at exit, it complains on stderr
    deadline = time.monotonic() + COLLECTORS_STOP_SECONDS
    for runner in runners:
        runner.stop(timeout=max(0.0, deadline - time.monotonic()))


if __name__ == "__main__":
    main()
