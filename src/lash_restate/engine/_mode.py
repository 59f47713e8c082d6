"""The settlement-mode seam: the one place where the direct and the pumped paths differ (decision 24).

A group's `SettlementMode` is chosen once, at open, from its width (decision 20) and kept in its
`GroupMeta`. Everything that depends on it — how the children are dispatched, which invocations a
`Cancel` cancels, which outcome stores a close or a late settlement releases, and how a caller reads
outcomes that did not ride the wake — is a method here; the group object and the controller call
`mode_for(...)` and never test the mode themselves.

Direct: each child is its own `LashChild` invocation, stores its outcome in its own state (per group
incarnation) and settles itself. Pumped: one `LashPump` invocation per group incarnation calls every
child, stores the outcomes in its own state and settles them a batch at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import restate
from restate import SendHandle

from ..contract import RuntimeEffectEnvelope as Envelope
from ._messages import ChildRun, PumpRun, Ref, SettleBatch, WaitReply
from ._records import SHAPE, STRINGS, GroupMeta, SettlementMode
from ._routes import (
    CHILD,
    CHILD_FORGET,
    CHILD_OUTCOME,
    CHILD_RUN,
    PUMP,
    PUMP_FORGET,
    PUMP_OUTCOMES,
    PUMP_RUN,
    Route,
    named,
    pump_key,
)

__all__ = ["INVOCATIONS", "Mode", "OutcomeStore", "Release", "mode_for", "outcome_store", "pump_store"]

# The group's state key holding the invocation ids a Cancel needs (decision 4).
INVOCATIONS = "invocations"


@dataclass(frozen=True)
class Release:
    """A one-way message that frees an outcome store the group no longer needs (no TTL, no leak)."""

    route: Route[Any, None]
    key: str
    arg: Any

    def send(self, ctx: restate.ObjectContext) -> None:
        self.route.send(ctx, self.key, self.arg)


class Mode(Protocol):
    """What a settlement mode decides; every method reads before any effect is issued (decision 22)."""

    def dispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope]
    ) -> list[SendHandle]:
        """Start the children; the returned sends' invocation ids are what `to_cancel` cancels."""
        ...

    async def to_cancel(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[str]:
        """The invocations whose cancellation cancels exactly the group's unsettled children."""
        ...

    async def releases(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[Release]:
        """At close: the stores holding this incarnation's settled outcomes."""
        ...

    def late_releases(self, batch: SettleBatch) -> list[Release]:
        """A settlement that finds its group closed: the stores nobody is left to read."""
        ...

    async def read(self, ctx: restate.Context, group_key: str, reply: WaitReply) -> list[bytes]:
        """Outcomes of the refs that carry none, in rank order; fewer past one reply's size."""
        ...

    def store(self, group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
        """Where a settled child's outcome is kept (what an operator's view reads)."""
        ...


@dataclass(frozen=True)
class OutcomeStore:
    """A state entry of one of our objects: ``service``/``key``, state key ``name``."""

    service: str
    key: str
    name: str


def pump_store(position: int) -> str:
    """The state key under which a pump keeps a child's outcome."""
    return f"o{position}"


def _stored(reply: WaitReply) -> list[Ref]:
    return [ref for ref in reply.refs if ref.outcome is None]


def child_store(incarnation: str) -> str:
    """A direct child's outcome key, per group incarnation: a namesake reopened after a close never
    reads (or has released) the closed incarnation's outcome under the same replay key (decision 17)."""
    return f"outcome:{incarnation}"


class _Direct:
    def dispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope]
    ) -> list[SendHandle]:
        return [
            CHILD_RUN.send(ctx, child.replay_key, ChildRun(envelope=child, incarnation=meta.incarnation))
            for child in children
        ]

    async def to_cancel(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[str]:
        settled = set(meta.positions())
        invocations = await ctx.get(INVOCATIONS, serde=STRINGS) or []  # one per child, by position
        return [invocation for position, invocation in enumerate(invocations) if position not in settled]

    async def releases(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[Release]:
        if not meta.counter:
            return []
        fence = await ctx.get("fence", serde=SHAPE)
        assert fence is not None  # recorded with meta, cleared with it
        # Unsettled children's stores are released when their late settlement finds the group gone.
        return [Release(CHILD_FORGET, fence.replay_keys[p], meta.incarnation) for p in meta.positions()]

    def late_releases(self, batch: SettleBatch) -> list[Release]:
        return [Release(CHILD_FORGET, ref.replay_key, batch.incarnation) for ref in batch.refs]

    def store(self, group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
        return OutcomeStore(named(CHILD), replay_key, child_store(meta.incarnation))

    async def read(self, ctx: restate.Context, group_key: str, reply: WaitReply) -> list[bytes]:
        calls = [CHILD_OUTCOME.call(ctx, ref.replay_key, reply.incarnation) for ref in _stored(reply)]
        if calls:
            await restate.gather(*calls)
        return [CHILD_OUTCOME.reply(await call) for call in calls]


class _Pumped:
    def dispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope]
    ) -> list[SendHandle]:
        run = PumpRun(group_key=ctx.key(), children=children, incarnation=meta.incarnation)
        return [PUMP_RUN.send(ctx, pump_key(ctx.key(), meta.incarnation), run)]

    async def to_cancel(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[str]:
        # Cancelling the pump cancels the child calls it still awaits, i.e. the unsettled children
        # (the SDK's implicit cancellation); their Cancelled terminals still settle through it.
        return await ctx.get(INVOCATIONS, serde=STRINGS) or []

    async def releases(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[Release]:
        # The pump holds every outcome; its forget queues behind its run, so it clears last.
        return [Release(PUMP_FORGET, pump_key(ctx.key(), meta.incarnation), None)]

    def late_releases(self, batch: SettleBatch) -> list[Release]:
        return []  # the close already released the pump's whole store

    def store(self, group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
        return OutcomeStore(named(PUMP), pump_key(group_key, meta.incarnation), pump_store(position))

    async def read(self, ctx: restate.Context, group_key: str, reply: WaitReply) -> list[bytes]:
        positions = [ref.position for ref in _stored(reply)]
        if not positions:
            return []
        bulk = await PUMP_OUTCOMES.call(ctx, pump_key(group_key, reply.incarnation), positions)
        return [bytes(raw) for raw in msgspec.json.decode(bulk, type=list[msgspec.Raw])]


_MODES: dict[SettlementMode, Mode] = {SettlementMode.DIRECT: _Direct(), SettlementMode.PUMPED: _Pumped()}


def mode_for(mode: SettlementMode) -> Mode:
    return _MODES[mode]


def outcome_store(group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
    """Where the outcome of the child at ``position`` of the group ``meta`` describes is kept."""
    return _MODES[meta.mode].store(group_key, meta, position, replay_key)
