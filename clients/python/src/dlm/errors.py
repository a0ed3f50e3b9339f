"""The errors of the dlm client.

Every error the client raises is a :class:`DLMError`. Errors the server
answered carry its Connect error code (``.code``, such as ``"not_found"``),
its message, and for refusals of the lock table the ``Reason`` it named in
the ``Dlm-Reason`` header (``.reason``, such as ``"REASON_DEADLOCK"``).
Errors the client decided on its own (a wait that ran out, a lease it knows
is lost) have ``.code`` set to ``None`` unless a server answer caused them.

The classes mirror the errors of the Go client::

    DLMError
    ├── NotAcquiredError        the lock stayed busy for the whole wait
    ├── UnavailableError        the server could not be reached or could not decide
    ├── LostError               a lease (or a whole session) ended without a release
    ├── InvalidError            an argument was refused; the message says which
    └── RefusedError            the server refused the request
        ├── UnauthenticatedError    no valid credentials
        ├── PermissionDeniedError   the identity may not do this to this name
        ├── DeadlockError           waiting would close a deadlock cycle
        └── LimitError              a limit or a quota is used up
"""

from __future__ import annotations

__all__ = [
    "DLMError",
    "NotAcquiredError",
    "UnavailableError",
    "LostError",
    "InvalidError",
    "RefusedError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "DeadlockError",
    "LimitError",
    "error_from_reply",
    "code_from_http_status",
]


class DLMError(Exception):
    """The base class of every error of the dlm client.

    Attributes:
        code: the Connect error code the server answered (``"not_found"``,
            ``"invalid_argument"``...), or ``None`` for an error the client
            decided on its own.
        reason: the lock table's ``Reason`` enum name from the ``Dlm-Reason``
            header (``"REASON_DEADLOCK"``...), or ``None``.
        message: a human-readable description.
    """

    def __init__(self, message: str, *, code: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        parts = [self.message]
        extra = [x for x in (self.code, self.reason) if x]
        if extra:
            parts.append("(" + ", ".join(extra) + ")")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r}, reason={self.reason!r})"


class NotAcquiredError(DLMError):
    """The lock was held by others for as long as the caller was willing to
    wait (a try-lock with ``wait=0`` that found it busy, or a wait that ran
    out), or the call's ``timeout`` passed before an answer. Nothing is
    left queued or held on the server."""


class UnavailableError(DLMError):
    """The server could not be reached, timed out, is not the leader, or
    could not decide. It is never raised for contention.

    ``unsent`` is true when the request reached no server (no connection
    could be made): it certainly changed nothing."""

    unsent = False


class LostError(DLMError):
    """A lease ended without being released: its session expired (no
    keepalive was acknowledged within the TTL), was closed, or the server
    no longer knows the lock. Work done under the lease after it was lost
    was not protected by it."""


class InvalidError(DLMError):
    """An argument was refused (code ``invalid_argument``): an empty or too
    long name, a bad TTL or wait, an unknown mode. The message says which
    argument and why. Retrying the same request cannot succeed."""


class RefusedError(DLMError):
    """The server refused the request: credentials, permissions, a deadlock,
    a limit, or a request the lock's state does not allow (codes
    ``unauthenticated``, ``permission_denied``, ``aborted``,
    ``resource_exhausted``, ``failed_precondition``)."""


class UnauthenticatedError(RefusedError):
    """No valid credentials: a missing or unknown bearer token."""


class PermissionDeniedError(RefusedError):
    """The authenticated identity may not do this (its rules give no
    permission on the name), or named a session another identity opened."""


class DeadlockError(RefusedError):
    """Waiting would close a cycle of owners waiting for each other: the
    request was refused (a refused conversion keeps the old mode)."""


class LimitError(RefusedError):
    """A configured limit or quota of the server is used up (locks,
    waiters, sessions, holders of one resource)."""


_BY_CODE: dict[str, type[DLMError]] = {
    "invalid_argument": InvalidError,
    "out_of_range": InvalidError,
    "unauthenticated": UnauthenticatedError,
    "permission_denied": PermissionDeniedError,
    "not_found": LostError,
    "aborted": RefusedError,
    "resource_exhausted": LimitError,
    "failed_precondition": RefusedError,
    "unavailable": UnavailableError,
    "deadline_exceeded": UnavailableError,
}


def error_from_reply(code: str, message: str, reason: str | None = None) -> DLMError:
    """Returns the exception for an error answer of the server."""
    cls: type[DLMError] = _BY_CODE.get(code, DLMError)
    if reason == "REASON_DEADLOCK":
        cls = DeadlockError
    elif reason == "REASON_STORAGE":
        # The node cannot write its log (its disk is full or failing): it
        # serves again once it can, and the others of a cluster serve.
        cls = UnavailableError
    return cls(message or code, code=code, reason=reason)


# The Connect protocol's mapping of HTTP statuses to codes, for answers
# whose body is not a Connect error (a proxy's page, say).
_HTTP_CODES: dict[int, str] = {
    400: "internal",
    401: "unauthenticated",
    403: "permission_denied",
    404: "unimplemented",
    408: "deadline_exceeded",
    429: "unavailable",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
}


def code_from_http_status(status: int) -> str:
    """Returns the Connect code of an HTTP status, for error answers
    without a JSON body."""
    return _HTTP_CODES.get(status, "unknown")
