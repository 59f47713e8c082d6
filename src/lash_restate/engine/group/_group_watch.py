"""What `LashGroup` watches beside its children: its openers (how each ended), its savers, the runs
it dispatched (decision 74), and the clock of a group nobody can resume (decision 78).

Who watches what, and where its end is kept (each report is a `CallerEnded` or a `RunEnded`):

- an opener of a `Cancel` group: a `watch` of its own (`on_watch`, decision 13), reported to
  `caller_ended`, kept in ``meta``'s `Opener`;
- an opener of any other group this release records: the `watch_runs` beside its runs (decision
  78), reported and kept the same way;
- a caller that saved the handle of a group that is not `Cancel`: a `hold` (`on_hold`, decision 45),
  reported to `held`, kept under `OPENER_ENDS`;
- a run the group dispatched (and the settle it answers, and a repair): `watch_runs`
  (`on_watch_runs`, decisions 74, 85, 89), reported to `run_ended` only when it ended without
  settling its children.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import timedelta
from typing import Any

import msgspec
import restate

from ... import logs
from ...contract import Cancelled, Err, LoserPolicy
from ..child._calls import cancelled
from ..wire._errors import CANCELLED_STATUS, MISS_MARK, NOT_FOUND
from ..wire._incarnation import opened_since_baseline
from ..wire._messages import (
    CallerEnded,
    ChildrenFailed,
    Reclaim,
    RunEnded,
    RunsWatch,
    WatchedRun,
    settle_sent,
)
from ..wire._records import (
    BYTES,
    CANCELLED_RUNS,
    ENDS,
    FENCE,
    META,
    MILLIS,
    MISSED,
    OPENER_ENDS,
    POSITIONS,
    RECLAIM_AT,
    RECORD,
    SAVERS,
    SHAPE,
    STRINGS,
    GroupMeta,
    OpenerEnd,
)
from ..wire._routes import (
    GROUP_CALLER_ENDED,
    GROUP_HELD,
    GROUP_HOLD,
    GROUP_RECLAIM,
    GROUP_RUN_ENDED,
    GROUP_WATCH_RUNS,
)
from ._group_close import close_group
from ._group_common import CANCELLED_AT_CLOSE, GroupSettings, cancel_at_close, cancel_runs
from ._mode import mode_for
from ._ranks import ranks_for

__all__ = [
    "ORPHAN_RETENTION",
    "WATCH_AFTER",
    "anybody_saved",
    "is_new_opener",
    "on_caller_ended",
    "on_held",
    "on_hold",
    "on_reclaim",
    "on_run_ended",
    "on_saved",
    "on_watch",
    "on_watch_runs",
    "openers_to_watch",
    "reclaim_later",
    "report_run_ended",
    "send_watch",
    "watch_after",
]

# Decision 78: how long an orphaned group is kept, as Restate keeps a completed invocation's end.
ORPHAN_RETENTION = timedelta(days=1)
# Decision 74: how long after a dispatch its watch starts; a group closed sooner never runs one.
WATCH_AFTER = timedelta(seconds=1)


async def on_watch(ctx: restate.ObjectSharedContext, ended: CallerEnded) -> None:
    """Wait for an opener's invocation to end, however it ends, then report how to the writer."""
    failed = await opener_failed(ctx, ended.caller)
    if failed is None:
        return  # this watch was cancelled (the group's close, or an operator): it says nothing
    GROUP_CALLER_ENDED.send(ctx, ctx.key(), msgspec.structs.replace(ended, failed=failed))


async def opener_failed(ctx: restate.ObjectSharedContext, caller: str) -> bool | None:
    """Whether ``caller``'s invocation ended in failure (failed, killed or cancelled), once it has
    ended; None when this watch was cancelled first. The wait raises this watch's own cancellation
    (the SDK delivers it once), the attach's result the opener's end: no command of its own, so a
    watch an earlier release journaled replays as it was."""
    attached = ctx.attach_invocation(caller, serde=BYTES)  # how it ended, not what it answered
    try:
        await restate.wait_completed(attached)
    except restate.TerminalError:
        return None
    return await _ended_in_failure(attached)


async def _ended_in_failure(attached: Awaitable[Any]) -> bool:
    """Whether an attached invocation, ended, ended in failure (failed, killed or cancelled)."""
    try:
        await attached
    except restate.TerminalError:
        return True
    return False


# See decision 13 (its docstring is what Restate's UI shows).
async def on_caller_ended(ctx: restate.ObjectContext, ended: CallerEnded, settings: GroupSettings) -> None:
    """ADR: the declared disposition applies even when the caller never reaches its close.

    Once every opener of a group that declared `Cancel` has ended without closing, and the latest of
    them ended in failure (or was killed or cancelled), its unsettled children are cancelled; they
    still take ranks (as `Cancelled`) for a resumer. An opener that returned normally has parked a
    continuation: the losers run on, and the group stays open for whoever resumes it. An end that
    leaves a group this release recorded with nobody to resume it (every opener ended, the latest
    in failure, and none saved its handle) schedules its reclaim, a retention later, whatever its
    disposition: every opener's end is watched.
    """
    meta = await ctx.get(RECORD, serde=META)
    if meta is None or meta.incarnation != ended.incarnation:
        return  # closed already (or a namesake): nothing is left to apply
    after = meta.opener_ended(ended.caller, ended.failed)
    cancel = after.severed and meta.disposition is LoserPolicy.CANCEL
    # Reads first. Not `left_to_cancel`: a pump every child of which settled listens on through a
    # cancel (`_linger_or_leave`), so cancelling it changes nothing.
    cancels = await mode_for(meta.mode).to_cancel(ctx, meta) if cancel else []
    ctx.set(RECORD, after, serde=META)
    if cancel:
        logs.event("group.caller_gone_cancel", ctx, group_key=ctx.key())
    cancel_runs(ctx, cancels, meta)
    # Orphaned now: nobody can resume it. Only a group whose savers are recorded (decision 78).
    if (
        after.severed
        and not meta.severed
        and opened_since_baseline(meta.incarnation)
        and not await anybody_saved(ctx)
    ):
        await reclaim_later(ctx, after, settings.orphan_retention)
    if cancel:
        # Decision 98: kept, for a run reported failed later (a resumer may have reopened by then).
        # Last, so a journal this handler wrote before it replays as a prefix of this one.
        ctx.set(CANCELLED_RUNS, [meta.incarnation], serde=STRINGS)


# See decision 78 (its docstring is what Restate's UI shows).
async def on_reclaim(ctx: restate.ObjectContext, req: Reclaim, settings: GroupSettings) -> None:
    """Close a group nobody can resume, a retention after it was orphaned.

    Nobody can resume it when every opener has ended, the latest in failure (killed, cancelled),
    and none saved its handle (a saved handle may be resumed, however long from now). Once its
    children have all settled (or were cancelled: a `Cancel` group's were), it is closed as its
    caller's close would; while any still runs, it is looked at again a retention later.
    """
    meta = await ctx.get(RECORD, serde=META)
    if meta is None or meta.incarnation != req.incarnation:
        return  # closed already (or a namesake)
    if await ctx.get(RECLAIM_AT, serde=MILLIS) != req.at:
        return  # a later orphaning scheduled its own
    if not meta.severed or await anybody_saved(ctx):
        ctx.clear(RECLAIM_AT)
        return  # reopened since, or a caller saved its handle: someone may resume it
    settled = await ranks_for(meta.incarnation).count(ctx, meta)
    watches = await ctx.get(CANCELLED_AT_CLOSE, serde=STRINGS) or []
    pending = [w for w in watches if w != ctx.request().id]  # this reclaim has run: not cancelled at close
    ctx.set(CANCELLED_AT_CLOSE, pending, serde=STRINGS)
    if settled < meta.child_count:
        # A child still runs (or never ends: an event nobody emits, one that missed its runner).
        await reclaim_later(ctx, meta, settings.orphan_retention)
        return
    await close_group(ctx, meta, meta.disposition)
    logs.event("group.reclaimed", ctx, group_key=ctx.key())


# See decision 78 (its docstring is what Restate's UI shows).
async def on_saved(ctx: restate.ObjectContext, saver: CallerEnded) -> None:
    """A caller saved its handle. Recorded at once, so the group is never reclaimed (whoever holds
    the handle may resume it), and held from here: a hold the caller sent itself would be killed
    with it, and could then say nothing of how it ended.
    """
    meta = await ctx.get(RECORD, serde=META)
    # A saver naming no incarnation ("") is taken as this group's: an earlier release sent one for a
    # save after a resume, this one sends one for a save after its own close (decision 140).
    if meta is None or (saver.incarnation and saver.incarnation != meta.incarnation):
        return  # closed already, or saved from a closed namesake
    savers = await ctx.get(SAVERS, serde=STRINGS) or []
    if saver.caller in savers:
        return
    ctx.set(SAVERS, [*savers, saver.caller], serde=STRINGS)
    ctx.clear(RECLAIM_AT)  # saved: never reclaimed (a reclaim already scheduled finds it saved)
    if meta.disposition is not LoserPolicy.CANCEL:  # a Cancel group watches its openers already
        held = CallerEnded(caller=saver.caller, incarnation=meta.incarnation)
        await cancel_at_close(ctx, GROUP_HOLD.send(ctx, ctx.key(), held))


# See decisions 13, 45 (its docstring is what Restate's UI shows).
async def on_hold(ctx: restate.ObjectSharedContext, saver: CallerEnded) -> None:
    """A caller saved its handle; wait for it to end, then report how to the writer.

    A `Cancel` group's openers are watched already, so it needs no second watch.
    """
    meta = await ctx.get(RECORD, serde=META)
    if meta is None or meta.disposition is LoserPolicy.CANCEL:
        return
    if saver.incarnation and saver.incarnation != meta.incarnation:
        return  # saved from a closed namesake
    ends = await ctx.get(OPENER_ENDS, serde=ENDS) or []
    if any(end.caller == saver.caller for end in ends):
        return  # its end is recorded already
    failed = await opener_failed(ctx, saver.caller)
    if failed is None:
        return  # this hold was cancelled (the group's close, or an operator): it says nothing
    report = CallerEnded(caller=saver.caller, incarnation=meta.incarnation, failed=failed)
    GROUP_HELD.send(ctx, ctx.key(), report)


async def on_held(ctx: restate.ObjectContext, ended: CallerEnded) -> None:
    """Record how a saver ended, under a key of its own: `GroupMeta` keeps its format-1 bytes."""
    meta = await ctx.get(RECORD, serde=META)
    if meta is None or meta.incarnation != ended.incarnation:
        return  # closed already (or a namesake): nothing to record
    ends = [end for end in await ctx.get(OPENER_ENDS, serde=ENDS) or [] if end.caller != ended.caller]
    ctx.set(OPENER_ENDS, [*ends, OpenerEnd(caller=ended.caller, failed=ended.failed)], serde=ENDS)


# How a child settles whose run Restate does not know: a kill or cancel of a run still queued
# (behind its key's other work), an operator's or its group's own, before the watch attached, leaves
# nothing for it to attach to, where a kill of a running one answers `killed` (decision 89). After its
# group cancelled its runs, such a child settles `Cancelled` (decision 98).
GONE = "killed before it ran: Restate does not know its run"


# See decisions 74, 85, 89 (its docstring is what Restate's UI shows).
async def on_watch_runs(ctx: restate.ObjectSharedContext, req: RunsWatch) -> None:
    """Wait for each invocation the group dispatched to end; one that ended in failure (an operator
    killed it, say) without settling its children is reported to the writer.

    A run that ends normally has settled its children (or reported them missed); a 404 marked a miss
    was reported too, an unmarked one is a run Restate does not know (killed while queued: reported
    as such); a cancellation comes from a close, or is answered by the run itself (a Cancel loser
    still settles, as cancelled). A direct child's run (and the group's repair of one,
    `LashChild/fail`) answers the id of the settle it sent, which is watched in turn: an operator
    may kill or cancel it while it waits behind the group's other work, and its child would then
    hold no rank.
    """
    attached = {ctx.attach_invocation(run.invocation, serde=BYTES): run for run in req.runs}
    openers = req.callers or []  # UNSET: an earlier release's watch, of runs alone
    callers = {ctx.attach_invocation(caller, serde=BYTES): caller for caller in openers}
    pending = [*attached, *callers]
    settles: set[Any] = set()  # the settles runs answered they sent, watched as their runs are
    while pending:
        done, pending = await restate.wait_completed(*pending)
        for future in done:
            if future in callers:  # decision 78: as a `Cancel` group's `watch` reports its openers
                failed = await _ended_in_failure(future)
                end = CallerEnded(caller=callers[future], incarnation=req.incarnation, failed=failed)
                GROUP_CALLER_ENDED.send(ctx, ctx.key(), end)
                continue
            try:
                answer = await future
            except restate.TerminalError as error:
                message, code = error.message, str(error.status_code)
                # A run that was running settles its children itself when cancelled, and ends
                # normally: one that ends cancelled was cancelled before it ran (queued behind its
                # key's other work), by an operator or by its group, and settled nothing (decision
                # 97). A settle or a repair ends cancelled only by an operator's hand (decision 92).
                run_cancelled = cancelled(error) and future not in settles and req.repairs is not True
                if error.status_code == NOT_FOUND:
                    if (error.metadata or {}).get(MISS_MARK):
                        continue  # a miss its group heard of, and keeps
                    # A run or a settle Restate does not know: one killed while it was queued is not
                    # kept (decision 89). A miss of an earlier release's run is unmarked, and kept by
                    # the group, so `run_ended` passes over it.
                    message, code = GONE, str(CANCELLED_STATUS)
                positions = attached[future].positions
                ended = RunEnded(
                    incarnation=req.incarnation,
                    positions=positions,
                    message=message,
                    code=code,
                    cancelled=True if run_cancelled else msgspec.UNSET,
                )
                if await report_run_ended(ctx, ctx.key(), ended):
                    return  # this watch was cancelled meanwhile: its group closed (or an operator's)
                continue
            if (settle := settle_sent(answer)) is not None:
                # The settle carries the run's children: if it fails, they are what holds no rank.
                watched = WatchedRun(invocation=settle, positions=attached[future].positions)
                settle_future = ctx.attach_invocation(settle, serde=BYTES)
                attached[settle_future] = watched
                settles.add(settle_future)
                pending.append(settle_future)


async def report_run_ended(
    ctx: restate.ObjectSharedContext | restate.ObjectContext, group_key: str, ended: RunEnded
) -> bool:
    """Tell the group that a run it dispatched ended in failure, and wait until it has heard; whether
    a cancel of this invocation itself came meanwhile (the SDK delivers it once).

    Called, not sent (decision 91): an operator may kill or cancel the report while it waits behind
    the group's other work, and the children it would settle would then hold no rank, so one that
    ends so is made again, as a pump's report is (decision 86).
    """
    _, noted = await GROUP_RUN_ENDED.ask_made_again(ctx, group_key, ended)
    return noted


# See decisions 74, 97, 98 (its docstring is what Restate's UI shows).
async def on_run_ended(ctx: restate.ObjectContext, ended: RunEnded) -> None:
    """A run the group dispatched ended in failure. Its children that hold no rank settle with that
    failure (a killed run's: 409 `killed`, as a killed callee answers its caller), each through the
    store that keeps its outcome, so each takes its rank and the waiting caller is woken; one whose
    outcome was stored before the kill settles with it. As `Cancelled` instead, a run cancelled
    before it ran, or one that ended so after its group cancelled its runs."""
    meta = await ctx.get(RECORD, serde=META)
    if meta is None or meta.incarnation != ended.incarnation:
        return  # closed already (or a namesake's run): nobody will read it
    settled = await ranks_for(meta.incarnation).ranked_positions(ctx, meta)
    missed = await ctx.get(MISSED, serde=POSITIONS)
    kept = set(missed or [])  # a child the group keeps as missed: a miss is never an outcome (ADR)
    asked = range(meta.child_count) if ended.positions is None else ended.positions
    positions = [p for p in asked if p < meta.child_count and p not in settled and p not in kept]
    if ended.positions is None:
        await mode_for(meta.mode).run_gone(ctx)
    if not positions:
        return
    fence = await ctx.get(FENCE, serde=SHAPE)
    assert fence is not None  # written with meta, cleared with it
    # Decision 97: a run cancelled before it ran settles its children as it would have, cancelled;
    # so does a run that ended killed, cancelled or gone (409) after its group cancelled its runs
    # itself (decision 98, a `Cancel` group nobody could resume): one it cancelled while queued,
    # before its watch attached, is a run Restate no longer knows.
    cancelled_by_group = ended.code == str(CANCELLED_STATUS) and await ctx.get(
        CANCELLED_RUNS, serde=STRINGS
    ) == [meta.incarnation]
    if ended.cancelled is True or cancelled_by_group:
        outcome: Cancelled | Err = Cancelled()
    else:
        outcome = Err(message=ended.message, code=ended.code)
    failed = ChildrenFailed(
        group_key=ctx.key(),
        incarnation=meta.incarnation,
        positions=positions,
        replay_keys=[fence.replay_keys[p] for p in positions],
        outcome=outcome,
    )
    sent = mode_for(meta.mode).settle_failed(ctx, meta, failed)
    settled_as = "cancelled" if isinstance(outcome, Cancelled) else "failed"  # a cancel is no run failure
    logs.event(
        "group.run_ended",
        ctx,
        group_key=ctx.key(),
        children=len(positions),
        code=ended.code,
        settled_as=settled_as,
    )
    # Decision 89: this repair is watched as a run is: killed while it waits behind its object's
    # work (or the settle it sends, killed so), its children would hold no rank and tell nobody.
    repairs = [WatchedRun(invocation=await handle.invocation_id(), positions=at) for handle, at in sent]
    await watch_after(ctx, meta, repairs, repairs=True)


async def watch_after(
    ctx: restate.ObjectContext, meta: GroupMeta, runs: list[WatchedRun], *, repairs: bool = False
) -> None:
    """Decision 74: attach to ``runs`` until each ends; one killed settles its unsettled children.
    (An open watches its opener with its runs, through `send_watch`.)

    The watch starts WATCH_AFTER from now, so a group closed sooner (a race of quick calls) never
    runs one: its close cancels it while it is scheduled. Restate keeps a run's end for longer than
    that, so a kill before the watch starts is seen when it attaches.
    """
    if (handle := send_watch(ctx, meta, runs, [], repairs=repairs)) is not None:
        await cancel_at_close(ctx, handle)


def send_watch(
    ctx: restate.ObjectContext,
    meta: GroupMeta,
    runs: list[WatchedRun],
    callers: list[str],
    *,
    repairs: bool = False,
) -> restate.SendHandle | None:
    """`watch_after`'s send, for a handler that keeps its id with a guard's (`guard_waiters`): the
    two ids then come back in one round trip, not one each, on the open's path."""
    if not runs and not callers:
        return None
    watch = RunsWatch(
        incarnation=meta.incarnation,
        runs=runs,
        callers=callers or msgspec.UNSET,
        repairs=True if repairs else msgspec.UNSET,
    )
    return GROUP_WATCH_RUNS.send(ctx, ctx.key(), watch, delay=WATCH_AFTER)


def openers_to_watch(meta: GroupMeta, caller: str | None) -> list[str]:
    """The opener to watch (decision 78), from ``meta`` before it was recorded: a new one only (a
    caller that reopens again is watched already), and none of a `Cancel` group, whose openers are
    watched anyway (decision 13)."""
    new = is_new_opener(meta, caller)
    return [caller] if caller is not None and new and meta.disposition is not LoserPolicy.CANCEL else []


def is_new_opener(meta: GroupMeta, caller: str | None) -> bool:
    """Whether ``caller`` opens the group for the first time, by ``meta`` before it was recorded."""
    return caller is not None and all(opener.caller != caller for opener in meta.openers)


async def reclaim_later(ctx: restate.ObjectContext, meta: GroupMeta, retention: timedelta) -> None:
    """Decision 78: have `reclaim` look at this orphaned group once ``retention`` has passed."""
    at = int(await ctx.time() * 1000 + retention.total_seconds() * 1000)
    handle = GROUP_RECLAIM.send(ctx, ctx.key(), Reclaim(incarnation=meta.incarnation, at=at), delay=retention)
    ctx.set(RECLAIM_AT, at, serde=MILLIS)
    # Kept with the watches, which a close cancels: a group closed meanwhile leaves nothing scheduled.
    await cancel_at_close(ctx, handle)


async def anybody_saved(ctx: restate.ObjectContext) -> bool:
    """Whether a caller saved the group's handle: recorded at the save (decision 78), or, for a saver
    an earlier release held, when it ended (decision 45)."""
    savers = await ctx.get(SAVERS, serde=STRINGS)
    ends = await ctx.get(OPENER_ENDS, serde=ENDS)
    return bool(savers) or bool(ends)
