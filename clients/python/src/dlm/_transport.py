"""The HTTP transport: the Connect protocol's unary JSON calls over a pool
of persistent connections.

Connections are ``http.client.HTTPConnection`` (``HTTPSConnection``)
objects, which connect (and negotiate TLS); each call is then one write of
the whole request on the connection's socket and a lean read of the
answer (status line, headers, a body framed by Content-Length or chunked).
http.client's own request and response machinery costs about 90 µs of CPU
per call, more than the server takes to answer a lock request; the calls
here are all alike, small POSTs of JSON, which the exchange below covers.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import ssl
import threading
from typing import Any, Union
from urllib.parse import urlsplit

from .errors import DLMError, UnavailableError, code_from_http_status, error_from_reply

__all__ = ["Transport"]

SERVICE_PATH = "/dlm.v1.Locks/"
USER_AGENT = "dlm-python/0.1"

_MAX_HEAD = 64 * 1024  # the longest response head accepted
_MAX_BODY = 64 * 1024 * 1024  # the longest response body accepted

# Errors of a pooled connection the server closed while it was idle: the
# request can be sent again on a new connection.
_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.RemoteDisconnected)


def _nodelay(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:  # not TCP
        pass


class _HTTPConnection(http.client.HTTPConnection):
    """An HTTP connection with Nagle's algorithm off: a request is one
    small write, and its answer should not wait for a delayed ACK."""

    def connect(self) -> None:
        super().connect()
        _nodelay(self.sock)


class _HTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection with Nagle's algorithm off."""

    def connect(self) -> None:
        super().connect()
        _nodelay(self.sock)


Conn = Union[_HTTPConnection, _HTTPSConnection]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Response:
    """An answer: status, reason, headers (lower-case names), body, and
    whether the server closes the connection after it."""

    __slots__ = ("status", "reason", "headers", "body", "will_close")

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes, will_close: bool) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.will_close = will_close


class _Reader:
    """Reads one HTTP/1.1 response from a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.got_any = False

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            if not self.got_any:
                raise http.client.RemoteDisconnected("the server closed the connection without an answer")
            raise http.client.IncompleteRead(bytes(self.buf))
        self.got_any = True
        self.buf += chunk

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 2]
                return line
            if len(self.buf) > _MAX_HEAD:
                raise http.client.LineTooLong("response line")
            self._fill()

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read(self) -> _Response:
        while True:
            end = self.buf.find(b"\r\n\r\n")
            while end < 0:
                if len(self.buf) > _MAX_HEAD:
                    raise http.client.LineTooLong("response head")
                self._fill()
                end = self.buf.find(b"\r\n\r\n")
            head = bytes(self.buf[:end]).decode("latin-1")
            del self.buf[: end + 4]
            lines = head.split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise http.client.BadStatusLine(lines[0])
            version, status = parts[0], int(parts[1])
            reason = parts[2] if len(parts) > 2 else ""
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200:  # an interim answer: the final one follows
                continue
            break
        conn_hdr = headers.get("connection", "").lower()
        will_close = conn_hdr == "close" or (version == "HTTP/1.0" and conn_hdr != "keep-alive")
        if status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif "content-length" in headers:
            n = int(headers["content-length"])
            if n < 0 or n > _MAX_BODY:
                raise http.client.HTTPException(f"bad Content-Length {n}")
            body = self._exactly(n)
        else:  # the body ends with the connection
            will_close = True
            while True:
                try:
                    self._fill()
                except http.client.IncompleteRead:
                    break
                if len(self.buf) > _MAX_BODY:
                    raise http.client.HTTPException("response body too long")
            body, self.buf = bytes(self.buf), bytearray()
        if self.buf:  # bytes beyond the answer: the connection cannot be trusted
            will_close = True
        return _Response(status, reason, headers, body, will_close)

    def _chunked(self) -> bytes:
        out = bytearray()
        while True:
            size_line = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise http.client.HTTPException(f"bad chunk size {size_line!r}") from None
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return bytes(out)
            out += self._exactly(size)
            if len(out) > _MAX_BODY:
                raise http.client.HTTPException("response body too long")
            self._exactly(2)  # the CRLF after the chunk


class Transport:
    """Sends the unary calls of the Locks service and decodes the answers.

    It keeps up to ``max_idle`` idle connections for reuse, and is safe for
    use by many threads at once (each call takes a connection of its own).
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        allow_token_over_http: bool = False,
        max_idle: int = 32,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"dlm: url {url!r}: want http:// or https://host:port")
        if not parts.hostname:
            raise ValueError(f"dlm: url {url!r} names no host")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.base = parts.path.rstrip("/") + SERVICE_PATH
        if token is not None and not self.https and not allow_token_over_http and not _is_loopback(self.host):
            raise ValueError(
                "dlm: a token is only sent over https (or to a loopback address); "
                "pass allow_token_over_http=True if you trust the network"
            )
        if token is not None and any(c in token for c in "\r\n"):
            raise ValueError("dlm: the token has a line break")
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.max_idle = max_idle
        host = f"[{self.host}]" if ":" in self.host else self.host
        default_port = 443 if self.https else 80
        hostport = host if self.port == default_port else f"{host}:{self.port}"
        head = [
            f"Host: {hostport}",
            "Content-Type: application/json",
            "Connect-Protocol-Version: 1",
            f"User-Agent: {USER_AGENT}",
        ]
        if token is not None:
            head.append(f"Authorization: Bearer {token}")
        self._head = "\r\n".join(head)
        self._idle: list[Conn] = []
        self._lock = threading.Lock()
        self._closed = False

    # The pool.

    def _get(self) -> Conn:
        with self._lock:
            if self._closed:
                raise DLMError("dlm: the client is closed")
            if self._idle:
                return self._idle.pop()
        if self.https:
            return _HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.ssl_context)
        return _HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _put(self, conn: Conn) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Closes the idle connections; calls in flight close theirs when
        they end."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    # Calls.

    def _request(self, method: str, data: bytes) -> bytes:
        return (
            f"POST {self.base}{method} HTTP/1.1\r\n{self._head}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data
        )

    def call(self, method: str, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Calls ``method`` with request ``body`` and returns the answer.

        ``timeout`` bounds each blocking step of the call (connecting,
        sending, waiting for the answer); the client's timeout when None.
        Raises the DLMError of an error answer, and UnavailableError when
        the server could not be reached or did not answer in time (the
        outcome of the call is then unknown).
        """
        req = self._request(method, json.dumps(body, separators=(",", ":")).encode())
        t = self.timeout if timeout is None else max(timeout, 0.001)
        for attempt in (0, 1):
            conn = self._get()
            reused = conn.sock is not None
            if conn.sock is None:
                try:
                    conn.timeout = min(t, self.timeout)
                    conn.connect()
                except (OSError, http.client.HTTPException, ValueError) as e:
                    conn.close()
                    err = UnavailableError(f"dlm: {method}: {self._where()}: {e or type(e).__name__}")
                    err.unsent = attempt == 0  # else the stale connection may have carried it
                    raise err from e
                except BaseException:
                    conn.close()
                    raise
            try:
                sock = conn.sock
                sock.settimeout(t)
                sock.sendall(req)
                resp = _Reader(sock).read()
            except _STALE as e:
                conn.close()
                if reused and attempt == 0:
                    continue  # closed by the server while idle: once more, on a new connection
                raise UnavailableError(f"dlm: {method}: {self._where()}: {e or type(e).__name__}") from e
            except socket.timeout as e:
                conn.close()
                raise UnavailableError(f"dlm: {method}: {self._where()}: no answer within {t:.3f}s") from e
            except (OSError, http.client.HTTPException, ValueError) as e:
                conn.close()
                raise UnavailableError(f"dlm: {method}: {self._where()}: {e or type(e).__name__}") from e
            except BaseException:
                conn.close()  # interrupted mid-call: the connection is in an unknown state
                raise
            if resp.will_close:
                conn.close()
            self._put(conn)
            return self._decode(method, resp)
        raise AssertionError("unreachable")

    def _where(self) -> str:
        return f"{'https' if self.https else 'http'}://{self.host}:{self.port}"

    @staticmethod
    def _decode(method: str, resp: _Response) -> dict[str, Any]:
        payload = resp.body
        if resp.status == 200:
            try:
                out = json.loads(payload) if payload else {}
            except ValueError as e:
                raise DLMError(f"dlm: {method}: the answer is not JSON: {payload[:200]!r}", code="internal") from e
            if not isinstance(out, dict):
                raise DLMError(f"dlm: {method}: the answer is not a JSON object", code="internal")
            return out
        reason = resp.headers.get("dlm-reason") or None
        code = message = None
        try:
            err = json.loads(payload)
            if isinstance(err, dict) and isinstance(err.get("code"), str):
                code, message = err["code"], str(err.get("message", ""))
        except ValueError:
            pass
        if code is None:
            code = code_from_http_status(resp.status)
            text = payload[:200].decode("utf-8", "replace").strip()
            message = f"dlm: {method}: HTTP {resp.status} {resp.reason}" + (f": {text}" if text else "")
        raise error_from_reply(code, message or code, reason)
