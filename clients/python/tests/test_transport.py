"""The transport's HTTP/1.1 exchange, against canned answers (no server)."""

from __future__ import annotations

import http.client
import socket
import threading

import pytest

import dlm
from dlm._transport import Transport, _Reader


def read(raw: bytes) -> dlm._transport._Response:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(raw)
        a.shutdown(socket.SHUT_WR)
        return _Reader(b).read()


def test_content_length() -> None:
    r = read(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    assert (r.status, r.body, r.will_close) == (200, b"{}", False)
    assert r.headers["content-type"] == "application/json"


def test_chunked_with_trailers_and_interim_answer() -> None:
    raw = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\nDlm-Reason: REASON_UNKNOWN_LOCK\r\n\r\n"
        b'4;ext=1\r\n{"co\r\n6\r\nde":1}\r\n0\r\nX-Trailer: y\r\n\r\n'
    )
    r = read(raw)
    assert (r.status, r.reason, r.body) == (404, "Not Found", b'{"code":1}')
    assert r.headers["dlm-reason"] == "REASON_UNKNOWN_LOCK"


def test_body_to_the_end_and_connection_close() -> None:
    r = read(b"HTTP/1.0 502 Bad Gateway\r\n\r\nupstream down")
    assert (r.status, r.body, r.will_close) == (502, b"upstream down", True)
    r = read(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    assert r.will_close


@pytest.mark.parametrize("raw", [b"", b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}"])
def test_broken_answers(raw: bytes) -> None:
    with pytest.raises((http.client.HTTPException, ValueError)):
        read(raw)


def test_a_connection_closed_while_idle_is_replaced() -> None:
    """The server closes a kept-alive connection: the next call goes out
    again on a new one, unseen by the caller."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    seen: list[bytes] = []

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                head, _, body = data.partition(b"\r\n\r\n")
                n = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
                while len(body) < n:
                    body += conn.recv(4096)
                seen.append(body)
                conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{"ttl":"1s"}')
            # closed after one answer, though the client keeps it

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    tr = Transport(f"http://127.0.0.1:{port}", timeout=5)
    try:
        assert tr.call("KeepAlive", {"session": "1"}) == {"ttl": "1s"}
        assert tr.call("KeepAlive", {"session": "2"}) == {"ttl": "1s"}
    finally:
        tr.close()
        listener.close()
    assert seen == [b'{"session":"1"}', b'{"session":"2"}']


def test_unreachable_is_unavailable() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there
    with pytest.raises(dlm.UnavailableError):
        Transport(f"http://127.0.0.1:{port}", timeout=2).call("List", {})
