"""The pumped settlement mode (decisions 20, 35, 61): one `LashPump` per slice of 256 children (one
pump in all for a group bounded by `max_in_flight`, decision 81) awaits them, keeps their outcomes
and reports each batch to the group."""

from __future__ import annotations

import msgspec
import restate

from ...contract import BODY_LIMIT
from ...contract import RuntimeEffectEnvelope as Envelope
from ..wire._messages import (
    READ_BUDGET,
    ChildrenFailed,
    OutcomesRead,
    PumpAwait,
    Ref,
    SettleBatch,
    WaitReply,
)
from ..wire._records import LINK, PUMP_LINK, STRINGS, GroupMeta, PumpLink
from ..wire._routes import (
    PUMP,
    PUMP_FAIL,
    PUMP_FORGET,
    PUMP_OUTCOMES,
    PUMP_REDISPATCH,
    PUMP_RUN2,
    named,
    pump_key,
)
from ._mode_stores import (
    DISPATCH_ALLOWANCE,
    INVOCATIONS,
    OUTCOMES_PER_CALLER_READ,
    PUMP_SLICE,
    REDISPATCHED,
    Dispatched,
    OutcomeStore,
    Release,
    position_of,
    pump_store,
    slice_key,
    stored_refs,
    too_large,
)

__all__ = ["Pumped"]


def _by_slice(group_key: str, incarnation: str, positions: list[int]) -> dict[str, list[int]]:
    """``positions``, in order, by the key of the pump of the slice that runs and keeps each."""
    by_pump: dict[str, list[int]] = {}
    for position in positions:
        by_pump.setdefault(slice_key(group_key, incarnation, position), []).append(position)
    return by_pump


class Pumped:
    def check_fits(self, group_key: str, children: list[Envelope], sizes: list[int]) -> None:
        total = len(group_key) + DISPATCH_ALLOWANCE  # the pump's run carries every child
        for position, (child, size) in enumerate(zip(children, sizes, strict=True)):
            # A `PumpAwait`'s plan entry per child (decision 66) is smaller than the hash and replay key
            # the open request carried for it in its shape, so what that request fitted, this fits.
            total += size + 1
            if total > BODY_LIMIT:
                what = f"the pump's run is over {total} bytes from child {position} on"
                raise too_large(group_key, child, position, what)

    def dispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope], plan: list[str]
    ) -> list[Dispatched]:
        # Decision 61: one pump (`LashPump/run2`) is every child's only caller; it calls further pumps
        # past PUMP_SLICE children. The open decided how it calls each (decision 66), so the pump
        # journals no plan of its own before its calls; sent before the opener's answer.
        run = PumpAwait(group_key=ctx.key(), incarnation=meta.incarnation, children=children, plan=plan)
        return [Dispatched(PUMP_RUN2.send(ctx, pump_key(ctx.key(), meta.incarnation), run), None)]

    def redispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope]
    ) -> list[Dispatched]:
        # To the pump of each slice, which keeps that slice's outcomes, queued behind its run: it asks
        # the group first (a run releases its store once the group closes), then calls the children
        # no outcome is stored for, planning how itself (no open sent it a plan), and reports them
        # as `run2` does. Not listening (`listens=False`): the group keeps the first run's one link,
        # and this store is released by a report answered closed or the close's `forget` behind it.
        at = {position_of(child): child for child in children}
        by_slice = _by_slice(ctx.key(), meta.incarnation, list(at))
        return [
            Dispatched(
                PUMP_REDISPATCH.send(
                    ctx,
                    key,
                    PumpAwait(
                        group_key=ctx.key(),
                        incarnation=meta.incarnation,
                        children=[at[position] for position in part],
                        listens=False,
                    ),
                ),
                part,
            )
            for key, part in by_slice.items()
        ]

    async def to_cancel(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[str]:
        # Cancelling the group's pump cancels the calls it still awaits: its unsettled children and
        # the further slices' pumps, which cancel theirs (the SDK's implicit cancellation, decision 35);
        # their Cancelled terminals still settle through the pumps. A reopen's re-dispatch likewise.
        invocations = await ctx.get(INVOCATIONS, serde=STRINGS) or []
        return invocations + (await ctx.get(REDISPATCHED, serde=STRINGS) or [])

    async def releases(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[Release]:
        # The group's pump holds its slice's outcomes; its forget queues behind its run, which ends
        # only after every further slice's pump has, and releases theirs too (decision 35).
        link = await ctx.get(PUMP_LINK, serde=LINK)
        if link is None or link.gone is not True:
            return [Release(PUMP_FORGET, pump_key(ctx.key(), meta.incarnation), None)]
        # Decision 102: that pump ended in failure, perhaps before it called (and recorded) the
        # further slices' pumps whose stores the group's repair filled: each slice's is released here.
        keys = dict.fromkeys(
            slice_key(ctx.key(), meta.incarnation, p) for p in range(0, meta.child_count, PUMP_SLICE)
        )
        return [Release(PUMP_FORGET, key, None) for key in keys]

    def late_releases(self, batch: SettleBatch) -> list[Release]:
        return []  # the close already released every pump's whole store

    def left_to_cancel(self, meta: GroupMeta, cancels: list[str], settled: int) -> list[str]:
        # Every child settled: none is left to cancel (its pump is the invocation listed).
        return [] if settled == meta.child_count else cancels

    async def pump_link(self, ctx: restate.ObjectContext) -> PumpLink | None:
        return await ctx.get(PUMP_LINK, serde=LINK)

    async def run_gone(self, ctx: restate.ObjectContext) -> None:
        # The group's pump is gone: it listens for no close, so the close releases by `forget`, every
        # slice's pump's (decision 102).
        link = await ctx.get(PUMP_LINK, serde=LINK) or PumpLink()
        ctx.set(PUMP_LINK, msgspec.structs.replace(link, left=True, gone=True), serde=LINK)

    def store(self, group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
        return OutcomeStore(
            named(PUMP), slice_key(group_key, meta.incarnation, position), pump_store(position)
        )

    def same_store(self, group_key: str, incarnation: str, first: Ref, other: Ref) -> bool:
        # Each slice's pump keeps its children's outcomes (a paged group's ranks spread over them).
        return slice_key(group_key, incarnation, first.position) == slice_key(
            group_key, incarnation, other.position
        )

    def settle_failed(
        self, ctx: restate.ObjectContext, meta: GroupMeta, failed: ChildrenFailed
    ) -> list[tuple[restate.SendHandle, list[int]]]:
        # To the pump of each slice, which keeps that slice's outcomes and reports them as a run does.
        replay_key = dict(zip(failed.positions, failed.replay_keys, strict=True))
        sent = []
        for key, positions in _by_slice(ctx.key(), meta.incarnation, failed.positions).items():
            one = msgspec.structs.replace(
                failed, positions=positions, replay_keys=[replay_key[p] for p in positions]
            )
            sent.append((PUMP_FAIL.send(ctx, key, one), positions))
        return sent

    async def read(
        self, ctx: restate.Context, group_key: str, reply: WaitReply, budget: int = READ_BUDGET
    ) -> list[bytes]:
        positions = [ref.position for ref in stored_refs(reply)][:OUTCOMES_PER_CALLER_READ]
        if not positions:
            return []  # every outcome rode the wake
        by_pump = _by_slice(group_key, reply.incarnation, positions)
        # One bulk read per pump the positions span, all at once, sharing one reply's size: only the
        # pump of the first position answers its first outcome whatever its size (decision 35).
        share = budget // len(by_pump)
        calls = {
            key: PUMP_OUTCOMES.call(
                ctx, key, OutcomesRead(positions=asked, budget=share, first=asked[0] == positions[0])
            )
            for key, asked in by_pump.items()
        }
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
