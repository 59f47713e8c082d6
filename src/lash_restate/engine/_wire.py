"""Messages between the controller and the tier's handlers, the group's state records, and service names."""

from __future__ import annotations

import struct
from typing import Any, TypeVar

import msgspec
from restate.serde import Serde

from ..contract import GroupShape, LoserPolicy, Outcome, RuntimeEffectEnvelope

__all__ = [
    "BATCH_FROM",
    "BATCH_INLINE_BYTES",
    "CHILD",
    "GROUP",
    "INLINE_OUTCOME_BYTES",
    "META",
    "PUMP",
    "SHAPE",
    "SIGNAL",
    "STRINGS",
    "WAKE_WINDOW",
    "ChildRun",
    "CloseRequest",
    "Meta",
    "Miss",
    "MsgspecSerde",
    "OpenReply",
    "OpenRequest",
    "PumpRun",
    "Ref",
    "SettleBatch",
    "SettleRequest",
    "WaitReply",
    "WaitRequest",
    "Waiter",
    "decode",
    "decode_outcome",
    "child_store",
    "encode",
    "group_of_pump",
    "handler_for",
    "pump_key",
]

GROUP = "LashGroup"  # virtual object keyed by group key: the rank authority
CHILD = "LashChild"  # virtual object keyed by replay key: child-as-invocation and its outcome store
PUMP = "LashPump"  # virtual object keyed by incarnation and group key: a batched group's children and store
SIGNAL = "LashSignal"  # virtual object keyed by event name: the durable-wait service for AwaitEvent

# How many upcoming ranks a caller registers wakes for at once: a caller that keeps up with the
# settlements then pays no call per rank, and the hot record stays small.
WAKE_WINDOW = 32

# An outcome up to this size rides the settle message and the wake, so a waiting caller needs no
# second round trip; it is never written to group state (ADR: payloads never transit object state).
INLINE_OUTCOME_BYTES = 16 * 1024

# Up to this many children the group's whole state is small, so its hot handlers load it eagerly
# with the invocation (one message); wider groups read lazily, touching only the small `meta` record.
SMALL_GROUP = 64

# From this many children a group settles in batches (docs/decisions.md, decision 20): one pump
# invocation calls every child and forwards whatever settled meanwhile in one `settle_batch`, so the
# single writer runs once per batch instead of once per child, and the outcomes live in the pump's
# state (released by one `forget`). Below it a child settles itself: two hops less, which is what a
# two-arm race or a signal/deadline select is measured by (docs/performance.md).
BATCH_FROM = 3

# A batch carries outcomes inline up to this many bytes in all; the rest are read from the store.
BATCH_INLINE_BYTES = 1024 * 1024

_T = TypeVar("_T")

_STRUCT = {"frozen": True, "kw_only": True, "forbid_unknown_fields": True}


class Miss(msgspec.Struct, **_STRUCT):
    """The first child the caller's resolver could not route (refuses a first open, ignored by a reopen)."""

    position: int
    replay_key: str
    what: str


class OpenRequest(msgspec.Struct, **_STRUCT):
    shape: GroupShape
    children: list[bytes]  # canonical envelopes, stamped with membership
    miss: Miss | None = None
    caller: str | None = None  # the opener's invocation id, watched under a declared Cancel
    wakes: list[str] = msgspec.field(default_factory=list)  # first open: awakeables for ranks 1, 2, …


class OpenReply(msgspec.Struct, **_STRUCT):
    reopened: bool


class ChildRun(msgspec.Struct, **_STRUCT):
    """What `LashChild/run` receives: the stamped envelope and the group incarnation it settles into."""

    envelope: RuntimeEffectEnvelope
    incarnation: str
    child_count: int


class PumpRun(msgspec.Struct, **_STRUCT):
    """What `LashPump/run` receives: the group's stamped envelopes and the incarnation they settle into."""

    group_key: str
    children: list[RuntimeEffectEnvelope]
    incarnation: str


class SettleRequest(msgspec.Struct, **_STRUCT):
    """A child's one-way settlement: a reference (position, replay key), and a small outcome inline."""

    position: int
    replay_key: str
    incarnation: str
    outcome: bytes | None = None  # only when at most INLINE_OUTCOME_BYTES; never stored by the group


class SettleBatch(msgspec.Struct, **_STRUCT):
    """Settlements a batched group's pump saw since its last batch, in the order it saw them."""

    incarnation: str
    refs: list[Ref]


class WaitRequest(msgspec.Struct, **_STRUCT):
    """Serve ranks after ``consumed``; if none is recorded yet, register ``wakes`` for the next ranks."""

    consumed: int
    child_count: int
    wakes: list[str] = msgspec.field(default_factory=list)  # awakeables for ranks consumed + 1, + 2, …


class Ref(msgspec.Struct, **_STRUCT):
    """Where a rank's payload lives: the `LashChild` object keyed by ``replay_key``."""

    position: int
    replay_key: str
    outcome: bytes | None = None  # present only on a wake, when the settle carried it inline
    # Where the outcome is stored, stamped by the group when it ranks or reads: the incarnation's
    # `LashPump` if ``pumped``, else the child's store for ``incarnation``.
    incarnation: str = ""
    pumped: bool = False


class WaitReply(msgspec.Struct, **_STRUCT):
    """References for ranks ``consumed + 1``, ``consumed + 2``, … as recorded right now."""

    refs: list[Ref]


class Waiter(msgspec.Struct, **_STRUCT):
    """Resolve ``awakeable`` with the reference (and small outcome) of ``rank`` when it is recorded."""

    awakeable: str
    rank: int


class Meta(msgspec.Struct, **_STRUCT):
    """The group's small, hot record: read by every settle and wait (the big fence is read only by open).

    ``order`` is the rank -> position map (rank r is the r-th 4-byte little-endian position); a
    position already in it holds its rank, so a settlement is idempotent on its child.
    """

    child_count: int
    wake: str
    disposition: LoserPolicy
    incarnation: str
    order: bytes = b""
    waiters: list[Waiter] = msgspec.field(default_factory=list)
    callers: list[str] = msgspec.field(default_factory=list)
    watchers: list[str] = msgspec.field(default_factory=list)  # invocation ids of the callers' watches
    batched: bool = False  # children run under one `LashPump` invocation and settle in batches

    @property
    def counter(self) -> int:
        """How many ranks are recorded (the group's strictly monotonic counter)."""
        return len(self.order) // 4

    def positions(self, after: int = 0) -> list[int]:
        """Positions holding ranks ``after + 1`` … ``counter``, in rank order."""
        return [position for (position,) in struct.iter_unpack("<I", self.order[4 * after :])]

    def is_settled(self, position: int) -> bool:
        return position in self.positions()

    def ranked(self, position: int) -> Meta:
        """This record with ``position`` appended as the next rank (ADR: append-only, monotonic)."""
        return msgspec.structs.replace(self, order=self.order + struct.pack("<I", position))

    def waiting(self, consumed: int, wakes: list[str]) -> list[Waiter]:
        """Waiters for ranks ``consumed + 1`` … (as many as ``wakes``, never past the last child)."""
        ranks = range(consumed + 1, min(consumed + len(wakes), self.child_count) + 1)
        return [Waiter(awakeable=w, rank=r) for w, r in zip(wakes, ranks, strict=False)]


class CloseRequest(msgspec.Struct, **_STRUCT):
    child_count: int
    disposition: LoserPolicy | None = None


class MsgspecSerde(Serde[_T]):
    """State and awakeable values as msgspec JSON of a declared type (the SDK default is json.dumps)."""

    def __init__(self, kind: Any) -> None:
        self._decoder: msgspec.json.Decoder[_T] = msgspec.json.Decoder(kind)

    def deserialize(self, buf: bytes) -> _T | None:
        return self._decoder.decode(buf) if buf else None

    def serialize(self, obj: _T | None) -> bytes:
        return msgspec.json.encode(obj) if obj is not None else b""


META: MsgspecSerde[Meta] = MsgspecSerde(Meta)
SHAPE: MsgspecSerde[GroupShape] = MsgspecSerde(GroupShape)
STRINGS: MsgspecSerde[list[str]] = MsgspecSerde(list[str])


def child_store(incarnation: str) -> str:
    """A direct child's outcome, per group incarnation: a namesake reopened after a close never reads
    (or has released) the closed incarnation's outcome under the same replay key."""
    return f"outcome:{incarnation}"


def pump_key(group_key: str, incarnation: str) -> str:
    """One pump per incarnation: a namesake opened after a close never queues behind the old losers."""
    return f"{incarnation}:{group_key}"


def group_of_pump(key: str) -> str:
    """The group key inside a `pump_key` (the incarnation is a UUID: it holds no colon)."""
    return key.partition(":")[2]


def handler_for(name: str, child_count: int) -> str:
    """The eager (`_small`) or lazy variant of a hot group handler for a group of ``child_count``."""
    return f"{name}_small" if child_count <= SMALL_GROUP else name


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


def decode(data: bytes, kind: type[_T]) -> _T:
    return msgspec.json.decode(data, type=kind)


def decode_outcome(data: bytes) -> Outcome:
    return msgspec.json.decode(data, type=Outcome)
