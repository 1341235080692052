"""The listening socket: ':port' serves IPv6 and IPv4 alike, and falls back to IPv4 on a host without IPv6."""

from __future__ import annotations

import errno
import socket

BACKLOG = 256  # connections the kernel holds before accept: a burst of new clients is never dropped


def listening_socket(address: tuple[str, int], backlog: int = BACKLOG) -> socket.socket:
    """A bound, listening, non-blocking socket; raises OSError (the port is busy, say)."""
    host, port = address
    try:
        return _bound(host, port, backlog)
    except OSError as e:
        if host or e.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
            raise
        return _bound("0.0.0.0", port, backlog)  # a host without IPv6


def _bound(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host or host == "" else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:  # ":port" serves IPv4 too
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host or "::", port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
