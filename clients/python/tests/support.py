"""Helpers of the tests: a dlm server process, free ports, polling."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, TypeVar

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
REPO = HERE.parents[2]
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

import dlm  # noqa: E402

T = TypeVar("T")

ALICE_TOKEN = "alice-token-" + "a" * 24
BOB_TOKEN = "bob-token-" + "b" * 24


def free_port() -> int:
    """A port the kernel says is free now (another process may take it
    before the server binds it: starting the server retries)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Polls ``cond`` until it returns something true, and returns it;
    fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def unique(prefix: str = "t") -> str:
    """A resource name no other test uses."""
    return f"{prefix}/{uuid.uuid4().hex[:12]}"


class DLMServer:
    """A dlm server process on free loopback ports with a temporary data
    directory."""

    def __init__(self, binary: str, workdir: Path, extra: Sequence[str] = ()) -> None:
        self.binary = binary
        self.workdir = workdir
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None
        self.http_port = 0
        self.grpc_port = 0
        self.log = workdir / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> DLMServer:
        last = ""
        for attempt in range(4):
            self.http_port, self.grpc_port, raft = free_port(), free_port(), free_port()
            data = self.workdir / f"data{attempt}"
            args = [
                self.binary, "server",
                "-addr", self.grpc_addr,
                "-http", f"127.0.0.1:{self.http_port}",
                "-raft-addr", f"127.0.0.1:{raft}",
                "-data", str(data),
                "-in-memory",
                "-log-level", "warn",
                *self.extra,
            ]  # fmt: skip
            with open(self.log, "ab") as logf:
                self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break  # a port was taken meanwhile, say: try other ports
                if self._ready():
                    return self
                time.sleep(0.05)
            self.stop()
            last = self.log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the dlm server did not start; its log ends with:\n{last}")

    def _ready(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=2)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc = None


def waiting(client: dlm.Client, name: str) -> list[dlm.LockInfo]:
    """The wait queue of resource ``name``."""
    for r in client.list(prefix=name):
        if r.name == name:
            return r.waiting
    return []


def holders(client: dlm.Client, name: str) -> list[dlm.LockInfo]:
    """The holders of resource ``name``."""
    for r in client.list(prefix=name):
        if r.name == name:
            return r.holders
    return []


class BreakingProxy:
    """A TCP proxy to the server whose connections can be cut, to see the
    client retry a call whose connection broke."""

    def __init__(self, port: int) -> None:
        import threading

        self._threading = threading
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.acquires = 0  # Acquire calls seen
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            with self._lock:
                self._socks += [down, up]
            for a, b, count in ((down, up, True), (up, down, False)):
                self._threading.Thread(target=self._pump, args=(a, b, count), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if count:
                    with self._lock:
                        self.acquires += data.count(b"/dlm.v1.Locks/Acquire ")
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def break_all(self) -> None:
        """Cuts every open connection (both ends)."""
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.break_all()
