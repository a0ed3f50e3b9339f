"""The dlm client: Client, Session and Lease."""

from __future__ import annotations

import builtins
import functools
import logging
import os
import random
import socket
import ssl
import threading
import time
import uuid
import weakref
from types import TracebackType
from typing import Any, Callable, TypeVar

from ._transport import Transport
from ._types import Mode, ModeLike, ResourceInfo, format_duration, parse_duration, parse_uint
from .errors import DLMError, InvalidError, LostError, NotAcquiredError, RefusedError, UnavailableError

__all__ = ["Client", "Session", "Lease", "LostCallback"]

log = logging.getLogger("dlm")

T = TypeVar("T")

#: A callback told that a lease was lost, with the lease and why.
LostCallback = Callable[["Lease", LostError], None]

_GRANTED = "OUTCOME_GRANTED"
_QUEUED = "OUTCOME_QUEUED"
_TIMED_OUT = "OUTCOME_TIMED_OUT"

# A request whose outcome is unknown (the server could not be reached) is
# sent again at least this many times, even when the caller's wait is over,
# so that a grant whose answer was lost is learned rather than left held.
_MIN_ATTEMPTS = 3


def _drift(ttl: float) -> float:
    """The allowance for clock-rate differences between client and server:
    1% of the TTL plus 2 ms, as in the Go client."""
    return ttl / 100 + 0.002


def _lead(ttl: float) -> float:
    """How long before the end of a session's validity the watchdog fires:
    1% of the TTL, at most 50 ms, so that a thread woken late on a busy
    machine still signals the loss before the server could end the
    session."""
    return min(ttl / 100, 0.05)


def _backoff(attempt: int, base: float = 0.05, cap: float = 2.0) -> float:
    """Exponential backoff with full jitter: a pause drawn uniformly from
    [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0, min(cap, base * (2 ** min(attempt, 30))))


def _left(until: float) -> float:
    """The time left until ``until`` on the monotonic clock, for a call's
    timeout (at least a millisecond)."""
    return max(until - time.monotonic(), 0.001)


class _Unanswered(Exception):
    """Ends a request whose call got no answer in time: its timeout passed
    (``timed_out``), or the server stayed unreachable for its whole wait.
    ``cause`` is the error of the last attempt, if any."""

    def __init__(self, cause: UnavailableError | None, timed_out: bool) -> None:
        super().__init__(str(cause) if cause is not None else "the call's timeout passed")
        self.cause = cause
        self.timed_out = timed_out


def _default_label() -> str:
    return f"{socket.gethostname()} pid {os.getpid()} (python)"


class Client:
    """A client of a dlm server's JSON API (``http://host:port`` of the
    server's HTTP port).

    The client keeps a pool of persistent connections and is safe for use
    by many threads. Close it (or use it as a context manager) to close the
    sessions it opened and its connections::

        with dlm.Client("http://127.0.0.1:7421") as client:
            with client.lock("orders/42", ttl=10, wait=5) as lease:
                ...  # pass lease.token to what the lock protects

    Args:
        url: the server's HTTP address, ``http://`` or ``https://``.
        token: a bearer token, when the server requires authentication. It
            is only sent over HTTPS or to a loopback address, unless
            ``allow_token_over_http`` says you trust the network.
        timeout: how long a call may take, in seconds (waits for a lock
            come on top).
        label: the label of the sessions this client opens, shown in
            listings (default: host name and process id).
        ssl_context: the TLS configuration of ``https://`` URLs.
        poll: the longest a single Acquire call waits before it is sent
            again (with the same request id, keeping its place in the
            queue), so that no proxy or idle timeout cuts a long wait.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        label: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        allow_token_over_http: bool = False,
        poll: float = 25.0,
    ) -> None:
        if timeout <= 0:
            raise ValueError("dlm: timeout must be positive")
        if poll <= 0:
            raise ValueError("dlm: poll must be positive")
        self.url = url
        self.timeout = float(timeout)
        self.poll = float(poll)
        self.label = _default_label() if label is None else label
        self._transport = Transport(
            url, token, timeout=timeout, ssl_context=ssl_context, allow_token_over_http=allow_token_over_http
        )
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"dlm.Client({self.url!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the sessions this client opened (releasing their locks)
        and its connections."""
        with self._lock:
            sessions = list(self._sessions)
        for s in sessions:
            try:
                s.close()
            except DLMError as e:
                log.warning("dlm: closing session %s: %s", s.id, e)
        self._transport.close()

    def call(self, method: str, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Calls ``method`` of the Locks service with a request in JSON form
        and returns the answer: the API itself, for what the client does
        not wrap."""
        return self._transport.call(method, body, timeout)

    # Sessions and locks.

    def session(
        self,
        ttl: float = 10.0,
        *,
        label: str | None = None,
        on_lost: Callable[[LostError], None] | None = None,
    ) -> Session:
        """Opens a session with time to live ``ttl`` (seconds, 0.1 to 3600)
        and starts its keepalive thread. Use it as a context manager to
        close it (releasing its locks)::

            with client.session(ttl=10) as s:
                with s.lock("a"), s.lock("b", mode="pr"):
                    ...

        ``on_lost`` is called once, from the keepalive thread, if the session
        is lost (its leases' own callbacks are called before it).
        """
        s = Session(self, ttl, self.label if label is None else label, on_lost)
        s._open()
        with self._lock:
            self._sessions.add(s)
        return s

    def acquire(
        self,
        name: str,
        *,
        ttl: float = 10.0,
        wait: float | None = None,
        mode: ModeLike | None = None,
        permits: int | None = None,
        capacity: int | None = None,
        on_lost: LostCallback | None = None,
        metadata: str | None = None,
        timeout: float | None = None,
    ) -> Lease:
        """Acquires lock ``name`` on a session of its own (TTL ``ttl``)
        and returns the lease; releasing it closes the session. See
        :meth:`Session.acquire` for the arguments, and :meth:`lock` for the
        context-manager form. A failed acquisition closes the session."""
        s = self.session(ttl=ttl)
        try:
            lease = s.acquire(
                name,
                mode=mode,
                wait=wait,
                permits=permits,
                capacity=capacity,
                on_lost=on_lost,
                metadata=metadata,
                timeout=timeout,
            )
        except BaseException:
            try:
                s.close()
            except DLMError as e:
                log.debug("dlm: closing session %s after a failed acquire: %s", s.id, e)
            raise
        lease._owns_session = True
        return lease

    def lock(
        self,
        name: str,
        *,
        ttl: float = 10.0,
        wait: float | None = None,
        mode: ModeLike | None = None,
        permits: int | None = None,
        capacity: int | None = None,
        on_lost: LostCallback | None = None,
        metadata: str | None = None,
        timeout: float | None = None,
    ) -> LockContext:
        """Returns a context manager that acquires lock ``name`` on entry
        (on a session of its own, with time to live ``ttl``), yields the
        :class:`Lease`, and releases it on exit::

            with client.lock("orders/42", ttl=10, wait=5) as lease:
                ...  # lease.token, lease.check()

        Raises NotAcquiredError on entry if the lock stayed busy for
        ``wait`` seconds (``wait=0``: a try-lock; None: wait until granted).
        On exit, raises LostError if the lease was lost meanwhile (and no
        other exception is on its way).
        """
        return LockContext(
            lambda: self.acquire(
                name,
                ttl=ttl,
                wait=wait,
                mode=mode,
                permits=permits,
                capacity=capacity,
                on_lost=on_lost,
                metadata=metadata,
                timeout=timeout,
            )
        )

    def list(self, prefix: str = "", *, page_size: int = 0) -> builtins.list[ResourceInfo]:
        """Returns the resources whose names begin with ``prefix`` that have
        a holder or a waiter, in name order, with their holders and queues
        (every page of the listing)."""
        out: list[ResourceInfo] = []
        after = ""
        cut = False  # the last resource continues on the next page
        while True:
            body: dict[str, Any] = {"prefix": prefix, "after": after}
            if page_size:
                body["limit"] = page_size
            resp = self.call("List", body)
            for i, d in enumerate(resp.get("resources") or []):
                r = ResourceInfo.from_json(d)
                if i == 0 and cut and out and out[-1].name == r.name:
                    out[-1].extend(r)
                else:
                    out.append(r)
                cut = bool(d.get("continues"))
            after = str(resp.get("next") or "")
            if not after:
                return out


class LockContext:
    """The context manager of :meth:`Client.lock` and :meth:`Session.lock`:
    acquires on entry, releases on exit."""

    def __init__(self, acquire: Callable[[], Lease]) -> None:
        self._acquire = acquire
        self._lease: Lease | None = None

    def __enter__(self) -> Lease:
        self._lease = self._acquire()
        return self._lease

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.__exit__(exc_type, exc, tb)


class Session:
    """A session of the dlm server: the locks it takes live as long as it
    does. A daemon thread keeps it alive (every third of its TTL) and
    watches its validity, ``sent + ttl - drift`` of the last acknowledged
    keepalive: when it passes (the thread fires 1% of the TTL early, at
    most 50 ms, to absorb a late wake-up), or the server says the session
    is gone, the session and every lease on it are lost — before the
    server could give their locks to anyone else.

    Open one with :meth:`Client.session`. It is safe for use by many
    threads; all of a session's requests belong to one owner (``owner=0``)
    for deadlock detection unless ``owner`` says otherwise.
    """

    def __init__(
        self, client: Client, ttl: float, label: str, on_lost: Callable[[LostError], None] | None = None
    ) -> None:
        self._client = client
        self._ttl_asked = ttl
        self._label = label
        self._on_lost = on_lost
        self.id = 0
        #: The TTL in force, in seconds (as the server answered).
        self.ttl = float(ttl) if isinstance(ttl, (int, float)) else 0.0
        self._handle = ""
        #: Set once the session is lost (never when it is closed).
        self.lost = threading.Event()
        self._lost_error: LostError | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()  # wakes the keepalive thread early
        self._callbacks: list[Callable[[], None]] = []  # for the keepalive thread to call
        self._closed = False
        self._close_pending = False  # closed, and CloseSession not answered yet
        self._close_unanswered = False  # a CloseSession got no answer: it may have been made
        self._sending = True
        self._valid_until = 0.0
        self._leases: dict[int, Lease] = {}
        self._pending: set[int] = set()  # lock ids of queued requests an acquire waits on
        self._orphans: dict[int, bool] = {}  # granted lock ids nobody claimed yet
        self._cleanup: list[tuple[str, Any]] = []  # work for the keepalive thread
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "closed" if self._closed else "open"
        return f"<dlm.Session {self.id} ttl={self.ttl}s {state}>"

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.close()
        except DLMError:
            if exc_type is None:
                raise
            log.warning("dlm: closing session %s", self.id, exc_info=True)

    @property
    def valid_until(self) -> float:
        """The end of the session's validity on the ``time.monotonic()``
        clock: the send time of the last acknowledged keepalive, plus the
        TTL, minus the drift allowance (1% of the TTL + 2 ms)."""
        with self._lock:
            return self._valid_until

    @property
    def closed(self) -> bool:
        """Whether the session was closed (or lost)."""
        return self._closed or self.lost.is_set()

    # Opening, keeping alive, closing.

    def _open(self) -> None:
        ttl = format_duration(self._ttl_asked, "ttl")
        deadline = time.monotonic() + self._client.timeout
        attempt = 0
        while True:
            sent = time.monotonic()
            try:
                resp = self._client.call("OpenSession", {"ttl": ttl, "label": self._label})
                break
            except UnavailableError:
                # Nothing is lost by trying again: a session opened by an
                # attempt whose answer did not come back holds no lock and
                # expires after its TTL.
                attempt += 1
                pause = _backoff(attempt)
                if time.monotonic() + pause >= deadline:
                    raise
                time.sleep(pause)
        self._handle = str(resp.get("session", ""))
        self.id = parse_uint(resp.get("session_id"))
        self.ttl = parse_duration(resp.get("ttl"), float(self._ttl_asked))
        # The send of OpenSession counts as the first keepalive.
        self._valid_until = sent + self.ttl - _drift(self.ttl)
        self._thread = threading.Thread(target=self._run, args=(sent,), name=f"dlm-keepalive-{self.id}", daemon=True)
        self._thread.start()

    def _run(self, last_sent: float) -> None:
        """The keepalive thread: sends a keepalive every third of the TTL,
        and is the watchdog that ends the session when its validity passes
        without a newer acknowledgement."""
        next_send = last_sent + self.ttl / 3
        failures = 0
        while True:
            self._run_callbacks()
            with self._lock:
                if self._closed or self._lost_error is not None:
                    done = True
                else:
                    done = False
                    valid_until = self._valid_until
                    sending = self._sending
            if done:
                self._run_callbacks()
                return
            now = time.monotonic()
            fire_at = valid_until - _lead(self.ttl)
            if now >= fire_at:
                self._lose(
                    f"dlm: session {self.id}: no keepalive was acknowledged within its TTL "
                    f"({self.ttl:g}s): its locks are lost"
                )
                self._run_callbacks()
                if sending:
                    self._close_quietly()
                return
            wake = min(next_send, fire_at) if sending else fire_at
            if wake > now:
                if self._wake.wait(wake - now):
                    self._wake.clear()
                continue
            sent = time.monotonic()
            try:
                # The call cannot outlast the validity: when no answer came
                # by then, the watchdog must fire in time.
                resp = self._client.call(
                    "KeepAlive", {"session": self._handle}, timeout=min(self._client.timeout, fire_at - sent)
                )
            except LostError as e:
                self._lose(e.message, code=e.code, reason=e.reason)
                continue
            except Exception as e:  # unavailable, or anything unexpected: try again, in time
                failures += 1
                log.debug("dlm: keepalive of session %s failed: %s", self.id, e)
                next_send = time.monotonic() + min(self.ttl / 10, 0.05 * 2 ** min(failures, 10)) * random.uniform(
                    0.5, 1
                )
                continue
            failures = 0
            ttl = parse_duration(resp.get("ttl"), self.ttl) or self.ttl
            with self._lock:
                self._valid_until = max(self._valid_until, sent + ttl - _drift(ttl))
            next_send = sent + ttl / 3
            try:
                self._events(resp.get("events") or [])
                self._do_cleanup()
            except Exception:  # never let the watchdog die
                log.exception("dlm: session %s: handling keepalive events", self.id)

    def _events(self, events: list[dict[str, Any]]) -> None:
        """Handles the events of a keepalive: a grant of a request nobody
        waits for (its caller gave up) is released, after a keepalive
        cycle's grace for an acquire that is about to claim it."""
        release: list[int] = []
        with self._lock:
            # Orphans seen one cycle ago and still unclaimed.
            for lid in list(self._orphans):
                if lid not in self._leases and lid not in self._pending:
                    release.append(lid)
                del self._orphans[lid]
            for ev in events:
                kind = ev.get("kind")
                lid = parse_uint(ev.get("lock_id"))
                lease = self._leases.get(lid)
                if kind == "KIND_GRANTED":
                    if lease is not None:
                        if ev.get("conversion"):  # a conversion whose caller left was granted after all
                            lease._converted(Mode.from_wire(ev.get("mode")), parse_uint(ev.get("token")))
                    elif lid not in self._pending:
                        self._orphans[lid] = True
                elif kind == "KIND_BLOCKING" and lease is not None:
                    lease.blocking.set()
        for lid in release:
            self._release_quietly(lid)

    def _do_cleanup(self) -> None:
        with self._lock:
            work, self._cleanup = self._cleanup, []
        for i, (kind, arg) in enumerate(work):
            try:
                if kind == "release":
                    self._release_quietly(arg, raise_unavailable=True)
                elif kind == "settle":
                    self._withdraw(*arg)
            except UnavailableError:
                with self._lock:  # try again after the next keepalive
                    self._cleanup[:0] = work[i:]
                return

    def _budget(self) -> float:
        """The time a call of the keepalive thread may take: it must be back
        in time to end the session when its validity passes."""
        with self._lock:
            left = self._valid_until - _lead(self.ttl) - time.monotonic()
        return max(0.001, min(self._client.timeout, left))

    def _release_quietly(self, lock_id: int, raise_unavailable: bool = False) -> None:
        try:
            self._client.call("Release", {"session": self._handle, "lock_id": str(lock_id)}, timeout=self._budget())
        except UnavailableError:
            if raise_unavailable:
                raise
            with self._lock:
                self._cleanup.append(("release", lock_id))
        except DLMError as e:
            log.debug("dlm: session %s: releasing lock %s: %s", self.id, lock_id, e)

    def _release_later(self, lock_id: int) -> None:
        """Has the keepalive thread release lock ``lock_id`` (after the next
        keepalive, until the server answers)."""
        with self._lock:
            if not self._closed and self._lost_error is None:
                self._cleanup.append(("release", lock_id))

    def _withdraw(self, method: str, body: dict[str, Any], lock_id: int) -> None:
        """Settles, from the keepalive thread, a request whose call ended
        without an answer and could not be settled then (see _settle);
        raises UnavailableError to be tried again after the next
        keepalive."""
        settled, converted = self._settle(method, body, lock_id, time.monotonic() + self._budget())
        if not settled:
            raise UnavailableError(f"dlm: session {self.id}: request {body.get('request_id')}: no answer")
        if converted is not None:
            self._converted(converted)

    def _converted(self, resp: dict[str, Any]) -> None:
        """Applies a conversion granted to a call that did not hear it to
        the lease of its lock, if the session still has it."""
        with self._lock:
            lease = self._leases.get(parse_uint(resp.get("lock_id")))
            if lease is not None:
                lease._converted(Mode.from_wire(resp.get("mode")), parse_uint(resp.get("token")))

    def _settle(
        self, method: str, body: dict[str, Any], lock_id: int, until: float
    ) -> tuple[bool, dict[str, Any] | None]:
        """Settles a request whose call ended without an answer (a timeout,
        an interruption, a broken connection): learns what became of it
        and undoes it, so that nothing of it stays with the session.

        An Acquire whose lock id is known is released (the release of a
        queued request withdraws it); otherwise it is sent again with the
        same request id and a zero poll, which answers its outcome without
        waiting: granted or queued, its lock is released; refused as an
        unknown lock, the server withdrew it (its caller hung up) or it
        timed out, and nothing is held. A Convert is settled the same way:
        a conversion still queued is cancelled (the lock keeps its mode),
        and one already granted cannot be undone: its answer is returned,
        for the lease to take the new mode.

        Returns whether it is settled (False: the server did not answer
        before ``until``) and the answer of a conversion found granted.
        """
        if self.closed:
            return True, None  # a closed or lost session holds nothing
        call = self._client.call
        probe = dict(body, poll="0s")
        attempt = 0
        while True:
            try:
                if method == "Acquire" and lock_id:
                    try:
                        call("Release", {"session": self._handle, "lock_id": str(lock_id)}, timeout=_left(until))
                    except (LostError, RefusedError, InvalidError):  # gone already
                        pass
                    return True, None
                try:
                    resp = call(method, probe, timeout=_left(until))
                except LostError as e:
                    if e.reason in (None, "REASON_UNKNOWN_SESSION"):
                        self._lose(e.message, code=e.code, reason=e.reason)
                    return True, None  # withdrawn by the server, timed out, or the session is gone
                except (RefusedError, InvalidError):
                    return True, None  # refused: nothing was queued
                outcome = resp.get("outcome")
                lid = parse_uint(resp.get("lock_id"))
                if outcome not in (_GRANTED, _QUEUED) or not lid:
                    return True, None  # timed out: nothing is queued, a conversion keeps the old mode
                if method == "Acquire":
                    lock_id = lid  # released at the top of the loop
                    continue
                if outcome == _GRANTED:
                    return True, (resp if resp.get("mode") == body.get("mode") else None)
                try:  # a conversion still queued: cancelled, then asked again for the mode it left
                    call("Cancel", {"session": self._handle, "lock_id": str(lid)}, timeout=_left(until))
                except (LostError, RefusedError, InvalidError):
                    pass  # granted meanwhile, or gone: the next answer says
            except UnavailableError:
                attempt += 1
                pause = _backoff(attempt)
                if time.monotonic() + pause >= until:
                    return False, None
                time.sleep(pause)

    def _settle_now(self, method: str, body: dict[str, Any], lock_id: int) -> tuple[bool, dict[str, Any] | None]:
        """Settles a request at the end of its call (within the client's
        timeout); what cannot be settled now, the server unreachable or the
        settling itself interrupted, is left to the keepalive thread."""
        try:
            settled, converted = self._settle(method, body, lock_id, time.monotonic() + self._client.timeout)
        except BaseException:
            self._abandon(method, body, lock_id)
            raise
        if not settled:
            self._abandon(method, body, lock_id)
        return settled, converted

    def _close_quietly(self) -> None:
        try:
            self._client.call("CloseSession", {"session": self._handle}, timeout=min(self._client.timeout, 2.0))
        except DLMError:
            pass

    def _lose(self, message: str, *, code: str | None = None, reason: str | None = None) -> None:
        """Ends the session as lost: sets every lease's ``lost`` and calls
        the callbacks, once."""
        with self._lock:
            if self._closed or self._lost_error is not None:
                return
            err = LostError(message, code=code, reason=reason)
            self._lost_error = err
            leases = list(self._leases.values())
            self._leases.clear()
            self._pending.clear()
        self.lost.set()
        for lease in leases:
            lease.lost.set()
        log.warning("%s", err)
        for lease in leases:
            self._later(functools.partial(lease._call_on_lost, err))
        if self._on_lost is not None:
            self._later(functools.partial(self._call_on_lost, err))

    def _call_on_lost(self, err: LostError) -> None:
        assert self._on_lost is not None
        try:
            self._on_lost(err)
        except Exception:
            log.exception("dlm: the on_lost callback of session %s failed", self.id)

    def _later(self, f: Callable[[], None]) -> None:
        """Has the keepalive thread call ``f``: callbacks run there, never
        in the thread of a call that learned of a loss."""
        with self._lock:
            self._callbacks.append(f)
        self._wake.set()

    def _run_callbacks(self) -> None:
        while True:
            with self._lock:
                if not self._callbacks:
                    return
                f = self._callbacks.pop(0)
            f()

    def _pause_keepalives(self) -> None:
        """Stops sending keepalives while the watchdog keeps running, as if
        the client were cut off from the server: for tests."""
        with self._lock:
            self._sending = False

    def check(self) -> None:
        """Raises LostError if the session is lost (or its validity has
        passed), DLMError if it was closed."""
        with self._lock:
            err, closed, valid_until = self._lost_error, self._closed, self._valid_until
        if err is not None:
            raise LostError(err.message, code=err.code, reason=err.reason)
        if closed:
            raise DLMError(f"dlm: session {self.id} is closed")
        if time.monotonic() >= valid_until:
            raise LostError(f"dlm: session {self.id}: its validity has passed without an acknowledged keepalive")

    def close(self) -> None:
        """Closes the session: its locks are released and its queued
        requests withdrawn. Closing twice is not an error. Raises LostError
        if the server had ended the session while it still held leases
        (their locks were lost before the close). When the server cannot
        be reached within the client's timeout, the session is left to end
        at its TTL (its keepalives stop), with a warning."""
        self._close(None, strict=False)

    def _close(self, timeout: float | None, strict: bool) -> None:
        """Closes the session (see close). A close that got no answer
        within ``timeout`` (the client's timeout by default) is tried again
        by the next call; ``strict`` raises UnavailableError for it instead
        of a warning."""
        with self._lock:
            if self._closed and not self._close_pending:
                return
            first = not self._closed
            self._closed = True
            self._close_pending = True
            lost = self._lost_error
            leases = list(self._leases.values())
            self._leases.clear()
        if first:
            self._wake.set()
            for lease in leases:
                lease._released = True
        if lost is None:
            answer = self._send_close(timeout)
            if answer is None:
                msg = f"dlm: session {self.id} could not be closed (no answer): its locks expire with its TTL"
                if strict:
                    raise UnavailableError(msg + "; release again to close it now")
                log.warning("%s", msg)
            elif isinstance(answer, LostError) and leases:  # gone before we closed it: its locks were lost
                lost = answer
                for lease in leases:
                    lease.lost.set()
        else:
            self._close_pending = False
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        if lost is not None and leases:
            raise lost

    def _send_close(self, timeout: float | None) -> bool | LostError | None:
        """Sends CloseSession until it is answered: returns True once the
        session is closed, the LostError of a session the server had ended
        before, None if no answer came in time."""
        until = time.monotonic() + (self._client.timeout if timeout is None else max(float(timeout), 0.0))
        attempt = 0
        while True:
            try:
                self._client.call("CloseSession", {"session": self._handle}, timeout=_left(until))
                self._close_pending = False
                return True
            except UnavailableError:
                self._close_unanswered = True
                attempt += 1
                pause = _backoff(attempt)
                if time.monotonic() + pause >= until:
                    return None
                time.sleep(pause)
            except LostError as e:
                self._close_pending = False
                if self._close_unanswered:  # an earlier attempt closed it
                    return True
                return LostError(e.message, code=e.code, reason=e.reason)
            except BaseException as e:
                if not isinstance(e, DLMError):
                    self._close_unanswered = True  # interrupted mid-call
                raise

    # Locks.

    def _check_open(self) -> None:
        with self._lock:
            err, closed = self._lost_error, self._closed
        if err is not None:
            raise LostError(err.message, code=err.code, reason=err.reason)
        if closed:
            raise DLMError(f"dlm: session {self.id} is closed")

    def acquire(
        self,
        name: str,
        *,
        mode: ModeLike | None = None,
        wait: float | None = None,
        permits: int | None = None,
        capacity: int | None = None,
        metadata: str | None = None,
        on_lost: LostCallback | None = None,
        owner: int = 0,
        timeout: float | None = None,
    ) -> Lease:
        """Acquires lock ``name`` on this session, waiting in its FIFO
        queue, and returns the :class:`Lease`.

        Args:
            name: the resource, 1 to 512 bytes of UTF-8 without control
                characters (the server's limit).
            mode: the lock mode (:class:`Mode` or ``"ex"``, ``"pr"``...);
                exclusive by default. Semaphores have none.
            wait: how long to wait for the lock, in seconds: None waits
                until granted, 0 is a try-lock.
            capacity: makes the resource a semaphore of this many permits
                (the same for every request on it).
            permits: the semaphore permits to take (default 1).
            metadata: a description of the holder shown in listings.
            on_lost: called once, from the keepalive thread, if the lease is
                lost.
            owner: the owner within the session, for deadlock detection
                between a session's own requests (threads, say).
            timeout: the longest the call may take, in seconds, answer or
                not (None: no bound but the wait's). When it passes, the
                call is cut and settled (see below).

        The acquisition returns a lease whose lock is held until it is
        released or reported lost, or raises and leaves nothing held, never
        both. A call that ends without an answer (its ``timeout`` passed,
        the server unreachable for the whole wait, an exception such as
        KeyboardInterrupt raised while it waits) is settled before it
        raises: the request is sent again with the same request id and a
        zero poll, to learn whether it was granted, and a grant (or a
        queued request) is released; a request the server withdrew when the
        call hung up needs nothing more. Settling takes up to the client's
        timeout; if the server does not answer by then, UnavailableError
        says the outcome is unknown, and the keepalive thread settles it
        once the server answers.

        Raises:
            NotAcquiredError: the lock stayed busy for the whole wait.
            InvalidError: a bad argument (the message says which).
            RefusedError: a deadlock (DeadlockError), a limit, permissions.
            LostError: the session is lost.
            NotAcquiredError: also when ``timeout`` passed (settled:
                nothing is held).
            UnavailableError: the server could not be reached; the request
                was sent again (with the same request id) until the wait
                was over, and could not be settled.
        """
        if not isinstance(name, str):
            raise InvalidError(f"dlm: the lock name must be a str, not {type(name).__name__}")
        body: dict[str, Any] = {"resource": name}
        m: Mode | None = None
        if capacity is not None:
            if mode is not None:
                raise InvalidError(f"dlm: {name!r}: a semaphore (capacity set) has permits, not modes")
            body["capacity"] = int(capacity)
            body["permits"] = 1 if permits is None else int(permits)
        else:
            if permits is not None:
                raise InvalidError(f"dlm: {name!r}: permits need a capacity (a semaphore)")
            m = Mode.EX if mode is None else Mode.parse(mode)
            body["mode"] = m.wire
        if wait is not None:
            body["wait"] = format_duration(wait, "wait")
        if metadata:
            body["metadata"] = metadata
        if owner:
            body["owner"] = str(int(owner))

        def granted(resp: dict[str, Any]) -> Lease:
            lease = Lease(
                self,
                name,
                lock_id=parse_uint(resp.get("lock_id")),
                token=parse_uint(resp.get("token")),
                mode=Mode.from_wire(resp.get("mode")) if capacity is None else None,
                permits=int(resp.get("permits") or 0) or None,
                capacity=capacity,
                metadata=metadata or "",
                on_lost=on_lost,
            )
            self._leases[lease.lock_id] = lease
            return lease

        if timeout is not None:
            format_duration(timeout, "timeout")  # checks it
        return self._request("Acquire", body, wait, granted, name, timeout=timeout)

    def lock(
        self,
        name: str,
        *,
        mode: ModeLike | None = None,
        wait: float | None = None,
        permits: int | None = None,
        capacity: int | None = None,
        metadata: str | None = None,
        on_lost: LostCallback | None = None,
        owner: int = 0,
        timeout: float | None = None,
    ) -> LockContext:
        """The context-manager form of :meth:`acquire`: acquires on entry,
        yields the Lease, releases on exit."""
        return LockContext(
            lambda: self.acquire(
                name,
                mode=mode,
                wait=wait,
                permits=permits,
                capacity=capacity,
                metadata=metadata,
                on_lost=on_lost,
                owner=owner,
                timeout=timeout,
            )
        )

    def _request(
        self,
        method: str,
        body: dict[str, Any],
        wait: float | None,
        granted: Callable[[dict[str, Any]], T],
        name: str,
        want_mode: Mode | None = None,
        timeout: float | None = None,
    ) -> T:
        """Sends an Acquire or Convert and waits for its outcome.

        Every request carries a request id: a call that ends without an
        answer (connection lost, unavailable) is sent again with the same id
        and the same content, after a backoff (exponential, full jitter),
        so that the server never makes a second waiter and answers what the
        first attempt did. Long waits are cut in calls of at most the
        client's poll, each answering QUEUED, sent again with the same id.
        ``granted`` turns a grant into the result, under the session's lock.

        A request that ends without an answer, its ``timeout`` passed (the
        call is cut: the server sees its caller hang up), the server
        unreachable for the whole wait, or an exception raised while it
        waits (KeyboardInterrupt), is settled before the call raises (see
        _settle): nothing of it stays held or queued.
        """
        client = self._client
        start = time.monotonic()
        deadline = None if wait is None else start + wait
        cutoff = None if timeout is None else start + timeout
        body = dict(body, session=self._handle, request_id=uuid.uuid4().hex)
        in_doubt = False  # the server may hold a request of ours we have no answer for
        lock_id = 0  # the lock of the request, once an answer named it
        failures = 0
        done = False  # granted, and the result made
        result: T | None = None

        def renew_request() -> None:
            """Starts over with a new request id, for the wait that is left:
            the request of the old id is gone."""
            nonlocal in_doubt, lock_id
            self._unpend(lock_id)
            in_doubt, lock_id = False, 0
            body["request_id"] = uuid.uuid4().hex
            if deadline is not None:
                body["wait"] = format_duration(max(deadline - time.monotonic(), 0.0))

        try:
            while True:
                self._check_open()
                now = time.monotonic()
                if cutoff is not None and now >= cutoff:
                    raise _Unanswered(None, timed_out=True)
                remaining = None if deadline is None else deadline - now
                if remaining is None or remaining > client.poll:
                    call = dict(body, poll=format_duration(client.poll))
                    limit = client.poll
                else:
                    call, limit = body, max(remaining, 0.0)
                t = limit + client.timeout
                if cutoff is not None:
                    t = min(t, cutoff - now)
                was_in_doubt, in_doubt = in_doubt, True
                try:
                    resp = client.call(method, call, timeout=t)
                except UnavailableError as e:
                    if e.unsent:  # no connection: this attempt reached nobody
                        in_doubt = was_in_doubt
                    failures += 1
                    now = time.monotonic()
                    if cutoff is not None and now >= cutoff:
                        raise _Unanswered(e, timed_out=True) from e
                    if deadline is not None and now >= deadline and failures >= _MIN_ATTEMPTS:
                        raise _Unanswered(e, timed_out=False) from e
                    pause = _backoff(failures)
                    if deadline is not None:
                        pause = min(pause, max(deadline - now, 0.02))
                    if cutoff is not None:
                        pause = min(pause, cutoff - now)
                    self.lost.wait(pause)
                    continue
                except LostError as e:
                    in_doubt = False
                    if e.reason == "REASON_UNKNOWN_LOCK" and method == "Acquire":
                        # Sent again (by us, or by the transport after a
                        # broken connection), the request is no longer known:
                        # it was withdrawn when the connection of an earlier
                        # attempt broke, or timed out between two calls.
                        if deadline is not None and time.monotonic() >= deadline:
                            raise NotAcquiredError(f"dlm: {name!r} was not acquired within {wait:g}s") from e
                        renew_request()
                        continue
                    if e.reason in (None, "REASON_UNKNOWN_SESSION"):
                        self._lose(e.message, code=e.code, reason=e.reason)
                    raise
                except DLMError:
                    in_doubt = False  # refused: nothing was queued
                    raise
                failures = 0
                outcome = resp.get("outcome")
                if outcome == _GRANTED:
                    if want_mode is not None and Mode.from_wire(resp.get("mode")) != want_mode:
                        # A conversion sent again after it was withdrawn
                        # answers the lock as it is, in its old mode.
                        if deadline is not None and time.monotonic() >= deadline:
                            in_doubt = False
                            raise NotAcquiredError(f"dlm: {name!r} was not converted within {wait:g}s")
                        renew_request()
                        continue
                    with self._lock:
                        if self._lost_error is None and not self._closed:
                            self._pending.discard(lock_id)
                            self._orphans.pop(parse_uint(resp.get("lock_id")), None)
                            result = granted(resp)
                            done, in_doubt, lock_id = True, False, 0
                    if done:
                        break
                    self._check_open()
                    raise DLMError("unreachable")
                if outcome == _QUEUED:
                    lid = parse_uint(resp.get("lock_id"))
                    if lid and lid != lock_id and method == "Acquire":
                        self._unpend(lock_id)
                        lock_id = lid
                        with self._lock:
                            self._pending.add(lid)
                    continue
                in_doubt = False
                if outcome == _TIMED_OUT:
                    what = "acquired" if method == "Acquire" else "converted"
                    if wait == 0:
                        raise NotAcquiredError(f"dlm: {name!r} is held (a try-lock: not {what})")
                    raise NotAcquiredError(f"dlm: {name!r} was not {what} within {wait:g}s")
                raise DLMError(f"dlm: {method}: unexpected outcome {outcome!r}", code="internal")
        except BaseException as e:
            self._unpend(lock_id)
            if done:
                # Interrupted between the grant and the return: a new lock
                # is given back; a conversion stays, and the lease has it.
                if isinstance(result, Lease):
                    result._give_back()
                raise
            settled, converted = True, None
            if in_doubt:
                settled, converted = self._settle_now(method, body, lock_id)
            if converted is not None:
                with self._lock:
                    result = granted(converted)
                if isinstance(e, _Unanswered):
                    return result  # the conversion was granted: it cannot be undone
            if not isinstance(e, _Unanswered):
                raise
            what = "acquisition" if method == "Acquire" else "conversion"
            why = f"the call's timeout of {timeout:g}s passed" if e.cause is None else str(e.cause)
            if not settled:
                raise UnavailableError(
                    f"dlm: {name!r}: no answer ({why}); the outcome of the {what} is unknown: "
                    "the session takes it back once the server answers"
                ) from e.cause
            left = "nothing is held" if method == "Acquire" else "the lease keeps its mode"
            if not e.timed_out:  # the server unreachable for the whole wait
                raise UnavailableError(f"dlm: {name!r}: no answer within the wait ({why}); {left}") from e.cause
            verb = "acquired" if method == "Acquire" else "converted"
            raise NotAcquiredError(f"dlm: {name!r} was not {verb}: {why}; {left}") from e.cause
        # No call between the grant and the return: an exception raised
        # asynchronously (KeyboardInterrupt) is only raised at a call or a
        # loop, and here it would escape with the lock held.
        return result  # type: ignore[return-value]

    def _unpend(self, lock_id: int) -> None:
        if lock_id:
            with self._lock:
                self._pending.discard(lock_id)

    def _abandon(self, method: str, body: dict[str, Any], lock_id: int) -> None:
        """Leaves a request whose outcome is unknown to the keepalive
        thread, which settles it after each keepalive until the server
        answers."""
        with self._lock:
            if self._closed or self._lost_error is not None:
                return  # nothing of a closed or lost session is held
            self._cleanup.append(("settle", (method, dict(body), lock_id)))


class Lease:
    """A lock held on a session: the answer of an acquire.

    Attributes:
        name: the resource.
        lock_id: the lock's id on the server.
        token: the fencing token of the grant (of the last up-conversion):
            strictly increasing across the server. Pass it to the resource
            you protect, and have it refuse a token lower than one it saw.
        mode: the mode held (None for a semaphore).
        permits: the semaphore permits held (None for a lock).
        capacity: the semaphore's capacity (None for a lock).
        lost: set once the lease is lost (never on a clean release).
        blocking: set when the server reported another request waiting
            behind this lock (a hint to finish soon).
        session: the session the lock lives on.

    A lease is a context manager that releases it on exit.
    """

    def __init__(
        self,
        session: Session,
        name: str,
        *,
        lock_id: int,
        token: int,
        mode: Mode | None,
        permits: int | None = None,
        capacity: int | None = None,
        metadata: str = "",
        on_lost: LostCallback | None = None,
    ) -> None:
        self.session = session
        self.name = name
        self.lock_id = lock_id
        self.token = token
        self.mode = mode
        self.permits = permits
        self.capacity = capacity
        self.metadata = metadata
        self.lost = threading.Event()
        self.blocking = threading.Event()
        self._on_lost = on_lost
        self._released = False
        self._release_unanswered = False  # a Release got no answer: it may have been made
        self._owns_session = False

    def __repr__(self) -> str:
        what = f"mode={self.mode}" if self.mode is not None else f"permits={self.permits}"
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        return f"<dlm.Lease {self.name!r} {what} token={self.token} {state}>"

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.release()
        except DLMError:
            if exc_type is None:
                raise
            log.warning("dlm: releasing %r while an exception was raised", self.name, exc_info=True)

    @property
    def valid_until(self) -> float:
        """The end of the lease's validity on the ``time.monotonic()``
        clock, as the client sees it (its session's)."""
        return self.session.valid_until

    @property
    def held(self) -> bool:
        """Whether the lease is held: neither released nor lost, and within
        its validity."""
        return not self._released and not self.lost.is_set() and time.monotonic() < self.valid_until

    def check(self) -> None:
        """Raises LostError if the lease is lost, or its validity has passed
        (even before the watchdog noticed). Call it before an action the
        lock protects."""
        if self.lost.is_set() or time.monotonic() >= self.valid_until:
            raise self._lost_error()
        if self._released:
            raise DLMError(f"dlm: the lease of {self.name!r} was released")

    def _lost_error(self) -> LostError:
        err = self.session._lost_error
        msg = f"dlm: the lease of {self.name!r} (token {self.token}) was lost"
        if err is not None:
            return LostError(f"{msg}: {err.message}", code=err.code, reason=err.reason)
        return LostError(f"{msg}: its session's validity passed without an acknowledged keepalive")

    def _call_on_lost(self, err: LostError) -> None:
        if self._on_lost is None:
            return
        try:
            self._on_lost(self, err)
        except Exception:
            log.exception("dlm: the on_lost callback of %r failed", self.name)

    def _converted(self, mode: Mode | None, token: int) -> None:
        if mode is not None:
            if token and mode != Mode.NL:
                self.token = max(self.token, token)
            self.mode = mode

    def release(self, *, timeout: float | None = None) -> None:
        """Releases the lock (closing the lease's own session, for leases of
        :meth:`Client.lock`). Releasing twice is not an error.

        Raises LostError if the lease was lost before the release: what was
        done under it was not protected throughout.

        A release is done once the server answered it (it answers once the
        release is applied). When no answer comes within ``timeout``
        seconds (the client's timeout by default; the call is retried with
        a backoff meanwhile), or the call is interrupted, it raises (for a
        timeout, UnavailableError) and the lease is not released: call
        ``release()`` again, which finishes it (the lock is also released
        again from the keepalive thread, and ends with its session at the
        latest)."""
        s = self.session
        with s._lock:
            if self._released:
                return
        lost = self.lost.is_set() or time.monotonic() >= s.valid_until
        if self._owns_session:
            try:
                s._close(timeout, strict=True)
            except LostError:
                lost = True
            except BaseException:
                with s._lock:
                    self._released = False  # not closed yet: release() again
                raise
            self._released = True
        else:
            lost = self._release_on_session(timeout) or lost
        if lost:
            self.lost.set()
            raise self._lost_error()

    def _release_on_session(self, timeout: float | None) -> bool:
        """Sends the Release until it is answered; returns whether the
        server no longer had the lock (lost). Raises UnavailableError when
        no answer came within ``timeout``."""
        s = self.session
        client = s._client

        def done() -> None:
            with s._lock:
                self._released = True
                s._leases.pop(self.lock_id, None)

        if s.lost.is_set() or s._closed:
            done()  # closing the session released it
            return s.lost.is_set()
        until = time.monotonic() + (client.timeout if timeout is None else max(float(timeout), 0.0))
        attempt = 0
        while True:
            try:
                client.call("Release", {"session": s._handle, "lock_id": str(self.lock_id)}, timeout=_left(until))
                done()
                return False
            except UnavailableError as e:
                self._release_unanswered = True
                attempt += 1
                pause = _backoff(attempt)
                if time.monotonic() + pause >= until:
                    s._release_later(self.lock_id)
                    raise UnavailableError(
                        f"dlm: releasing {self.name!r}: no answer ({e.message}); it is released again "
                        "in the background, and release() may be called again",
                        code=e.code,
                        reason=e.reason,
                    ) from e
                time.sleep(pause)
            except LostError as e:
                done()
                if self._release_unanswered:  # an earlier attempt released it
                    return False
                if e.reason in (None, "REASON_UNKNOWN_SESSION"):
                    s._lose(e.message, code=e.code, reason=e.reason)
                return True
            except BaseException as e:
                if not isinstance(e, DLMError):
                    # Interrupted mid-call: the release may or may not
                    # have been made.
                    self._release_unanswered = True
                    s._release_later(self.lock_id)
                raise

    def _give_back(self) -> None:
        """Releases the lock of a lease its acquire could not return (it
        was interrupted after the grant)."""
        s = self.session
        with s._lock:
            self._released = True
            s._leases.pop(self.lock_id, None)
        try:
            s._client.call("Release", {"session": s._handle, "lock_id": str(self.lock_id)})
        except DLMError as e:
            if isinstance(e, UnavailableError):
                s._release_later(self.lock_id)
        except BaseException:
            s._release_later(self.lock_id)
            raise

    def convert(
        self, mode: ModeLike, *, wait: float | None = None, queue_convert: bool = False, timeout: float | None = None
    ) -> None:
        """Changes the lease's mode, waiting like an acquire (``wait``
        seconds; None: until granted; 0: at once or not at all).

        Raises NotAcquiredError if the conversion was not granted within
        the wait, or ``timeout`` (the longest the call may take) passed
        first (the lease keeps its old mode), DeadlockError if waiting
        would close a deadlock cycle, LostError if the lease is lost. An
        up-conversion brings a new fencing token. A conversion whose call
        ends without an answer is settled as an acquisition is (see
        :meth:`Session.acquire`): one still queued is cancelled; one that
        was granted as the call ended cannot be undone, and the call
        returns (or, interrupted, raises with ``mode`` already the new
        one).
        """
        if self.capacity is not None:
            raise InvalidError(f"dlm: {self.name!r} is a semaphore: it has no modes to convert")
        m = Mode.parse(mode)
        self.check()
        body: dict[str, Any] = {"lock_id": str(self.lock_id), "mode": m.wire}
        if wait is not None:
            body["wait"] = format_duration(wait, "wait")
        if queue_convert:
            body["queue_convert"] = True

        def granted(resp: dict[str, Any]) -> None:
            self._converted(Mode.from_wire(resp.get("mode")) or m, parse_uint(resp.get("token")))

        try:
            self.session._request("Convert", body, wait, granted, self.name, want_mode=m, timeout=timeout)
        except LostError as e:
            if e.reason == "REASON_UNKNOWN_LOCK":
                self.lost.set()
                with self.session._lock:
                    self.session._leases.pop(self.lock_id, None)
                self.session._later(functools.partial(self._call_on_lost, e))
            raise

    def remaining(self) -> float:
        """The seconds left until the lease's validity passes (0 if it
        has)."""
        return max(0.0, self.valid_until - time.monotonic())
