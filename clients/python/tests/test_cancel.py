"""Calls cut short at the grant, against a real server: the Python side of
internal/storetest/cancel.go.

Threads share one client (and one session), each looping on a resource of
its own: it acquires with a timeout drawn at random from 0 to three times
the median acquisition measured first under the same load, so that calls
end before they are sent, on the wire, as they are granted and after;
holding, it converts and releases on such timeouts too. A second client,
the checker, judges every step from outside:

- while a lease claims the lock, its try-lock (wait 0) is refused;
- the release of a held lease is never refused (one cut short by its
  timeout may fail, and is then made again);
- once a release returned, the checker's try-lock is granted at once;
- after an acquisition that raised, the checker is granted the lock within
  a bounded deadline (polled: the server may still be finishing its
  withdrawal of a grant whose caller hung up).

The TTL is long (a minute) and nothing else injects a fault: every count of
a violation must be zero.
"""

from __future__ import annotations

import random
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
from support import DLMServer, holders, unique, waiting

import dlm

TTL = 60.0
WORKERS = 6
FOR = 2.5  # seconds of rounds
ROUNDS = 150  # at most, per worker
FREE_WITHIN = 5.0  # how long the checker polls for a lock a failed call may still be giving back
MAX_LOGS = 8


def median_acquire(s: dlm.Session, workers: int) -> float:
    """The median time an acquisition takes on ``s`` while ``workers``
    threads acquire and release fresh resources, 5 times each."""
    took: list[float] = []
    lock = threading.Lock()

    def work() -> None:
        name = unique("median")
        for _ in range(5):
            start = time.monotonic()
            lease = s.acquire(name)
            d = time.monotonic() - start
            lease.release()
            with lock:
                took.append(d)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(took) == 5 * workers
    return statistics.median(took)


@dataclass
class Run:
    """The counts of a run, and the first few violations."""

    max_cut: float
    end: float
    checker: dlm.Session
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: dict[str, int] = field(default_factory=dict)
    first: list[str] = field(default_factory=list)

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def violation(self, what: str, msg: str) -> None:
        self.count(what)
        with self.lock:
            if len(self.first) < MAX_LOGS:
                self.first.append(msg)

    def cut(self) -> float:
        return random.uniform(0, self.max_cut)

    # The checker's judgements.

    def try_lock(self, name: str, semaphore: bool) -> dlm.Lease:
        if semaphore:
            return self.checker.acquire(name, wait=0, capacity=1)
        return self.checker.acquire(name, wait=0)

    def judge_held(self, name: str, lease: dlm.Lease, when: str) -> None:
        try:
            got = self.try_lock(name, lease.capacity is not None)
        except dlm.NotAcquiredError:
            return
        except dlm.DLMError as e:
            self.violation("errors", f"{name}: the checker's try-lock {when}: {e!r}")
            return
        if lease.lost.is_set():
            self.violation("errors", f"{name}: the lease was lost {when} without a fault")
        else:
            self.violation(
                "double grants",
                f"{name}: the checker was granted token {got.token} {when} while the lease of token "
                f"{lease.token} claimed it",
            )
        got.release()

    def judge_free(self, name: str, semaphore: bool, why: str) -> None:
        """After a call that raised: the lock goes free (polled, bounded)."""
        deadline = time.monotonic() + FREE_WITHIN
        while True:
            try:
                got = self.try_lock(name, semaphore)
            except dlm.NotAcquiredError:
                if time.monotonic() >= deadline:
                    self.violation(
                        "left held",
                        f"{name}: after an acquisition that raised ({why}), the checker was not granted the lock "
                        f"within {FREE_WITHIN}s",
                    )
                    return
                time.sleep(0.005)
                continue
            except dlm.DLMError as e:
                self.violation("errors", f"{name}: the checker's try-lock after a failed acquisition: {e!r}")
                return
            got.release()
            return


class Worker:
    def __init__(self, run: Run, client: dlm.Client, s: dlm.Session, w: int) -> None:
        self.run = run
        self.client = client
        self.s = s
        self.w = w
        self.name = unique(f"cut{w}")

    def loop(self) -> None:
        r = self.run
        try:
            for i in range(ROUNDS):
                if time.monotonic() >= r.end:
                    return
                r.count("rounds")
                self.round(i)
        except BaseException as e:  # a bug of the test or the client: reported, not hidden in a thread
            r.violation("errors", f"worker {self.w}: {e!r}")

    def acquire(self, kind: int, name: str, timeout: float) -> dlm.Lease:
        if kind == 1:
            return self.s.acquire(name, wait=5, capacity=1, timeout=timeout)
        if kind == 2:
            return self.s.acquire(name, wait=5, owner=self.w + 1, timeout=timeout)
        if kind == 3:  # a lease on a session of its own
            return self.client.acquire(name, ttl=TTL, wait=5, timeout=timeout)
        return self.s.acquire(name, wait=5, timeout=timeout)

    def round(self, i: int) -> None:
        r = self.run
        kind = i % 4
        semaphore = kind == 1
        name = self.name + ("/semaphore" if semaphore else "")
        cut = r.cut()
        try:
            lease = self.acquire(kind, name, cut)
        except dlm.NotAcquiredError as e:
            r.count("acquisitions cut")
            r.judge_free(name, semaphore, str(e))
            return
        except dlm.DLMError as e:
            r.violation("errors", f"{name}: an acquisition with timeout {cut:.4f}s: {e!r}")
            r.judge_free(name, semaphore, repr(e))
            return
        r.count("grants")
        r.judge_held(name, lease, "after the grant")
        if kind in (0, 2):
            self.cut_call(name, "convert to PR", lambda t: lease.convert("pr", wait=5, timeout=t))
            r.judge_held(name, lease, "after a conversion to PR")
            self.cut_call(name, "convert to EX", lambda t: lease.convert("ex", wait=5, timeout=t))
            r.judge_held(name, lease, "after a conversion back to EX")
        # The release: in every other round on a timeout first, and then,
        # if that did not finish it, without one.
        released = (i // 4) % 2 == 1 and self.cut_call(name, "release", lambda t: lease.release(timeout=t))
        if not released:
            try:
                lease.release()
            except dlm.DLMError as e:
                r.violation("refused releases", f"{name}: the release of a held lease (token {lease.token}): {e!r}")
                return
        try:
            got = r.try_lock(name, semaphore)
        except dlm.DLMError as e:
            r.violation("not free", f"{name}: a try-lock right after a release returned: {e!r}")
            return
        got.release()

    def cut_call(self, name: str, what: str, fn: Callable[[float], Any]) -> bool:
        """Makes a call on a random timeout; reports whether it succeeded.
        Only its timeout may make it fail, and never end the hold."""
        try:
            fn(self.run.cut())
            return True
        except (dlm.NotAcquiredError, dlm.UnavailableError):
            self.run.count("calls cut")
            return False
        except dlm.DLMError as e:
            self.run.violation("refused releases", f"{name}: {what} cut short ended the hold: {e!r}")
            return False


def report(run: Run) -> None:
    print(f"timeouts within {run.max_cut * 1000:.1f}ms; counts {dict(sorted(run.counts.items()))}", file=sys.stderr)
    assert not run.first, "\n".join(run.first)
    cut = run.counts.get("acquisitions cut", 0) + run.counts.get("calls cut", 0)
    assert run.counts.get("grants", 0) > 0 and cut > 0, run.counts


def test_calls_cut_at_random_leave_nothing_held(server: DLMServer) -> None:
    with dlm.Client(server.url, label="cut") as c, dlm.Client(server.url, label="checker") as cc:
        s, checker = c.session(ttl=TTL), cc.session(ttl=TTL)
        median = median_acquire(s, WORKERS)
        run = Run(max_cut=3 * median, end=time.monotonic() + FOR, checker=checker)
        workers = [Worker(run, c, s, w) for w in range(WORKERS)]
        threads = [threading.Thread(target=w.loop) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        report(run)
        assert s._leases == {}, s._leases


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt: raised by a signal handler at a random
    moment, in the main thread."""


@contextmanager
def interrupt_after(delay: float, armed: list[bool]) -> Iterator[None]:
    """Raises Interrupted in the main thread after ``delay`` seconds while
    ``armed[0]`` is true."""

    def handler(signum: int, frame: Any) -> None:
        if armed[0]:
            armed[0] = False
            raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        armed[0] = True
        signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-6))
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_an_interrupted_acquisition_leaves_nothing_held(server: DLMServer) -> None:
    """An exception raised while an acquisition waits (KeyboardInterrupt,
    here a signal at a random moment around the grant) leaves nothing
    held: the client settles the request before the exception goes on."""
    with dlm.Client(server.url, label="interrupted") as c, dlm.Client(server.url, label="checker") as cc:
        s, checker = c.session(ttl=TTL), cc.session(ttl=TTL)
        median = median_acquire(s, 1)
        run = Run(max_cut=3 * median, end=time.monotonic() + 1.5, checker=checker)
        armed = [False]
        for i in range(200):
            if time.monotonic() >= run.end:
                break
            name = unique("interrupted")
            semaphore = i % 2 == 1
            run.count("rounds")
            lease = None
            try:
                with interrupt_after(run.cut(), armed):
                    if semaphore:
                        lease = s.acquire(name, wait=5, capacity=1)
                    else:
                        lease = s.acquire(name, wait=5)
                    armed[0] = False
            except Interrupted:
                run.count("acquisitions cut")
                if lease is not None:  # granted, and then the signal: held
                    lease.release()
                    continue
                run.judge_free(name, semaphore, "interrupted")
                continue
            run.count("grants")
            run.judge_held(name, lease, "after the grant")
            lease.release()
        report(run)
        assert s._leases == {}, s._leases


def converting(client: dlm.Client, name: str) -> list[dlm.LockInfo]:
    for r in client.list(prefix=name):
        if r.name == name:
            return r.converting
    return []


def test_a_timeout_leaves_nothing_queued(client: dlm.Client) -> None:
    """An acquisition of a busy lock whose timeout passes first raises
    NotAcquiredError, and its request is gone from the queue by then; a
    conversion the same way keeps the lease's mode."""
    name = unique("timeout")
    with client.session(ttl=TTL) as s, client.session(ttl=TTL) as other:
        held = other.acquire(name, mode="pr")
        start = time.monotonic()
        with pytest.raises(dlm.NotAcquiredError, match="nothing is held"):
            s.acquire(name, timeout=0.3)
        assert 0.3 <= time.monotonic() - start < 5
        assert waiting(client, name) == []
        with pytest.raises(dlm.NotAcquiredError, match="timeout"):
            s.acquire(name, wait=5, timeout=0)  # nothing sent
        assert waiting(client, name) == []

        lease = s.acquire(name, mode="pr")
        with pytest.raises(dlm.NotAcquiredError, match="keeps its mode"):
            lease.convert("ex", timeout=0.3)
        assert lease.mode == dlm.Mode.PR and lease.held
        assert converting(client, name) == []
        held.release()
        lease.convert("ex", timeout=5)
        assert [h.lock_id for h in holders(client, name)] == [lease.lock_id]
        lease.release()
        lease.release()  # a second release is not an error
        assert holders(client, name) == []
