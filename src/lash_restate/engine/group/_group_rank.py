"""`LashGroup`'s single writer of ranks: a pump's report and a child's settle rank what settled, in
settlement order, and wake who waits; `wait` serves the ranks recorded (ADR, "Restate satisfaction").

A direct child reaches `settle` (`LashChild/run`; so does an earlier release's pump, its batches
forwarded by `compat`), a pump reaches `report` (`await_and_report`); both
call `rank_refs`, which ranks through the group's rank layout (`_ranks`): in `meta.order`, or in
pages for a wide group, by the same code."""

from __future__ import annotations

from typing import Any

import msgspec
import restate

from ... import logs
from ...contract import InvalidSettlement
from ..wire._messages import PumpReport, Ref, ReportReply, SettleBatch, WaitReply, WaitRequest
from ..wire._records import LINK, META, PUMP_LINK, RECORD, GroupMeta, PumpLink, Waiter
from ._group_common import REPLY, GroupSettings, open_meta
from ._group_guard import guard_waiters
from ._mode import mode_for
from ._ranks import ranks_for

__all__ = [
    "WAIT_REFS",
    "check_batch",
    "on_report",
    "on_settle",
    "on_wait",
    "rank_refs",
    "wake_waiters",
]

# Decision 36: a wait serves at most this many recorded ranks; the caller reads on with the next wait,
# so a wide group's reply (and the caller's journal entry) stays bounded whatever the group's width.
WAIT_REFS = 1024


# See decision 61 (its docstring is what Restate's UI shows).
async def on_report(ctx: restate.ObjectContext, batch: PumpReport) -> ReportReply:
    """A pump's settlements, ranked as `settle` ranks them; answers whether the group is still open,
    so a pump whose group closed releases its store and stops. A report with no settlements only
    asks that (a pump's `group_is_open`), or links the pump (``listen``, ``left``)."""
    # Decision 65: a paged group's report (its incarnation says so) reads all it needs at once.
    meta_read: Any = ctx.get(RECORD, serde=META)
    reads = ranks_for(batch.incarnation).prefetch(ctx, batch.refs) if batch.refs else []
    if reads:
        await restate.gather(meta_read, *reads)
    meta = await meta_read
    if meta is None or meta.incarnation != batch.incarnation:
        return ReportReply(open=False)  # closed (or a closed namesake's pump): nothing is read again
    check_batch(ctx, meta, batch.refs)  # refused before anything is written, the link included
    # The link first, the ranks after: the order of the writes the release before journaled.
    if batch.listen is not None or batch.left:
        ctx.set(PUMP_LINK, PumpLink(awakeable=batch.listen, left=batch.left), serde=LINK)
    await rank_refs(ctx, meta, batch.refs, reads)
    return ReportReply(open=True)


# See decision 20 (its docstring is what Restate's UI shows).
async def on_settle(ctx: restate.ObjectContext, batch: SettleBatch) -> None:
    """A direct child's settlement (its run sent it), or an earlier release's pump's batch, ranked
    as `report` ranks a pump's; one arriving after the close releases the store its run filled
    instead."""
    meta = await ctx.get(RECORD, serde=META)
    if meta is None or meta.incarnation != batch.incarnation:
        # Closed (or a closed namesake's child): a late settlement must not resurrect the group,
        # and whatever store it filled has nobody left to read it.
        for release in mode_for(batch.mode).late_releases(batch):
            release.send(ctx)
        return
    check_batch(ctx, meta, batch.refs)
    await rank_refs(ctx, meta, batch.refs)


# See decision 83 (its docstring is what Restate's UI shows).
async def on_wait(ctx: restate.ObjectContext, req: WaitRequest, settings: GroupSettings) -> WaitReply:
    """A caller's read of the ranks from ``consumed + 1``: those recorded, or, if none is yet, its
    wakes registered for the next ranks (and guarded), which `rank_refs` resolves."""
    meta = await open_meta(ctx, req.child_count, req.incarnation)
    # A plain await asks for the rank it serves, or a window of ranks to read ahead (decisions 96,
    # 134): the next await reads the group again (decision 32). A combinator's run asks for all.
    limit = WAIT_REFS if isinstance(req.at_most, msgspec.UnsetType) else max(1, min(req.at_most, WAIT_REFS))
    # Decision 65: a paged group reads its counter here, then at most two rank pages and a few
    # slices' keys; never the fence. A flat group's counter is in its record.
    recorded = await ranks_for(meta.incarnation).read(ctx, meta)
    if recorded.count > req.consumed or not req.wakes:
        # ADR: read rank consumed + 1 out of state first, and only otherwise wait. A request without
        # wakes waits on nothing here: its caller holds the next rank's wake already (the open
        # registered it, decision 32), or read the rank ahead (decision 134: it is held), so it is
        # answered now, with nothing if nothing is ranked.
        refs = await recorded.serve(ctx, req.consumed, limit)
        return WaitReply(refs=refs, mode=meta.mode, incarnation=meta.incarnation)
    registered = meta.waiting(req.consumed, req.wakes)
    ctx.set(RECORD, msgspec.structs.replace(meta, waiters=[*meta.waiters, *registered]), serde=META)
    await guard_waiters(ctx, meta, registered, settings)  # decision 83
    return WaitReply(refs=[], mode=meta.mode, incarnation=meta.incarnation)


async def rank_refs(
    ctx: restate.ObjectContext, meta: GroupMeta, refs: list[Ref], reads: list[Any] | None = None
) -> None:
    """Rank each settled child in order, record it and wake its waiter: one durable handler step,
    whichever entry (a report, a settle) brought it and whatever the group's layout.

    ADR: rank assignment, rank readability and the wake are one journal step; a child already
    ranked is skipped (idempotent on the child: one terminal, one rank, however often it is sent).
    Every ref names a child of the group: its callers refused the batch otherwise (`check_batch`).
    A paged group (decision 65) reads and writes only its counter with the last page's tail and the
    reporting slices' entries: ``reads`` are its layout's `prefetch`, if the caller issued them.
    """
    if not refs:
        return
    ranks = ranks_for(meta.incarnation)
    if reads is None:
        reads = ranks.prefetch(ctx, refs)
        if reads:
            await restate.gather(*reads)
    ranked, woken = await ranks.rank(ctx, meta, refs, reads)
    # The record is written when it holds new ranks, or when a waiter it lists is woken.
    changed = ranked is not None or any(waiter.rank in woken for waiter in meta.waiters)
    meta = ranked or meta
    for rank, ref in woken.items():
        # The first rank carries when the group opened: the time to it is a span's and a metric's.
        opened = (meta.opened_at_ms or None) if rank == 1 else None
        logs.event(
            "group.ranked", ctx, group_key=ctx.key(), rank=rank, position=ref.position, opened_at_ms=opened
        )
    if changed:
        ctx.set(RECORD, msgspec.structs.replace(meta, waiters=wake_waiters(ctx, meta, woken)), serde=META)


def check_batch(ctx: restate.ObjectContext, meta: GroupMeta, refs: list[Ref]) -> None:
    """Refuse a batch naming no child of the group, whole, before anything of it is written."""
    for ref in refs:
        if not 0 <= ref.position < meta.child_count:
            raise InvalidSettlement(
                "settlement names no child of this group",
                group_key=ctx.key(),
                position=ref.position,
                replay_key=ref.replay_key,
            )


def wake_waiters(ctx: restate.ObjectContext, meta: GroupMeta, woken: dict[int, Ref]) -> list[Waiter]:
    """Resolve the waiters of the ranks in ``woken``; the waiters left."""
    waiting = []
    for waiter in meta.waiters:
        if waiter.rank not in woken:
            waiting.append(waiter)
            continue
        # The small outcome rides along; the state keeps only the reference.
        reply = WaitReply(refs=[woken[waiter.rank]], mode=meta.mode, incarnation=meta.incarnation)
        ctx.resolve_awakeable(waiter.awakeable, reply, serde=REPLY)
        logs.event("group.woken", ctx, group_key=ctx.key(), rank=waiter.rank)
    return waiting
