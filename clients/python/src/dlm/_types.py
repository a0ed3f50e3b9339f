"""Lock modes, durations and the listing's types."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Union

from .errors import InvalidError

__all__ = ["Mode", "ModeLike", "LockInfo", "ResourceInfo", "format_duration", "parse_duration", "parse_uint"]


class Mode(str, enum.Enum):
    """The six lock modes of the VMS lock manager, weakest first.

    ========  ==============================================  ==================
    mode      meaning                                         compatible with
    ========  ==============================================  ==================
    ``NL``    null: holds a place, blocks nobody              all
    ``CR``    concurrent read                                 NL CR CW PR PW
    ``CW``    concurrent write                                NL CR CW
    ``PR``    protected read (shared)                         NL CR PR
    ``PW``    protected write (update)                        NL CR
    ``EX``    exclusive                                       NL
    ========  ==============================================  ==================

    Anywhere a mode is taken, the strings ``"ex"``, ``"EX"`` and
    ``"MODE_EX"`` are accepted too.
    """

    NL = "nl"
    CR = "cr"
    CW = "cw"
    PR = "pr"
    PW = "pw"
    EX = "ex"

    @property
    def wire(self) -> str:
        """The name of the mode in the API, such as ``"MODE_EX"``."""
        return "MODE_" + self.name

    @classmethod
    def parse(cls, value: ModeLike) -> Mode:
        """Returns the mode named by ``value``, raising InvalidError for
        anything else."""
        if isinstance(value, Mode):
            return value
        if isinstance(value, str):
            v = value.strip().lower()
            if v.startswith("mode_"):
                v = v[5:]
            for m in cls:
                if m.value == v:
                    return m
        raise InvalidError(f"dlm: unknown lock mode {value!r}: want one of nl, cr, cw, pr, pw, ex")

    @classmethod
    def from_wire(cls, value: Any) -> Mode | None:
        """Returns the mode of an answer's ``"MODE_EX"``, or None for an
        unset one."""
        if not isinstance(value, str) or not value.startswith("MODE_") or value == "MODE_UNSPECIFIED":
            return None
        try:
            return cls[value[5:]]
        except KeyError:
            return None

    def __str__(self) -> str:
        return self.value


ModeLike = Union[Mode, str]


def format_duration(seconds: float, what: str = "duration") -> str:
    """Returns ``seconds`` in the JSON form of google.protobuf.Duration,
    such as ``"1.500s"``. Raises InvalidError for a negative or non-finite
    value."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidError(f"dlm: {what} {seconds!r}: want a number of seconds")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidError(f"dlm: {what} {seconds!r}: want a number of seconds of zero or more")
    ns = int(round(seconds * 1e9))
    s, frac = divmod(ns, 1_000_000_000)
    if frac == 0:
        return f"{s}s"
    if frac % 1_000_000 == 0:
        return f"{s}.{frac // 1_000_000:03d}s"
    if frac % 1_000 == 0:
        return f"{s}.{frac // 1_000:06d}s"
    return f"{s}.{frac:09d}s"


def parse_duration(value: Any, default: float = 0.0) -> float:
    """Returns the seconds of a Duration in JSON form (``"1.500s"``)."""
    if isinstance(value, str) and value.endswith("s"):
        try:
            return float(value[:-1])
        except ValueError:
            return default
    return default


def parse_uint(value: Any) -> int:
    """Returns a uint64 of an answer, written as a JSON string or number."""
    if value is None or value == "":
        return 0
    return int(value)


@dataclass(frozen=True)
class LockInfo:
    """One lock of a listing: granted, converting or waiting.

    ``raw`` holds every field of the server's LockInfo, times included.
    """

    lock_id: int
    session: int
    resource: str
    state: str  # "granted", "converting" or "waiting"
    mode: Mode | None = None  # the mode granted (None while waiting, and for semaphores)
    requested: Mode | None = None  # the mode asked for, while waiting or converting
    permits: int | None = None  # semaphores
    token: int | None = None  # the fencing token of the current grant
    owner: int = 0
    metadata: str = ""
    session_label: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LockInfo:
        state = str(d.get("state", "")).replace("STATE_", "").lower()
        return cls(
            lock_id=parse_uint(d.get("lock_id")),
            session=parse_uint(d.get("session")),
            resource=str(d.get("resource", "")),
            state=state,
            mode=Mode.from_wire(d.get("mode")),
            requested=Mode.from_wire(d.get("requested")),
            permits=None if d.get("permits") is None else int(d["permits"]),
            token=None if d.get("token") is None else parse_uint(d["token"]),
            owner=parse_uint(d.get("owner")),
            metadata=str(d.get("metadata", "")),
            session_label=str(d.get("session_label", "")),
            raw=d,
        )


@dataclass
class ResourceInfo:
    """A resource of a listing with its holders and queues, FIFO order."""

    name: str
    semaphore: bool = False
    capacity: int | None = None  # semaphores: total permits
    used: int | None = None  # semaphores: permits granted
    holders: list[LockInfo] = field(default_factory=list)
    converting: list[LockInfo] = field(default_factory=list)
    waiting: list[LockInfo] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ResourceInfo:
        return cls(
            name=str(d.get("name", "")),
            semaphore=bool(d.get("semaphore", False)),
            capacity=None if d.get("capacity") is None else int(d["capacity"]),
            used=None if d.get("used") is None else int(d["used"]),
            holders=[LockInfo.from_json(x) for x in d.get("holders") or []],
            converting=[LockInfo.from_json(x) for x in d.get("converting") or []],
            waiting=[LockInfo.from_json(x) for x in d.get("waiting") or []],
        )

    def extend(self, more: ResourceInfo) -> None:
        """Appends the rest of a resource cut at a page's end."""
        self.holders.extend(more.holders)
        self.converting.extend(more.converting)
        self.waiting.extend(more.waiting)
