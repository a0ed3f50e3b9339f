"""The HTTP transport: the Connect protocol's unary JSON calls over a pool
of persistent connections."""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import ssl
import threading
from typing import Any, Dict, List, Optional, Union
from urllib.parse import urlsplit

from .errors import DLMError, UnavailableError, code_from_http_status, error_from_reply

__all__ = ["Transport"]

SERVICE_PATH = "/dlm.v1.Locks/"
USER_AGENT = "dlm-python/0.1"

# Errors of a pooled connection the server closed while it was idle: the
# request can be sent again on a new connection.
_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.RemoteDisconnected)


def _nodelay(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:  # not TCP (a test's socket pair, say)
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


class Transport:
    """Sends the unary calls of the Locks service and decodes the answers.

    It keeps up to ``max_idle`` idle connections for reuse, and is safe for
    use by many threads at once (each call takes a connection of its own).
    """

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        *,
        timeout: float = 10.0,
        ssl_context: Optional[ssl.SSLContext] = None,
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
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.max_idle = max_idle
        self._headers = {
            "Content-Type": "application/json",
            "Connect-Protocol-Version": "1",
            "User-Agent": USER_AGENT,
        }
        if token is not None:
            self._headers["Authorization"] = "Bearer " + token
        self._idle: List[Conn] = []
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

    def call(self, method: str, body: Dict[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        """Calls ``method`` with request ``body`` and returns the answer.

        ``timeout`` bounds each blocking step of the call (connecting,
        sending, waiting for the answer); the client's timeout when None.
        Raises the DLMError of an error answer, and UnavailableError when
        the server could not be reached or did not answer in time (the
        outcome of the call is then unknown).
        """
        data = json.dumps(body, separators=(",", ":")).encode()
        t = self.timeout if timeout is None else max(timeout, 0.001)
        for attempt in (0, 1):
            conn = self._get()
            reused = conn.sock is not None
            try:
                if conn.sock is None:
                    conn.timeout = min(t, self.timeout)
                    conn.connect()
                conn.sock.settimeout(t)
                conn.request("POST", self.base + method, body=data, headers=self._headers)
                resp = conn.getresponse()
                payload = resp.read()
            except _STALE as e:
                conn.close()
                if reused and attempt == 0:
                    continue  # closed by the server while idle: once more, on a new connection
                raise UnavailableError(f"dlm: {method}: {self._where()}: {e or type(e).__name__}") from e
            except socket.timeout as e:
                conn.close()
                raise UnavailableError(f"dlm: {method}: {self._where()}: no answer within {t:.3f}s") from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise UnavailableError(f"dlm: {method}: {self._where()}: {e or type(e).__name__}") from e
            except BaseException:
                conn.close()  # interrupted mid-call: the connection is in an unknown state
                raise
            self._put(conn)
            return self._decode(method, resp, payload)
        raise AssertionError("unreachable")

    def _where(self) -> str:
        return f"{'https' if self.https else 'http'}://{self.host}:{self.port}"

    @staticmethod
    def _decode(method: str, resp: http.client.HTTPResponse, payload: bytes) -> Dict[str, Any]:
        if resp.status == 200:
            try:
                out = json.loads(payload) if payload else {}
            except ValueError as e:
                raise DLMError(f"dlm: {method}: the answer is not JSON: {payload[:200]!r}", code="internal") from e
            if not isinstance(out, dict):
                raise DLMError(f"dlm: {method}: the answer is not a JSON object", code="internal")
            return out
        reason = resp.getheader("Dlm-Reason") or None
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
