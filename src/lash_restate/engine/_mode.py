"""The settlement-mode seam: the one place where the direct and the pumped paths differ (decision 24).

A group's `SettlementMode` is chosen once, at open, from its width (decision 20) and kept in its
`GroupMeta`. Everything that depends on it — how the children are dispatched, which invocations a
`Cancel` cancels, which outcome stores a close or a late settlement releases, and how a caller reads
outcomes that did not ride the wake — is a method here; the group object and the controller call
`mode_for(...)` and never test the mode themselves.

Direct: each child is its own `LashChild` invocation, stores its outcome in its own state (per group
incarnation) and settles itself. Pumped: one `LashPump` invocation per group incarnation calls the
children, stores the outcomes in its own state and reports them a batch at a time; past
`PUMP_SLICE` children it keeps the first slice and calls a tree of further pumps, one per slice
(decisions 35, 65). A reopen re-dispatches a pumped group's children slice by slice, to the pump
that keeps each slice's outcomes, which dispatches and reports them as the first run did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import restate
from restate import SendHandle

from ..contract import BODY_LIMIT, PART_CHILDREN, PayloadTooLarge
from ..contract import RuntimeEffectEnvelope as Envelope
from ._messages import (
    READ_BUDGET,
    ChildrenFailed,
    ChildRun,
    OutcomesRead,
    PumpAwait,
    Ref,
    SettleBatch,
    WaitReply,
)
from ._pages import _SLICE as _PAGE_SLICE
from ._records import LINK, PUMP_LINK, SHAPE, STRINGS, GroupMeta, PumpLink, SettlementMode
from ._routes import (
    CHILD,
    CHILD_FAIL,
    CHILD_FORGET,
    CHILD_OUTCOME,
    CHILD_RUN,
    PUMP,
    PUMP_FAIL,
    PUMP_FORGET,
    PUMP_OUTCOMES,
    PUMP_REDISPATCH,
    PUMP_REDISPATCH_STAGED,
    PUMP_RUN2,
    Route,
    named,
    pump_key,
)

__all__ = [
    "INVOCATIONS",
    "PUMP_FANOUT",
    "PUMP_SLICE",
    "REDISPATCHED",
    "Dispatched",
    "Mode",
    "OutcomeStore",
    "Release",
    "mode_for",
    "outcome_store",
    "position_of",
    "pump_store",
    "redispatch_staged",
    "slice_key",
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


class Mode(Protocol):
    """What a settlement mode decides; every method reads before any effect is issued (decision 22)."""

    def dispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope], plan: list[str]
    ) -> list[Dispatched]:
        """Start the children, a pump calling each as ``plan`` says (`opened_plan`, decision 66); the
        returned sends' invocation ids are what `to_cancel` cancels."""
        ...

    def redispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope]
    ) -> list[Dispatched]:
        """A reopen's dispatch of ``children``, unsettled: each runs again only if it ended without an
        outcome (its runner was missing), once whatever runs it already has ended (decision 48). The
        same dispatch as the first, so a re-run child reaches its rank as a first run's would."""
        ...

    def check_fits(self, group_key: str, children: list[Envelope], sizes: list[int]) -> None:
        """Refuse (`PayloadTooLarge`) children whose dispatch would not fit one message; ``sizes``
        are their encoded sizes. Called before anything is recorded."""
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

    def fail(self, ctx: restate.ObjectContext, meta: GroupMeta, failed: ChildrenFailed) -> None:
        """Settle the children ``failed`` names with its outcome, each unless an outcome is stored for
        it: through the store that keeps it, which settles it as a run would (decision 74)."""
        ...

    def left_to_cancel(self, meta: GroupMeta, cancels: list[str], settled: int) -> list[str]:
        """Of ``cancels`` (`to_cancel`'s), what a close still cancels once ``settled`` children rank."""
        ...

    async def pump_link(self, ctx: restate.ObjectContext) -> PumpLink | None:
        """How a close releases the group's pump (decision 61); None where it has no pump."""
        ...

    async def run_gone(self, ctx: restate.ObjectContext) -> None:
        """The one invocation that ran every child ended in failure (decision 74): what a close then
        releases it by."""
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


def slice_key(group_key: str, incarnation: str, position: int) -> str:
    """The key of the pump that runs (and keeps the outcome of) the child at ``position``.

    Decision 35: the first slice is the group's own pump, the one the open sends; each further slice
    has a pump of its own, called by that one. `group_of_pump` still finds the group key in every one
    (the slice suffix holds no colon).
    """
    first = position // PUMP_SLICE
    return pump_key(group_key, incarnation if first == 0 else f"{incarnation}.{first}")


def _stored(reply: WaitReply) -> list[Ref]:
    return [ref for ref in reply.refs if ref.outcome is None]


def child_store(incarnation: str) -> str:
    """A direct child's outcome key, per group incarnation: a namesake reopened after a close never
    reads (or has released) the closed incarnation's outcome under the same replay key (decision 17)."""
    return f"outcome:{incarnation}"


def _too_large(group_key: str, child: Envelope, position: int, what: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"{what}, over the limit of {BODY_LIMIT} bytes for one message",
        group_key=group_key,
        position=position,
        replay_key=child.replay_key,
    )


# A dispatch message's fields besides its envelopes: the incarnation (a UUID), the group key, names.
_DISPATCH_ALLOWANCE = 2 * 1024


class _Direct:
    def check_fits(self, group_key: str, children: list[Envelope], sizes: list[int]) -> None:
        for position, (child, size) in enumerate(zip(children, sizes, strict=True)):
            if size + _DISPATCH_ALLOWANCE > BODY_LIMIT:  # its ChildRun
                raise _too_large(group_key, child, position, f"child {position} is {size} bytes encoded")

    def dispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope], plan: list[str]
    ) -> list[Dispatched]:
        return [
            Dispatched(
                CHILD_RUN.send(ctx, child.replay_key, ChildRun(envelope=child, incarnation=meta.incarnation)),
                [position_of(child)],
            )
            for child in children
        ]

    def redispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope]
    ) -> list[Dispatched]:
        # Queued behind a run still going on the child's key (both exclusive): a child that stored its
        # outcome meanwhile only settles again, and the group dedups by position.
        return self.dispatch(ctx, meta, children, [])

    async def to_cancel(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[str]:
        settled = set(meta.positions())
        invocations = await ctx.get(INVOCATIONS, serde=STRINGS) or []  # one per child, by position
        unsettled = [invocation for position, invocation in enumerate(invocations) if position not in settled]
        # A re-dispatched run of a child settled since only settles again, cancelled or not.
        return unsettled + (await ctx.get(REDISPATCHED, serde=STRINGS) or [])

    async def releases(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[Release]:
        if not meta.counter:
            return []
        fence = await ctx.get("fence", serde=SHAPE)
        assert fence is not None  # recorded with meta, cleared with it
        # Unsettled children's stores are released when their late settlement finds the group gone.
        return [Release(CHILD_FORGET, fence.replay_keys[p], meta.incarnation) for p in meta.positions()]

    def late_releases(self, batch: SettleBatch) -> list[Release]:
        return [Release(CHILD_FORGET, ref.replay_key, batch.incarnation) for ref in batch.refs]

    def left_to_cancel(self, meta: GroupMeta, cancels: list[str], settled: int) -> list[str]:
        return cancels  # each child's own invocation: a settled one's cancel finds it ended

    async def pump_link(self, ctx: restate.ObjectContext) -> PumpLink | None:
        return None  # no pump

    async def run_gone(self, ctx: restate.ObjectContext) -> None:
        return None  # each child is its own run: nothing of the group's is gone with one

    def store(self, group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
        return OutcomeStore(named(CHILD), replay_key, child_store(meta.incarnation))

    def fail(self, ctx: restate.ObjectContext, meta: GroupMeta, failed: ChildrenFailed) -> None:
        # Each child's store is its own object, which settles itself (queued behind a run still going).
        for position, replay_key in zip(failed.positions, failed.replay_keys, strict=True):
            one = msgspec.structs.replace(failed, positions=[position], replay_keys=[replay_key])
            CHILD_FAIL.send(ctx, replay_key, one)

    async def read(self, ctx: restate.Context, group_key: str, reply: WaitReply) -> list[bytes]:
        calls = [CHILD_OUTCOME.call(ctx, ref.replay_key, reply.incarnation) for ref in _stored(reply)]
        if calls:
            await restate.gather(*calls)
        return [CHILD_OUTCOME.reply(await call) for call in calls]


class _Pumped:
    def check_fits(self, group_key: str, children: list[Envelope], sizes: list[int]) -> None:
        total = len(group_key) + _DISPATCH_ALLOWANCE  # the pump's run carries every child
        for position, (child, size) in enumerate(zip(children, sizes, strict=True)):
            # A `PumpAwait`'s plan entry per child (decision 66) is smaller than the hash and replay key
            # the open request carried for it in its shape, so what that request fitted, this fits.
            total += size + 1
            if total > BODY_LIMIT:
                what = f"the pump's run is over {total} bytes from child {position} on"
                raise _too_large(group_key, child, position, what)

    def dispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope], plan: list[str]
    ) -> list[Dispatched]:
        # Decision 61: one pump (`LashPump/run2`) is every child's only caller; it calls further pumps
        # past PUMP_SLICE children. The open decided how it calls each, so its first step is its
        # first call (decision 66); sent before the opener's answer.
        run = PumpAwait(group_key=ctx.key(), incarnation=meta.incarnation, children=children, plan=plan)
        return [Dispatched(PUMP_RUN2.send(ctx, pump_key(ctx.key(), meta.incarnation), run), None)]

    def redispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope]
    ) -> list[Dispatched]:
        # To the pump of each slice, which keeps that slice's outcomes, queued behind its run: it asks
        # the group first (a run releases its store once the group closes), then dispatches the
        # children no outcome is stored for as `run2` does and reports them as `run2` does.
        by_slice: dict[str, list[Envelope]] = {}
        for child in children:
            by_slice.setdefault(slice_key(ctx.key(), meta.incarnation, position_of(child)), []).append(child)
        return [
            Dispatched(
                PUMP_REDISPATCH.send(
                    ctx,
                    key,
                    PumpAwait(
                        group_key=ctx.key(), incarnation=meta.incarnation, children=part, listens=False
                    ),
                ),
                [position_of(child) for child in part],
            )
            for key, part in by_slice.items()
        ]

    async def to_cancel(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[str]:
        # Cancelling the group's pump cancels the calls it still awaits: its unsettled children and
        # the further slices' pumps, which cancel theirs (the SDK's implicit cancellation, decision 35);
        # their Cancelled terminals still settle through the pumps. A reopen's redrive likewise.
        invocations = await ctx.get(INVOCATIONS, serde=STRINGS) or []
        return invocations + (await ctx.get(REDISPATCHED, serde=STRINGS) or [])

    async def releases(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[Release]:
        # The group's pump holds its slice's outcomes; its forget queues behind its run, which ends
        # only after every further slice's pump has, and releases theirs too (decision 35).
        return [Release(PUMP_FORGET, pump_key(ctx.key(), meta.incarnation), None)]

    def late_releases(self, batch: SettleBatch) -> list[Release]:
        return []  # the close already released every pump's whole store

    def left_to_cancel(self, meta: GroupMeta, cancels: list[str], settled: int) -> list[str]:
        # Every child settled: none is left to cancel (its pump is the invocation listed).
        return [] if settled == meta.child_count else cancels

    async def pump_link(self, ctx: restate.ObjectContext) -> PumpLink | None:
        return await ctx.get(PUMP_LINK, serde=LINK)

    async def run_gone(self, ctx: restate.ObjectContext) -> None:
        # The group's pump is gone: it listens for no close, so the close releases by `forget`.
        link = await ctx.get(PUMP_LINK, serde=LINK)
        if link is not None and not link.left:
            ctx.set(PUMP_LINK, msgspec.structs.replace(link, left=True), serde=LINK)

    def store(self, group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
        return OutcomeStore(
            named(PUMP), slice_key(group_key, meta.incarnation, position), pump_store(position)
        )

    def fail(self, ctx: restate.ObjectContext, meta: GroupMeta, failed: ChildrenFailed) -> None:
        # To the pump of each slice, which keeps that slice's outcomes and reports them as a run does.
        by_slice: dict[str, list[tuple[int, str]]] = {}
        for position, replay_key in zip(failed.positions, failed.replay_keys, strict=True):
            key = slice_key(ctx.key(), meta.incarnation, position)
            by_slice.setdefault(key, []).append((position, replay_key))
        for key, part in by_slice.items():
            positions, replay_keys = [p for p, _ in part], [k for _, k in part]
            PUMP_FAIL.send(
                ctx, key, msgspec.structs.replace(failed, positions=positions, replay_keys=replay_keys)
            )

    async def read(self, ctx: restate.Context, group_key: str, reply: WaitReply) -> list[bytes]:
        positions = [ref.position for ref in _stored(reply)][:OUTCOMES_PER_CALLER_READ]
        by_pump: dict[str, list[int]] = {}
        for position in positions:
            by_pump.setdefault(slice_key(group_key, reply.incarnation, position), []).append(position)
        # One bulk read per pump the positions span, all at once, sharing one reply's size: only the
        # pump of the first position answers its first outcome whatever its size (decision 35).
        share = READ_BUDGET // len(by_pump) if by_pump else 0
        calls = {
            key: PUMP_OUTCOMES.call(
                ctx, key, OutcomesRead(positions=asked, budget=share, first=asked[0] == positions[0])
            )
            for key, asked in by_pump.items()
        }
        if calls:
            await restate.gather(*calls.values())
        found: dict[int, bytes] = {}
        for key, call in calls.items():
            answered = msgspec.json.decode(await call, type=list[msgspec.Raw])
            found.update((p, bytes(raw)) for p, raw in zip(by_pump[key], answered, strict=False))
        # A pump may answer fewer than asked (its size cut): stop at the first position it left out.
        out: list[bytes] = []
        for position in positions:
            if position not in found:
                break
            out.append(found[position])
        return out


_MODES: dict[SettlementMode, Mode] = {SettlementMode.DIRECT: _Direct(), SettlementMode.PUMPED: _Pumped()}


def redispatch_staged(
    ctx: restate.ObjectContext, meta: GroupMeta, stage: str, slices: list[int]
) -> list[Dispatched]:
    """A reopen of a group opened in parts (its children are staged again, under ``stage``): each of
    ``slices`` hands its staged part to that slice's `redispatch`, as `_Pumped.redispatch` sends it."""
    run = PumpAwait(group_key=ctx.key(), incarnation=meta.incarnation, listens=False)
    return [
        Dispatched(
            PUMP_REDISPATCH_STAGED.send(ctx, slice_key(ctx.key(), stage, k * PUMP_SLICE), run),
            list(range(k * PUMP_SLICE, min((k + 1) * PUMP_SLICE, meta.child_count))),
        )
        for k in slices
    ]


def position_of(child: Envelope) -> int:
    """The position the group stamped on ``child``."""
    assert child.membership is not None  # the group stamped every child
    return child.membership.position


def mode_for(mode: SettlementMode) -> Mode:
    return _MODES[mode]


def outcome_store(group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
    """Where the outcome of the child at ``position`` of the group ``meta`` describes is kept."""
    return _MODES[meta.mode].store(group_key, meta, position, replay_key)
