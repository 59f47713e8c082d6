"""What the Restate host's objects keep in Restate state: the group's records, and how a group settles.

ADR, "Restate satisfaction": the group object's state is a counter, a shape fence and a rank ->
reference map. In a group of one slice or fewer the counter and the map are one packed ``order``
(rank r is the r-th 4-byte position), kept in the small hot `GroupMeta` with the waiters and
openers; a paged group (its incarnation starts with ``p-``) keeps them in pages instead
(`group/_pages.py`), its ``order`` empty; `group/_ranks.py` is where the two layouts meet. The fence
(`GroupShape`, with every replay key) is a separate, cold record; payload bytes are in none of them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, TypeVar

import msgspec
from restate.serde import BytesSerde, Serde

from ...contract import GroupShape, GroupWakePolicy, LoserPolicy, RuntimeEffectEnvelope

__all__ = [
    "BYTES",
    "ENDS",
    "ENVELOPE",
    "ENVELOPES",
    "EVENT_WAITER",
    "EVENT_WAITERS",
    "FENCE",
    "GUARDED",
    "GUARDS",
    "LINK",
    "META",
    "MILLIS",
    "MISSED",
    "OPENER_ENDS",
    "POSITIONS",
    "PUMP_LINK",
    "RECLAIM_AT",
    "RECORD",
    "RECORD_OPTIONS",
    "SAVERS",
    "SAVES",
    "SHAPE",
    "STRINGS",
    "GroupMeta",
    "MsgspecSerde",
    "Opener",
    "OpenerEnd",
    "PumpLink",
    "SettlementMode",
    "Waiter",
    "child_store",
    "missed_key",
]

_T = TypeVar("_T")

RECORD_OPTIONS: Final[Mapping[str, bool]] = MappingProxyType({"frozen": True, "kw_only": True})
"""The contract's struct options less ``forbid_unknown_fields``, for every engine record and message.

Decision 42: a reader ignores a field it does not know, so the next release may add one that this
release can do without (docs/compatibility.md). The contract's own records (envelope, shape,
outcome) stay strict: their bytes are identity and their hashes fence replays.
"""


# See decisions 20, 61, 81 (its docstring is what Restate's UI shows).
class SettlementMode(StrEnum):
    """How a group's children reach the rank authority, chosen once at open.

    ``direct``: each child is its own `LashChild` invocation that stores its outcome and settles
    itself. ``pumped``: a `LashPump` invocation per slice of 256 children (a tree of them; one in
    all for a bounded group) awaits its children, stores their outcomes and reports whatever
    finished meanwhile in one batch. What differs lives in `_mode.py`. A group with a call child, a
    `max_in_flight` bound, or `batch_from` children or more is pumped.
    """

    DIRECT = "direct"
    PUMPED = "pumped"


class Waiter(msgspec.Struct, **RECORD_OPTIONS):
    """Resolve ``awakeable`` with the reference (and small outcome) of ``rank`` when it is recorded."""

    awakeable: str
    rank: int


class Opener(msgspec.Struct, **RECORD_OPTIONS):
    """An invocation that opened (or reopened) the group; under a declared `Cancel`, how it ended.

    Every opener is recorded, so an operator can tell an orphaned group (no opener alive) from a
    parked one. A `Cancel` group watches each with a `watch` of its own (decision 13, ``watcher``);
    any other group this release records watches them beside its runs (`watch_runs`, decision 78).
    """

    caller: str  # its invocation id
    watcher: str | None = None  # the invocation id of the watch attached to it (Cancel only)
    ended: bool = False
    failed: bool = False  # ended in failure, or was killed or cancelled


class OpenerEnd(msgspec.Struct, **RECORD_OPTIONS):
    """How an invocation that saved the group's handle ended (decision 45), kept under `OPENER_ENDS`.

    ``failed``: it ended in failure, or was killed or cancelled; otherwise it returned normally, so a
    continuation holds the cursor it saved: the group is parked, not leaked.
    """

    caller: str  # its invocation id
    failed: bool


# A newer key than the group's format-1 records (decision 45): absent on a group no saver has ended in.
OPENER_ENDS = "opener_ends"


class PumpLink(msgspec.Struct, **RECORD_OPTIONS):
    """How `LashGroup/close` releases the store of a group's pump (decision 61), kept under `PUMP_LINK`.

    ``awakeable``: the pump listens on it; the close resolves it and the pump releases its own store.
    ``left``: the pump stopped listening with its store kept; the close sends it a `LashPump/forget`.
    ``gone``: the pump ended in failure (decision 102), perhaps before it recorded its further slices'
    pumps, which the group's repair filled: the close sends each slice's pump a `forget` itself.
    """

    awakeable: str | None = None
    left: bool = False
    gone: bool | msgspec.UnsetType = msgspec.UNSET  # unset (not written) but for a gone pump


# A newer key than the group's format-1 records (decision 61): absent on a group whose pump has not
# reported yet, and on every group a release before it opened.
PUMP_LINK = "pump"


class GroupMeta(msgspec.Struct, **RECORD_OPTIONS):
    """The group's small, hot record: read by every settle and wait (the big fence is read only where a
    replay key or the shape is needed: an open, a narrow group's serve, a reopen's checks).

    ``order`` is the rank -> position map (rank r is the r-th 4-byte little-endian position); a
    position already in it holds its rank, so a settlement is idempotent on its child.
    """

    child_count: int
    wake: GroupWakePolicy
    disposition: LoserPolicy
    incarnation: str  # tells this group's settlements from a closed namesake's (decision 17)
    mode: SettlementMode = SettlementMode.DIRECT
    order: bytes = b""
    waiters: list[Waiter] = msgspec.field(default_factory=list)
    openers: list[Opener] = msgspec.field(default_factory=list)  # in the order they opened
    opened_at_ms: int = 0  # when the first open recorded it (the state table keeps no timestamps)

    @property
    def counter(self) -> int:
        """How many ranks are recorded (the group's strictly monotonic counter)."""
        return len(self.order) // 4

    def positions(self, after: int = 0, limit: int | None = None) -> list[int]:
        """Positions holding ranks ``after + 1`` … ``counter`` (at most ``limit`` of them), in rank order."""
        end = None if limit is None else 4 * (after + limit)
        return [position for (position,) in struct.iter_unpack("<I", self.order[4 * after : end])]

    def settled(self) -> set[int]:
        """The positions that hold a rank."""
        return set(self.positions())

    def ranked(self, positions: list[int]) -> GroupMeta:
        """This record with ``positions`` appended as the next ranks (ADR: append-only, monotonic)."""
        added = struct.pack(f"<{len(positions)}I", *positions)
        return msgspec.structs.replace(self, order=self.order + added)

    def opener_ended(self, caller: str, failed: bool) -> GroupMeta:
        ended = [
            msgspec.structs.replace(o, ended=True, failed=failed) if o.caller == caller else o
            for o in self.openers
        ]
        return msgspec.structs.replace(self, openers=ended)

    @property
    def severed(self) -> bool:
        """Every opener has ended, and the last to open (the group's latest holder) ended in failure.

        Decided by open order, not by the order the ends are reported in, so it does not depend on
        which watch reports first. An opener that returned normally parked a continuation.
        """
        return bool(self.openers) and all(o.ended for o in self.openers) and self.openers[-1].failed

    def waiting(self, consumed: int, wakes: list[str]) -> list[Waiter]:
        """Waiters for ranks ``consumed + 1`` … (as many as ``wakes``, never past the last child)."""
        ranks = range(consumed + 1, min(consumed + len(wakes), self.child_count) + 1)
        return [Waiter(awakeable=w, rank=r) for w, r in zip(wakes, ranks, strict=False)]


class MsgspecSerde(Serde[_T]):
    """State and awakeable values as msgspec JSON of a declared type (the SDK default is json.dumps)."""

    def __init__(self, kind: Any) -> None:
        self._decoder: msgspec.json.Decoder[_T] = msgspec.json.Decoder(kind)

    def deserialize(self, buf: bytes) -> _T | None:
        return self._decoder.decode(buf) if buf else None

    def serialize(self, obj: _T | None) -> bytes:
        return msgspec.json.encode(obj) if obj is not None else b""


# The group's two keys since the baseline: its record (a `GroupMeta`) and its shape, which fences a
# reopen (ADR: shape first, then each child's hash).
RECORD = "meta"
FENCE = "fence"

META: MsgspecSerde[GroupMeta] = MsgspecSerde(GroupMeta)
SHAPE: MsgspecSerde[GroupShape] = MsgspecSerde(GroupShape)
STRINGS: MsgspecSerde[list[str]] = MsgspecSerde(list[str])
BYTES = BytesSerde()  # raw bytes: a stored outcome, an awakeable's payload, what an attach answers
ENDS: MsgspecSerde[list[OpenerEnd]] = MsgspecSerde(list[OpenerEnd])
LINK: MsgspecSerde[PumpLink] = MsgspecSerde(PumpLink)
ENVELOPES: MsgspecSerde[list[RuntimeEffectEnvelope]] = MsgspecSerde(list[RuntimeEffectEnvelope])
ENVELOPE: MsgspecSerde[RuntimeEffectEnvelope] = MsgspecSerde(RuntimeEffectEnvelope)
POSITIONS: MsgspecSerde[list[int]] = MsgspecSerde(list[int])

# Newer group keys: the positions of the children whose runner was missing (`LashGroup/missed`), and
# each one's envelope under a key of its own (a write stays one child's size), until a re-dispatch
# runs them again. Absent on a group none of whose children missed (every format-1 group).
MISSED = "missed"

# A newer group key (decision 78): when an orphaned group is due to be reclaimed, in ms since the epoch.
RECLAIM_AT = "reclaim_at"
# A newer group key (decision 78): the invocation ids of the callers that saved the group's handle,
# recorded when each saved it (an earlier release's group has none; `opener_ends` tells of its savers).
SAVERS = "savers"
# A newer group key (decision 83): each pending guard's invocation id, with the wakes it carries, so a
# registration of wakes cancels the guards whose wakes have all been woken (absent: no guard pending).
GUARDED = "guarded"
# A newer group key (decision 98): the incarnation whose runs the group cancelled itself, a `Cancel`
# group nobody could resume (absent: it cancelled none). A run reported failed later settles its
# children `Cancelled`, even once a resumer has reopened the group.
CANCELLED_RUNS = "cancelled_runs"
# What ends the incarnation of a group that records saves (decision 78; `_incarnation.opened_since_baseline`).
SAVES = "-s"


MILLIS: MsgspecSerde[int] = MsgspecSerde(int)
GUARDS: MsgspecSerde[dict[str, list[str]]] = MsgspecSerde(dict[str, list[str]])


def missed_key(position: int) -> str:
    """The group's state key for the envelope of the child at ``position`` that missed its runner."""
    return f"missed:{position}"


# An event's waiting children, each a state entry of its own, `waiter:{awakeable}` (empty); and an
# earlier release's list of every waiting awakeable, read until it is emptied.
EVENT_WAITER = "waiter:"
EVENT_WAITERS = "waiters"


def child_store(incarnation: str) -> str:
    """A direct child's outcome key, per group incarnation: a namesake reopened after a close never
    reads (or has released) the closed incarnation's outcome under the same replay key (decision 17)."""
    return f"outcome:{incarnation}"
