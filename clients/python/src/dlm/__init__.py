"""dlm: the Python client of the dlm distributed lock server.

It speaks the server's JSON API (the ``dlm.v1.Locks`` service in the
Connect protocol, on the server's HTTP port) with the standard library only::

    import dlm

    client = dlm.Client("http://127.0.0.1:7421")
    with client.lock("orders/42", ttl=10, wait=5) as lease:
        ...  # the lock is held; pass lease.token to what it protects

Locks live on sessions, kept alive by a background thread. A lease knows
when it may no longer be held (``lease.lost``, ``lease.check()``) before the
server could give the lock to anyone else.
"""

from ._types import LockInfo, Mode, ModeLike, ResourceInfo
from .client import Client, Lease, LockContext, LostCallback, Session
from .errors import (
    DeadlockError,
    DLMError,
    InvalidError,
    LimitError,
    LostError,
    NotAcquiredError,
    PermissionDeniedError,
    RefusedError,
    UnauthenticatedError,
    UnavailableError,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Session",
    "Lease",
    "LockContext",
    "LostCallback",
    "Mode",
    "ModeLike",
    "LockInfo",
    "ResourceInfo",
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
]
