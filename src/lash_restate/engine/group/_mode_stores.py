"""Where a group's children run and keep their outcomes: the state keys and invocation ids a mode
records, the pump slices' keys, and the messages a close or a dispatch sends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import restate
from restate import SendHandle

from ...contract import BODY_LIMIT, PART_CHILDREN, PayloadTooLarge
from ...contract import RuntimeEffectEnvelope as Envelope
from ..wire._incarnation import bound_of
from ..wire._messages import (
    Ref,
    WaitReply,
)
from ..wire._records import child_store
from ..wire._routes import (
    Route,
    pump_key,
)
from ._pages import _SLICE as _PAGE_SLICE

__all__ = [
    "DISPATCH_ALLOWANCE",
    "INVOCATIONS",
    "OUTCOMES_PER_CALLER_READ",
    "PUMP_FANOUT",
    "PUMP_SLICE",
    "REDISPATCHED",
    "Dispatched",
    "OutcomeStore",
    "Release",
    "child_store",
    "position_of",
    "pump_store",
    "slice_key",
    "stored_refs",
    "too_large",
]

# The group's state key holding the invocation ids a Cancel needs (decision 4).
INVOCATIONS = "invocations"
# A newer key (decision 48): the invocations a reopen re-dispatched, which a Cancel cancels too.
# Absent on a group no reopen has re-dispatched anything for (every format-1 group).
REDISPATCHED = "redispatched"
# Decision 35: one pump waits on at most this many children. The SDK hands every pending handle of a
# wait to its state machine again on each notification, so one pump over N children costs O(N) per
# child; slices bound it. Part of the stored layout: position p is kept by the pump of p // PUMP_SLICE.
PUMP_SLICE = 256
assert PUMP_SLICE == PART_CHILDREN == _PAGE_SLICE  # an open's parts, and the paged layout's slices
# Decision 65: a pump calls at most this many further pumps (a tree of them over the slices), so no
# pump awaits more than PUMP_SLICE + PUMP_FANOUT futures whatever the width. Not part of the stored
# layout (which pump keeps a position is fixed by PUMP_SLICE alone); each pump decides for its subtree.
PUMP_FANOUT = 4
# How many outcomes one caller's read asks the pumps for at once, over every slice they span.
OUTCOMES_PER_CALLER_READ = 1024


@dataclass(frozen=True)
class Release:
    """A one-way message that frees an outcome store the group no longer needs (no TTL, no leak)."""

    route: Route[Any, None]
    key: str
    arg: Any

    def send(self, ctx: restate.ObjectContext) -> None:
        self.route.send(ctx, self.key, self.arg)


@dataclass(frozen=True)
class Dispatched:
    """An invocation a dispatch sent, and the positions of the children it runs (None: every child)."""

    handle: SendHandle
    positions: list[int] | None


@dataclass(frozen=True)
class OutcomeStore:
    """A state entry of one of our objects: ``service``/``key``, state key ``name``."""

    service: str
    key: str
    name: str


def pump_store(position: int) -> str:
    """The state key under which a pump keeps a child's outcome."""
    return f"o{position}"


def slice_key(group_key: str, incarnation: str, position: int) -> str:
    """The key of the pump that runs (and keeps the outcome of) the child at ``position``.

    Decision 35: the first slice is the group's own pump, the one the open sends; each further slice
    has a pump of its own (`pump_key` names it), called by the pump whose subtree holds it (decision
    65: a tree, each pump calling at most `PUMP_FANOUT` others).
    """
    # Decision 81: a bounded group's one pump runs (and keeps) every child.
    slice_index = 0 if bound_of(incarnation) is not None else position // PUMP_SLICE
    return pump_key(group_key, incarnation, slice_index)


def stored_refs(reply: WaitReply) -> list[Ref]:
    return [ref for ref in reply.refs if ref.outcome is None]


def too_large(group_key: str, child: Envelope, position: int, what: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"{what}, over the limit of {BODY_LIMIT} bytes for one message",
        group_key=group_key,
        position=position,
        replay_key=child.replay_key,
    )


# A dispatch message's fields besides its envelopes: the incarnation (a UUID), the group key, names.
DISPATCH_ALLOWANCE = 2 * 1024


def position_of(child: Envelope) -> int:
    """The position the group stamped on ``child``."""
    assert child.membership is not None  # the group stamped every child
    return child.membership.position
