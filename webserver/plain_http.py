"""A plain HTTP request on a TLS port, told by its first five bytes before any handshake, is answered as Go's
net/http answers it (node_exporter's too), so the client's error says what is wrong instead of a TLS failure."""

from __future__ import annotations

import asyncio
import contextlib
import socket

_HTTP_STARTS = {b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"}
REFUSAL = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
LINGER_SECONDS, LINGER_BYTES = 0.5, 262144  # what a closing connection still reads from the client, at most


async def refused_plain_http(conn: socket.socket, timeout: float) -> bool:
    """True when the client's first bytes are an HTTP request line: it has been answered REFUSAL, and the caller
    closes the connection. False for anything else (a TLS ClientHello), left unread for the handshake."""
    loop = asyncio.get_running_loop()
    readable = loop.create_future()

    def wake() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), wake)
    try:
        async with asyncio.timeout(timeout):
            await readable
    finally:
        loop.remove_reader(conn.fileno())
    if conn.recv(5, socket.MSG_PEEK) not in _HTTP_STARTS:
        return False
    conn.send(REFUSAL)
    await _linger(conn)
    return True


async def _linger(conn: socket.socket) -> None:
    """Ends the sending side and reads what the client still sends before the close, as Go's server does: closing
    over unread bytes would reset the connection and could destroy the reply before the client reads it."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError, TimeoutError):
        conn.shutdown(socket.SHUT_WR)
        async with asyncio.timeout(LINGER_SECONDS):
            total = 0
            while total < LINGER_BYTES and (chunk := await loop.sock_recv(conn, 65536)):
                total += len(chunk)
