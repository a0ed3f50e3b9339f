"""Tests of the Python client against a real dlm server.

They assert order and safety, never speed: every wait for something the
server does is a poll of a condition with a generous deadline.
"""

from __future__ import annotations

import http.client
import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support import (
    ALICE_TOKEN,
    BOB_TOKEN,
    HERE,
    BreakingProxy,
    DLMServer,
    holders,
    unique,
    wait_until,
    waiting,
)

import dlm


def test_quick_start(client: dlm.Client) -> None:
    name = unique("orders")
    with client.lock(name, ttl=10, wait=5) as lease:
        assert isinstance(lease.token, int) and lease.token > 0
        assert lease.name == name and lease.mode is dlm.Mode.EX
        assert lease.held and not lease.lost.is_set()
        lease.check()
        [h] = holders(client, name)
        assert h.lock_id == lease.lock_id and h.token == lease.token and h.mode is dlm.Mode.EX
    assert holders(client, name) == []
    assert not lease.held and not lease.lost.is_set()


def test_mutual_exclusion_across_processes(server: DLMServer, tmp_path: Path) -> None:
    """Four processes increment a file-based counter 25 times each under
    the lock, reading, pausing and writing: the count is exact, and the
    fencing tokens grow strictly in the order of the writes."""
    name = unique("counter")
    counter, log = tmp_path / "counter", tmp_path / "tokens"
    counter.write_text("0")
    log.write_text("")
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "counter_worker.py"), server.url, name, str(counter), str(log), "25"],
        )
        for _ in range(4)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    assert int(counter.read_text()) == 100
    tokens = [int(x) for x in log.read_text().split()]
    assert len(tokens) == 100
    assert all(a < b for a, b in zip(tokens, tokens[1:])), tokens


def test_fifo_across_go_and_python(client: dlm.Client, server: DLMServer, dlm_bin: str, tmp_path: Path) -> None:
    """A Go client (dlm run) queues first and a Python client second: on
    release they run in that order."""
    name = unique("fifo")
    out = tmp_path / "order"
    lease = client.acquire(name, ttl=10)
    go = subprocess.Popen(
        [dlm_bin, "run", "--store", f"dlm://{server.grpc_addr}", "--lock", name, "--", "sh", "-c", f"echo go >> {out}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: len(waiting(client, name)) == 1, 30, "the Go client to queue")
        errors: list[BaseException] = []

        def python_waiter() -> None:
            try:
                with dlm.Client(server.url) as c2, c2.lock(name, ttl=10, wait=60):
                    with out.open("a") as f:
                        f.write("py\n")
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        t = threading.Thread(target=python_waiter)
        t.start()
        wait_until(lambda: len(waiting(client, name)) == 2, 30, "the Python client to queue")
        lease.release()
        t.join(60)
        assert not t.is_alive() and not errors, errors
        assert go.wait(timeout=60) == 0, go.stdout.read() if go.stdout else ""
    finally:
        if go.poll() is None:
            go.kill()
            go.wait()
    assert out.read_text().split() == ["go", "py"]


def test_tokens_only_grow(client: dlm.Client) -> None:
    """Fencing tokens strictly increase across acquisitions, names,
    sessions and modes."""
    tokens: list[int] = []
    a, b = unique("tok"), unique("tok")
    with client.session(ttl=10) as s:
        for name in (a, b, a, a, b):
            lease = s.acquire(name)
            tokens.append(lease.token)
            lease.release()
        with s.lock(a, mode="pr") as l1, s.lock(b, capacity=3) as l2:
            tokens += [l1.token, l2.token]
    with client.session(ttl=10) as s2:
        with s2.lock(a) as l3:
            tokens.append(l3.token)
            l3.convert("pr")
            l3.convert("ex")  # an up-conversion brings a new token
            assert l3.token > tokens[-1]
            tokens.append(l3.token)
    with client.lock(a) as l4:
        tokens.append(l4.token)
    assert all(x < y for x, y in zip(tokens, tokens[1:])), tokens


def test_lost_before_another_is_granted(client: dlm.Client, server: DLMServer) -> None:
    """A session whose keepalives stop sees its lease lost before the
    server grants the lock to the next waiter."""
    name = unique("lost")
    lost_at: list[float] = []
    threads: list[str] = []
    session_lost: list[dlm.LostError] = []

    def on_lost(le: dlm.Lease, err: dlm.LostError) -> None:
        lost_at.append(time.monotonic())
        threads.append(threading.current_thread().name)

    s = client.session(ttl=1.0, on_lost=session_lost.append)
    lease = s.acquire(name, on_lost=on_lost)
    result: dict[str, Any] = {}

    def other() -> None:
        with dlm.Client(server.url) as c2, c2.lock(name, ttl=10, wait=60) as l2:
            result["granted_at"] = time.monotonic()
            result["lost_was_set"] = lease.lost.is_set()
            result["token"] = l2.token

    t = threading.Thread(target=other)
    t.start()
    wait_until(lambda: len(waiting(client, name)) == 1, 30, "the other client to queue")
    assert not lease.lost.is_set()
    s._pause_keepalives()  # as if cut off from the server
    t.join(60)
    assert "granted_at" in result, "the other client was not granted the lock"
    assert lost_at, "on_lost was not called"
    assert lease.lost.is_set() and result["lost_was_set"]
    assert lost_at[0] < result["granted_at"]
    assert result["token"] > lease.token
    assert len(lost_at) == 1 and threads[0].startswith("dlm-keepalive")
    wait_until(lambda: session_lost, 10, "the session's on_lost")
    assert isinstance(session_lost[0], dlm.LostError) and s.lost.is_set()
    with pytest.raises(dlm.LostError):
        lease.check()
    with pytest.raises(dlm.LostError):
        lease.release()
    with pytest.raises(dlm.LostError):
        s.acquire(unique("lost"))
    s.close()


def test_a_waiter_that_hangs_up_leaves_nothing_queued(client: dlm.Client, server: DLMServer) -> None:
    name = unique("hangup")
    with client.lock(name, ttl=10), client.session(ttl=30) as s2:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
        body = {"session": s2._handle, "resource": name, "wait": "30s"}
        conn.request("POST", "/dlm.v1.Locks/Acquire", json.dumps(body), {"Content-Type": "application/json"})
        wait_until(lambda: len(waiting(client, name)) == 1, 10, "the raw request to queue")
        conn.sock.shutdown(2)
        conn.close()
        wait_until(lambda: waiting(client, name) == [], 10, "the waiter to be withdrawn")


def test_auth(auth_server: DLMServer) -> None:
    name = unique("orders")
    with dlm.Client(auth_server.url) as c, pytest.raises(dlm.UnauthenticatedError) as ei:
        c.session()
    assert ei.value.code == "unauthenticated"
    with dlm.Client(auth_server.url, token="not-a-token-of-this-server") as c, pytest.raises(dlm.UnauthenticatedError):
        c.acquire(name)
    with dlm.Client(auth_server.url, token=ALICE_TOKEN) as alice:
        with alice.lock(name, wait=5) as lease:
            assert lease.token > 0
        assert alice.list(prefix=name) == []
    with dlm.Client(auth_server.url, token=BOB_TOKEN) as bob:
        with pytest.raises(dlm.PermissionDeniedError) as ei2:
            bob.acquire(name)
        assert isinstance(ei2.value, dlm.RefusedError) and ei2.value.code == "permission_denied"
        assert "may not lock" in ei2.value.message
        with bob.lock(unique("jobs"), wait=5) as lease:
            assert lease.token > 0


def test_token_needs_https_off_loopback() -> None:
    with pytest.raises(ValueError):
        dlm.Client("http://lock.example.com:7421", token="secret-secret-secret")
    dlm.Client("http://lock.example.com:7421", token="secret-secret-secret", allow_token_over_http=True).close()


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(name=""), "empty"),
        (dict(name="x" * 513), "limit"),  # the server's limit is 512 bytes
        (dict(name="bad\x00name"), "control character"),
        (dict(ttl=0), "ttl"),
        (dict(ttl=-1), "ttl"),
        (dict(mode="exclusive-ish"), "unknown lock mode"),
        (dict(wait=-1), "wait"),
        (dict(capacity=2, mode="pr"), "semaphore"),
    ],
)
def test_bad_input_is_a_clear_error(client: dlm.Client, kwargs: dict[str, Any], words: str) -> None:
    args: dict[str, Any] = dict(name=unique("bad"), ttl=10)
    args.update(kwargs)
    name = args.pop("name")
    with pytest.raises(dlm.InvalidError) as ei:
        client.acquire(name, **args)
    assert words in str(ei.value)


def test_shared_mode(client: dlm.Client) -> None:
    name = unique("shared")
    with client.lock(name, mode="pr") as r1, client.lock(name, mode=dlm.Mode.PR) as r2:
        assert {h.lock_id for h in holders(client, name)} == {r1.lock_id, r2.lock_id}
        with pytest.raises(dlm.NotAcquiredError):
            with client.lock(name, wait=0):
                pass
        got: list[dlm.Lease] = []
        t = threading.Thread(target=lambda: got.append(client.acquire(name, mode="ex", wait=60)))
        t.start()
        wait_until(lambda: len(waiting(client, name)) == 1, 30, "the EX request to queue")
        assert not got
    t.join(60)
    [ex] = got
    assert ex.mode is dlm.Mode.EX and ex.token > max(r1.token, r2.token)
    ex.release()


def test_semaphore(client: dlm.Client) -> None:
    name = unique("sem")
    with client.lock(name, capacity=2) as p1, client.lock(name, capacity=2) as p2:
        assert p1.permits == 1 and p2.permits == 1 and p1.mode is None
        [r] = client.list(prefix=name)
        assert r.semaphore and r.capacity == 2 and r.used == 2
        with pytest.raises(dlm.NotAcquiredError):
            client.acquire(name, capacity=2, wait=0)
    with client.lock(name, capacity=2, permits=2) as both:
        assert both.permits == 2


def test_try_lock_then_skip(client: dlm.Client) -> None:
    """The once-across-instances job: a try-lock that finds the lock held
    skips the run."""
    name = unique("cron")
    runs: list[str] = []

    def job(who: str) -> None:
        try:
            with client.lock(name, ttl=30, wait=0):
                runs.append(who)
                wait_until(lambda: len(runs) == 2, 10, "the other instance to try")
        except dlm.NotAcquiredError:
            runs.append("skipped")

    t = threading.Thread(target=job, args=("first",))
    t.start()
    wait_until(lambda: holders(client, name), 10, "the first instance to hold the lock")
    job("second")
    t.join(30)
    assert runs == ["first", "skipped"]


def test_long_waits_poll_with_one_request(server: DLMServer) -> None:
    """A wait longer than the client's poll is made of several calls with
    one request id: it keeps a single place in the queue."""
    name = unique("poll")
    with dlm.Client(server.url, poll=0.2) as c:
        holder = c.acquire(name)
        got: list[dlm.Lease] = []
        t = threading.Thread(target=lambda: got.append(c.acquire(name, wait=60)))
        t.start()
        first = wait_until(lambda: waiting(c, name), 30, "the waiter to queue")
        # Several polls pass: still one waiter, the same request.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert [w.lock_id for w in waiting(c, name)] == [first[0].lock_id]
            time.sleep(0.1)
        holder.release()
        t.join(30)
        [lease] = got
        assert lease.lock_id == first[0].lock_id
        lease.release()


def test_retry_after_a_broken_connection(client: dlm.Client, server: DLMServer) -> None:
    """A waiter whose connection breaks sends its request again; it ends
    up holding the lock, with never more than one request queued."""
    name = unique("retry")
    proxy = BreakingProxy(server.http_port)
    try:
        with dlm.Client(proxy.url) as pc, pc.session(ttl=10) as s:
            holder = client.acquire(name)
            got: list[Any] = []

            def waiter() -> None:
                try:
                    got.append(s.acquire(name, wait=60))
                except BaseException as e:
                    got.append(e)

            t = threading.Thread(target=waiter)
            t.start()
            wait_until(lambda: waiting(client, name), 30, "the waiter to queue")
            sent = proxy.acquires
            proxy.break_all()
            wait_until(lambda: proxy.acquires > sent, 30, "the waiter to send its request again")
            wait_until(lambda: len(waiting(client, name)) == 1, 30, "the waiter to queue again")
            holder.release()
            t.join(30)
            [lease] = got
            assert isinstance(lease, dlm.Lease), lease
            assert lease.token > holder.token
            assert holders(client, name)[0].lock_id == lease.lock_id
    finally:
        proxy.close()


def test_session_many_locks_and_close(client: dlm.Client) -> None:
    a, b = unique("multi"), unique("multi")
    s = client.session(ttl=5)
    la = s.acquire(a)
    lb = s.acquire(b, mode="pw", metadata="worker 7")
    [hb] = holders(client, b)
    assert hb.session == s.id and hb.metadata == "worker 7" and hb.mode is dlm.Mode.PW
    s.close()
    assert holders(client, a) == [] and holders(client, b) == []
    assert not la.lost.is_set() and not lb.lost.is_set()
    la.release()  # released with the session: not an error
    with pytest.raises(dlm.DLMError):
        s.acquire(a)


def test_convert(client: dlm.Client) -> None:
    name = unique("conv")
    with client.session() as s1, client.session() as s2:
        l1 = s1.acquire(name, mode="pr")
        l2 = s2.acquire(name, mode="pr")
        with pytest.raises(dlm.NotAcquiredError):
            l1.convert("ex", wait=0)
        assert l1.mode is dlm.Mode.PR
        l2.release()
        before = l1.token
        l1.convert("ex", wait=10)
        assert l1.mode is dlm.Mode.EX and l1.token > before
        l1.convert("nl")
        assert l1.mode is dlm.Mode.NL


def test_deadlock_is_refused(client: dlm.Client) -> None:
    a, b = unique("dl"), unique("dl")
    with client.session() as s1, client.session() as s2:
        s1.acquire(a)
        s2.acquire(b)
        errors: list[BaseException] = []

        def first() -> None:
            try:
                s1.acquire(b, wait=30)
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=first)
        t.start()
        wait_until(lambda: waiting(client, b), 10, "the first request to queue")
        with pytest.raises(dlm.DeadlockError) as ei:
            s2.acquire(a, wait=30)
        assert ei.value.code == "aborted" and ei.value.reason == "REASON_DEADLOCK"
    t.join(30)
    assert not t.is_alive()


def test_errors_without_json_take_their_code_from_the_status(server: DLMServer) -> None:
    with dlm.Client(server.url + "/nowhere") as c, pytest.raises(dlm.DLMError) as ei:
        c.list()
    assert "HTTP 405" in ei.value.message and ei.value.code == "unknown"

    class Busy(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b"<html>upstream gone</html>"
            self.send_response(503)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        with dlm.Client(f"http://127.0.0.1:{proxy.server_address[1]}") as c, pytest.raises(dlm.UnavailableError) as eu:
            c.list()
        assert eu.value.code == "unavailable" and "upstream gone" in eu.value.message
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_a_grant_nobody_waits_for_is_released(client: dlm.Client) -> None:
    """A request whose caller left between two polls is granted later; the
    keepalive thread learns of the grant and releases the lock."""
    name = unique("orphan")
    holder = client.acquire(name)
    with client.session(ttl=1.0) as s:
        left = client.call(
            "Acquire", {"session": s._handle, "resource": name, "poll": "0s", "request_id": "caller-left"}
        )
        assert left["outcome"] == "OUTCOME_QUEUED"
        holder.release()
        wait_until(lambda: holders(client, name) == [], 10, "the orphan grant to be released")
        assert not s.lost.is_set()


def test_list_pages_and_long_answers(client: dlm.Client) -> None:
    """A listing of many resources comes in pages (and long answers in
    HTTP chunks): every resource, in name order."""
    prefix = unique("many") + "/"
    with client.session(ttl=10) as s:
        for i in range(120):
            s.acquire(f"{prefix}{i:03d}", metadata="m" * 100)
        whole = client.list(prefix)
        paged = client.list(prefix, page_size=25)
    names = [f"{prefix}{i:03d}" for i in range(120)]
    assert [r.name for r in whole] == names
    assert [r.name for r in paged] == names
    assert all(len(r.holders) == 1 and r.holders[0].metadata == "m" * 100 for r in whole)
    assert client.list(prefix) == []
