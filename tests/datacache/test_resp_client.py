"""The cache's own RESP client: MGET values the same as redis-py's, whatever their sizes and however the
reply arrives, on TCP and Unix sockets with a password and a database; scripts by their SHA, sent whole
when the server lacks them; failures raise redis-py's errors."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

from alnair.datacache.resp_client import PEEK_SIZE, ReplyError, RespClient, RespConnection
from alnair.datacache.store import connect
from conftest import sample_bytes


def reader_for(url: str, timeout: float = 5.0) -> RespClient:
    return RespClient(url, timeout, connect(url, timeout))


def test_values_of_every_size_and_missing_keys_match_redis_py(start_redis):
    redis_server = start_redis()
    client = redis_server.client()
    sizes = [0, 1, 100, PEEK_SIZE - 20, PEEK_SIZE, PEEK_SIZE + 1, 100 * 1024, 3 << 20, 7]
    stored = {f"k{i}": data for i, data in enumerate(sample_bytes(1, size)[0] for size in sizes)}
    client.mset(stored)
    names = ["missing", *stored, "also missing", "k1", "k8"]
    reader = reader_for(redis_server.url)
    for _ in range(2):  # the second MGET reuses the connection, so the first left nothing unread
        values = reader.mget(names)
        assert values == client.mget(names)
        assert [len(v) if v is not None else None for v in values] == [None, *sizes, None, 1, 7]
        assert all(type(v) is bytes for v in values if v is not None)


def test_password_database_and_unix_socket(start_redis, tmp_path):
    path = tmp_path / "redis.sock"
    redis_server = start_redis("--requirepass", "secret", "--unixsocket", str(path))
    redis.Redis(port=redis_server.port, password="secret", db=3).set("key", b"in db 3")
    for url in (
        f"redis://:secret@127.0.0.1:{redis_server.port}/3",
        f"redis://default:secret@127.0.0.1:{redis_server.port}/3",
        f"unix://:secret@{path}?db=3",
    ):
        assert reader_for(url).mget(["key", "other"]) == [b"in db 3", None], url
    with pytest.raises(redis.ResponseError, match="WRONGPASS|invalid password"):
        reader_for(f"redis://:wrong@127.0.0.1:{redis_server.port}/3").mget(["key"])


def test_a_reply_arriving_in_awkward_pieces_is_read_whole():
    large = sample_bytes(1, 70_000)[0]
    reply = b"*4\r\n$5\r\nhello\r\n$-1\r\n$70000\r\n" + large + b"\r\n_\r\n"
    cuts = [3, 9, 17, 22, 30, 2_000, len(reply) - 4, len(reply) - 1]  # inside CRLFs, headers and the value
    pieces = [reply[a:b] for a, b in zip([0, *cuts], [*cuts, len(reply)])]
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve():
            connection, _ = listener.accept()
            with connection:
                connection.recv(1 << 16)
                for piece in pieces:
                    connection.sendall(piece)
                    time.sleep(0.02)  # each piece alone in the reader's socket
                connection.recv(1)  # until the reader closes

        server = threading.Thread(target=serve)
        server.start()
        reader = reader_for(f"redis://127.0.0.1:{listener.getsockname()[1]}/0")
        assert reader.mget(["a", "b", "c", "d"]) == [b"hello", None, large, None]
        reader.close()
        server.join(10)


def test_after_a_large_value_the_next_is_peeked_only_as_far_as_its_header(monkeypatch):
    """MSG_PEEK copies what it returns: 64 KB of the next value per value would be two thirds more copying."""
    large, second = sample_bytes(2, 100 * 1024)
    moved = b"-MOVED 16000 127.0.0.1:30001 " + b"x" * 80  # an error line longer than the small peek
    reply = (
        b"$102400\r\n"
        + large
        + b"\r\n"
        + moved
        + b"\r\n$5\r\nhello\r\n$-1\r\n$102400\r\n"
        + second
        + b"\r\n$3\r\nend\r\n"
    )
    peeked = []
    recv = RespConnection._recv

    def counted(self, size, flags=0):
        data = recv(self, size, flags)
        if flags & socket.MSG_PEEK:
            peeked.append(len(data))
        return data

    monkeypatch.setattr(RespConnection, "_recv", counted)
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve():
            connection, _ = listener.accept()
            with connection:
                connection.recv(1 << 16)
                connection.sendall(reply)  # all of it in the reader's socket before it reads
                sent.set()
                connection.recv(1)

        sent = threading.Event()
        server = threading.Thread(target=serve)
        server.start()
        connection = RespConnection({"host": "127.0.0.1", "port": listener.getsockname()[1]}, 5.0)
        connection.send_gets([b"a", b"b", b"c", b"d", b"e", b"f"])
        assert sent.wait(10)
        values = connection.read_gets(6)
        connection.close()
        server.join(10)
    assert values[0] == large and values[2:] == [b"hello", None, second, b"end"]
    assert isinstance(values[1], ReplyError) and values[1].text == moved[1:].decode()
    assert sum(peeked) < 70_000, peeked  # one full peek at most (the first), not one per large value


def test_a_stalled_server_times_out_and_a_restarted_one_is_reconnected(start_redis):
    redis_server = start_redis()
    redis_server.client().set("key", b"value")
    reader = reader_for(redis_server.url, timeout=0.2)
    assert reader.mget(["key"]) == [b"value"]
    redis_server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            reader.mget(["key"])
        assert time.monotonic() - started < 1.0  # the 0.2 s timeout, not a hang (a loaded machine adds some)
    finally:
        redis_server.resume()
    redis_server.kill()
    with pytest.raises(redis.ConnectionError):
        reader.mget(["key"])
    redis_server.start()  # empty: no persistence
    redis_server.client().set("key", b"again")
    assert reader.mget(["key"]) == [b"again"]


def test_a_script_the_server_lacks_is_sent_whole_and_an_error_reply_leaves_the_connection_usable(start_redis):
    redis_server = start_redis()
    client = redis_server.client()
    script = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    reader = reader_for(redis_server.url)
    reader.run_script(script, ["n"], [5])  # EVALSHA refused (NOSCRIPT), then EVAL
    assert client.script_exists(script.sha) == [True] and client.get("n") == b"5"
    reader.run_script(script, ["n"], [2])
    connections = client.info("stats")["total_connections_received"]
    with pytest.raises(redis.ResponseError, match="not an integer"):
        reader.run_script(script, ["n"], ["two"])
    assert reader.mget(["n"]) == [b"7"]
    assert client.info("stats")["total_connections_received"] == connections  # the same connection, in step


def test_pipelined_mgets_answer_in_order_and_give_the_connection_back_only_when_nothing_is_owed(start_redis):
    redis_server = start_redis()
    client = redis_server.client()
    values = dict(zip("abcdef", sample_bytes(6, 100 * 1024)))
    client.mset(values)
    reader = reader_for(redis_server.url)
    asks = [["a", "b"], ["missing", "c", "d"], ["e"], ["f", "a"]]
    pipeline = reader.pipeline()
    for names in asks[:3]:
        pipeline.send(names)
    answers = [pipeline.receive(), pipeline.receive()]
    pipeline.send(asks[3])
    answers += [pipeline.receive(), pipeline.receive()]
    assert answers == [client.mget(names) for names in asks]
    pipeline.close()
    connections = client.info("stats")["total_connections_received"]
    assert reader.mget(["e"]) == [values["e"]]  # on the connection the pipeline gave back
    assert client.info("stats")["total_connections_received"] == connections

    owing = reader.pipeline()
    owing.send(["a"])
    owing.close()  # a reply still owed: the connection is closed, not given back out of step
    assert reader.mget(["b"]) == [values["b"]]
    assert client.info("stats")["total_connections_received"] == connections + 1


def test_a_failed_pipelined_reply_raises_once_and_the_replies_owed_after_it_are_lost(start_redis):
    redis_server = start_redis()
    redis_server.client().set("key", b"value")
    pipeline = reader_for(redis_server.url, timeout=0.2).pipeline()
    pipeline.send(["key"])
    assert pipeline.receive() == [b"value"]
    redis_server.pause()  # nothing sent from here on is answered
    for _ in range(3):
        pipeline.send(["key"])
    redis_server.kill()
    with pytest.raises(redis.ConnectionError):
        pipeline.receive()
    assert [pipeline.receive(), pipeline.receive()] == [None, None]  # lost with the connection, not raised again
    redis_server.start()  # empty: no persistence
    pipeline.send(["key"])  # on a new connection
    assert pipeline.receive() == [None]
    pipeline.close()
