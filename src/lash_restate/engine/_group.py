"""`LashGroup`, keyed by the group key: the single writer of one group's ranks.

ADR, "Restate satisfaction: the group virtual object is the rank authority". State: ``meta`` (the
small hot `GroupMeta`: rank order, waiters, openers, incarnation, settlement mode), ``fence`` (the
recorded `GroupShape`, read only by open, reads of past ranks and a direct close), the invocation
ids a `Cancel` needs and, for a pumped group recorded now, how to reach its pump at the close (``pump``).
Payload bytes never enter it.

Decision 61: a group recorded now settles through one pump whatever its width; a group a release
before recorded (direct or pumped) goes on as it did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import msgspec
import restate
from restate.serde import BytesSerde

from .. import logs
from ..contract import (
    Call,
    ChildUnroutable,
    Err,
    GroupNotOpen,
    GroupShape,
    InvalidInput,
    LashError,
    LoserPolicy,
    RuntimeEffectEnvelope,
    check_child_count,
    effective_disposition,
)
from ._calls import cancelled, opened_plan
from ._errors import HANDLER_RETRY, NOT_FOUND, client_errors, terminal_errors, terminal_status
from ._messages import (
    CallerEnded,
    ChildrenFailed,
    CloseRequest,
    MissedChildren,
    OpenReply,
    OpenRequest,
    OpenRequestSerde,
    OperatorClose,
    OperatorClosed,
    OperatorRedispatch,
    OperatorRedispatched,
    PartedOpen,
    PumpParts,
    PumpReport,
    Reclaim,
    Ref,
    ReportReply,
    RunEnded,
    RunsWatch,
    SettleBatch,
    WaitReply,
    WaitRequest,
    WatchedRun,
    decode,
)
from ._mode import (
    INVOCATIONS,
    PUMP_SLICE,
    REDISPATCHED,
    Dispatched,
    mode_for,
    position_of,
    redispatch_staged,
    slice_key,
)
from ._pages import PAGE_FROM, PAGED, Ranked, check_position, paged, read_ranked, write_keys
from ._records import (
    ENDS,
    ENVELOPE,
    LINK,
    META,
    MILLIS,
    MISSED,
    OPENER_ENDS,
    POSITIONS,
    PUMP_LINK,
    RECLAIM_AT,
    SAVERS,
    SAVES,
    SHAPE,
    STRINGS,
    GroupMeta,
    MsgspecSerde,
    Opener,
    OpenerEnd,
    PumpLink,
    SettlementMode,
    Waiter,
    missed_key,
)
from ._routes import (
    GROUP,
    GROUP_CALLER_ENDED,
    GROUP_CLOSE,
    GROUP_HELD,
    GROUP_HOLD,
    GROUP_MISSED,
    GROUP_OPEN,
    GROUP_OPEN_PARTS,
    GROUP_OPERATOR_CLOSE,
    GROUP_OPERATOR_REDISPATCH,
    GROUP_RECLAIM,
    GROUP_REPORT,
    GROUP_RUN_ENDED,
    GROUP_SAVED,
    GROUP_SETTLE,
    GROUP_WAIT,
    GROUP_WATCH,
    GROUP_WATCH_RUNS,
    PUMP_FORGET,
    PUMP_RUN_PARTS,
    named,
    pump_key,
)
from ._routing import Routing, replaying

__all__ = ["group_object"]

_REPLY: MsgspecSerde[WaitReply] = MsgspecSerde(WaitReply)
# Decision 36: a wait serves at most this many recorded ranks; the caller reads on with the next wait,
# so a wide group's reply (and the caller's journal entry) stays bounded whatever the group's width.
WAIT_REFS = 1024
_OPENED: MsgspecSerde[OpenReply] = MsgspecSerde(OpenReply)
_RAW = BytesSerde()  # an attached caller's answer is not read, whatever it is
_LISTENED = b"true"  # what a listening pump's awakeable is resolved with (the value is not read)
# Decision 78: how long an orphaned group is kept, as Restate keeps a completed invocation's end.
ORPHAN_RETENTION = timedelta(days=1)
# Decision 74: how long after a dispatch its watch starts; a group closed sooner never runs one.
WATCH_AFTER = timedelta(seconds=1)
# The group's state key holding its watches' invocation ids, which its close cancels (decision 74).
WATCHES = "watches"


@dataclass(frozen=True)
class GroupSettings:
    """What an endpoint sets for its groups: where a group is pumped (decision 20) and paged
    (decision 65), how its children are routed (decision 37), how long an orphan is kept (decision 78)."""

    batch_from: int
    routing: Routing
    page_from: int
    orphan_retention: timedelta


_F = TypeVar("_F", bound=Callable[..., Any])


def _told_by(body: Callable[..., Any]) -> Callable[[_F], _F]:
    """Give a bound handler its body's docstring: Restate publishes it as the handler's description."""

    def described(handler: _F) -> _F:
        handler.__doc__ = body.__doc__
        return handler

    return described


def group_object(
    batch_from: int,
    routing: Routing,
    *,
    page_from: int = PAGE_FROM,
    orphan_retention: timedelta = ORPHAN_RETENTION,
    metadata: dict[str, str] | None = None,
) -> restate.VirtualObject:
    """`LashGroup`; a group of ``batch_from`` children or more settles through a pump (decision 20),
    and a pumped group of ``page_from`` children or more keeps its ranks in pages (decision 65). A
    group nobody can resume is closed ``orphan_retention`` after it was orphaned (decision 78).

    A first open is routed here, where the children run, with ``routing`` (decision 37).
    """
    group = restate.VirtualObject(named(GROUP), invocation_retry_policy=HANDLER_RETRY, metadata=metadata)
    settings = GroupSettings(batch_from, routing, page_from, orphan_retention)

    # Reads children in either format (decision 46); this release writes format 1.
    @group.handler(name=GROUP_OPEN.handler, ingress_private=True, input_serde=OpenRequestSerde())
    @_told_by(on_open)
    async def open(ctx: restate.ObjectContext, req: OpenRequest) -> None:
        await on_open(ctx, req, settings)

    @group.handler(name=GROUP_OPEN_PARTS.handler, ingress_private=True, state_preload=False)
    @_told_by(on_open_parts)
    async def open_parts(ctx: restate.ObjectContext, req: PartedOpen) -> None:
        await on_open_parts(ctx, req)

    @group.handler(name=GROUP_REPORT.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @_told_by(on_report)
    async def report(ctx: restate.ObjectContext, batch: PumpReport) -> ReportReply:
        return await on_report(ctx, batch)

    @group.handler(name=GROUP_SETTLE.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @_told_by(on_settle)
    async def settle(ctx: restate.ObjectContext, batch: SettleBatch) -> None:
        await on_settle(ctx, batch)

    @group.handler(name=GROUP_WAIT.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @_told_by(on_wait)
    async def wait(ctx: restate.ObjectContext, req: WaitRequest) -> WaitReply:
        return await on_wait(ctx, req)

    @group.handler(name=GROUP_CLOSE.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @_told_by(on_close)
    async def close(ctx: restate.ObjectContext, req: CloseRequest) -> None:
        await on_close(ctx, req)

    @group.handler(name=GROUP_OPERATOR_CLOSE.handler, state_preload=False)
    @client_errors  # called through the ingress only: what it answers is for a client
    @_told_by(on_operator_close)
    async def operator_close(ctx: restate.ObjectContext, req: OperatorClose) -> OperatorClosed:
        return await on_operator_close(ctx, req)

    @group.handler(name=GROUP_WATCH.handler, kind="shared", ingress_private=True)
    @_told_by(on_watch)
    async def watch(ctx: restate.ObjectSharedContext, ended: CallerEnded) -> None:
        await on_watch(ctx, ended)

    @group.handler(name=GROUP_CALLER_ENDED.handler, ingress_private=True, state_preload=False)
    @_told_by(on_caller_ended)
    async def caller_ended(ctx: restate.ObjectContext, ended: CallerEnded) -> None:
        await on_caller_ended(ctx, ended, settings)

    @group.handler(name=GROUP_RECLAIM.handler, ingress_private=True, state_preload=False)
    @_told_by(on_reclaim)
    async def reclaim(ctx: restate.ObjectContext, req: Reclaim) -> None:
        await on_reclaim(ctx, req, settings)

    @group.handler(name=GROUP_SAVED.handler, ingress_private=True, state_preload=False)
    @_told_by(on_saved)
    async def saved(ctx: restate.ObjectContext, saver: CallerEnded) -> None:
        await on_saved(ctx, saver)

    @group.handler(name=GROUP_HOLD.handler, kind="shared", ingress_private=True)
    @_told_by(on_hold)
    async def hold(ctx: restate.ObjectSharedContext, saver: CallerEnded) -> None:
        await on_hold(ctx, saver)

    @group.handler(name=GROUP_HELD.handler, ingress_private=True, state_preload=False)
    @_told_by(on_held)
    async def held(ctx: restate.ObjectContext, ended: CallerEnded) -> None:
        await on_held(ctx, ended)

    @group.handler(name=GROUP_MISSED.handler, ingress_private=True, state_preload=False)
    @_told_by(on_missed)
    async def missed(ctx: restate.ObjectContext, req: MissedChildren) -> None:
        await on_missed(ctx, req)

    @group.handler(name=GROUP_OPERATOR_REDISPATCH.handler, state_preload=False)
    @client_errors  # called through the ingress only: what it answers is for a client
    @_told_by(on_operator_redispatch)
    async def operator_redispatch(
        ctx: restate.ObjectContext, req: OperatorRedispatch
    ) -> OperatorRedispatched:
        return await on_operator_redispatch(ctx, req, settings)

    @group.handler(name=GROUP_WATCH_RUNS.handler, kind="shared", ingress_private=True)
    @_told_by(on_watch_runs)
    async def watch_runs(ctx: restate.ObjectSharedContext, req: RunsWatch) -> None:
        await on_watch_runs(ctx, req)

    @group.handler(name=GROUP_RUN_ENDED.handler, ingress_private=True, state_preload=False)
    @_told_by(on_run_ended)
    async def run_ended(ctx: restate.ObjectContext, ended: RunEnded) -> None:
        await on_run_ended(ctx, ended)

    del open, open_parts, report, settle, wait, close, operator_close, watch, caller_ended, hold, held
    del missed, operator_redispatch, watch_runs, run_ended, reclaim, saved
    return group


async def on_open(ctx: restate.ObjectContext, req: OpenRequest, settings: GroupSettings) -> None:
    """Record (or fence a reopen of) the group and dispatch its children; answer on ``reply_to``.

    The opener sends this and awaits its awakeable (decision 25), so its own cancellation never
    reaches this handler: a group whose children were dispatched always records how to cancel
    them. The answer goes out before the awaits that follow, so the opener resumes at once.

    Decision 61: a group with a call child, and every group of ``batch_from`` children or more,
    settles through one pump that awaits each child where it runs and releases its store when
    the close resolves its awakeable; a narrower group of tools, timers and events settles
    directly, each child by itself (decision 20).
    """
    meta = await ctx.get("meta", serde=META)
    try:
        meta, children = await _record(
            ctx, meta, req, settings.batch_from, settings.page_from, settings.routing
        )
    except LashError as error:
        ctx.reject_awakeable(req.reply_to, error.to_wire(), terminal_status(error))
        return
    handles: list[Dispatched] = []
    watched: list[WatchedRun] = []
    if children:
        # Decided here, so that a pump's first step is its first call (decision 66).
        handles = mode_for(meta.mode).dispatch(ctx, meta, children, opened_plan(settings.routing, children))
    reply = OpenReply(reopened=not children, incarnation=meta.incarnation)
    ctx.resolve_awakeable(req.reply_to, reply, serde=_OPENED)
    # What follows is off the opener's path: it has its answer.
    if children:  # cancels need these: one per child, or the one pump (decisions 4, 61)
        ids = [await d.handle.invocation_id() for d in handles]
        ctx.set(INVOCATIONS, ids, serde=STRINGS)
        watched = [WatchedRun(invocation=i, positions=d.positions) for i, d in zip(ids, handles, strict=True)]
        meta = msgspec.structs.replace(meta, opened_at_ms=int(await ctx.time() * 1000))
    await _note_opener(ctx, meta, req.caller, changed=bool(children))
    if not children:
        # After everything a format-1 open journals, so a reopen in flight when the code was
        # replaced in place replays its journal as a prefix of this one (decision 48).
        watched = await _redispatch(ctx, meta, req, settings.routing)
    # Last, for the same reason: watched until they end (decisions 74, 78).
    await _watch(ctx, meta, watched, _callers(meta, req.caller))


async def on_open_parts(ctx: restate.ObjectContext, req: PartedOpen) -> None:
    """`open` for a group too large for one message (decision 65): its opener staged the children,
    one part per slice, with the pumps keyed by ``req.stage``, each of which routed its part.

    A first open records the group under that incarnation, paged, and sends its pump `run_parts`,
    in one handler run; a refusal releases the parts staged. A reopen (decision 48) hands each
    staged part holding an unsettled child to its slice's `redispatch`, as a reopen of a group
    opened in one message does, and releases the others.
    """
    meta = await ctx.get("meta", serde=META)
    staged = [
        slice_key(ctx.key(), req.stage, first) for first in range(0, req.parts * PUMP_SLICE, PUMP_SLICE)
    ]
    first = meta is None
    try:
        if meta is not None:
            recorded = await ctx.get("fence", serde=SHAPE)
            assert recorded is not None  # written with meta, cleared with it
            recorded.fence_reopen(req.shape, ctx.key())
            logs.event("group.reopened", ctx, group_key=ctx.key())
        elif req.reopen_only:
            raise GroupNotOpen.not_recorded(group_key=ctx.key())
        elif not req.stage.startswith(PAGED) or req.parts != -(-req.shape.child_count // PUMP_SLICE):
            raise InvalidInput("an open in parts names no staged parts of this group")
        else:
            meta = _recorded(ctx, req.shape, req.wakes, req.stage, SettlementMode.PUMPED, parts=req.parts)
    except LashError as error:
        _release_staged(ctx, staged)
        ctx.reject_awakeable(req.reply_to, error.to_wire(), terminal_status(error))
        return
    assert meta is not None
    pump = None
    redispatched: list[Dispatched] = []
    if first:
        run = PumpParts(group_key=ctx.key(), incarnation=meta.incarnation, first=0, count=req.parts)
        pump = PUMP_RUN_PARTS.send(ctx, pump_key(ctx.key(), meta.incarnation), run)
    elif staged and paged(meta):  # a group opened in parts is paged (`_recorded` below)
        settled = await Ranked.settled(ctx, meta)
        slices = [k for k in range(req.parts) if _unsettled_in(k, settled, meta.child_count)]
        _release_staged(ctx, [key for k, key in enumerate(staged) if k not in slices])
        redispatched = redispatch_staged(ctx, meta, req.stage, slices)
    else:
        _release_staged(ctx, staged)
    ctx.resolve_awakeable(
        req.reply_to, OpenReply(reopened=not first, incarnation=meta.incarnation), serde=_OPENED
    )
    watched: list[WatchedRun] = []
    if pump is not None:  # a Cancel cancels the group's pump, which cancels its calls (decision 35)
        pump_id = await pump.invocation_id()
        ctx.set(INVOCATIONS, [pump_id], serde=STRINGS)
        meta = msgspec.structs.replace(meta, opened_at_ms=int(await ctx.time() * 1000))
        watched = [WatchedRun(invocation=pump_id)]
    watched += await _note_redispatched(ctx, redispatched)
    await _note_opener(ctx, meta, req.caller, changed=first)
    await _watch(ctx, meta, watched, _callers(meta, req.caller))  # last (decisions 74, 78)


async def on_report(ctx: restate.ObjectContext, batch: PumpReport) -> ReportReply:
    """A pump's settlements (decision 61), ranked as `settle` ranks them; answers whether the group
    is still open, so a pump whose group closed releases its store and stops."""
    # Decision 65: a paged group's report (its incarnation says so) reads all it needs at once.
    pages = batch.incarnation.startswith(PAGED) and bool(batch.refs)
    meta_read: Any = ctx.get("meta", serde=META)
    reads = Ranked.prefetch(ctx, batch.refs) if pages else []
    if reads:
        await restate.gather(meta_read, *reads)
    meta = await meta_read
    if meta is None or meta.incarnation != batch.incarnation:
        return ReportReply(open=False)  # closed (or a closed namesake's pump): nothing is read again
    _check_batch(ctx, meta, batch.refs)  # refused before anything is written, the link included
    # The link first, the ranks after: the order of the writes the release before journaled.
    if batch.listen is not None or batch.left:
        ctx.set(PUMP_LINK, PumpLink(awakeable=batch.listen, left=batch.left), serde=LINK)
    await _rank(ctx, meta, batch.refs, reads)
    return ReportReply(open=True)


async def on_settle(ctx: restate.ObjectContext, batch: SettleBatch) -> None:
    meta = await ctx.get("meta", serde=META)
    if meta is None or meta.incarnation != batch.incarnation:
        # Closed (or a closed namesake's child): a late settlement must not resurrect the group,
        # and whatever store it filled has nobody left to read it.
        for release in mode_for(batch.mode).late_releases(batch):
            release.send(ctx)
        return
    _check_batch(ctx, meta, batch.refs)
    await _rank(ctx, meta, batch.refs)


async def on_wait(ctx: restate.ObjectContext, req: WaitRequest) -> WaitReply:
    meta = await _open_meta(ctx, req.child_count)
    if paged(meta):
        # Decision 65: the counter, at most two rank pages and a few slices' keys; never the fence.
        ranked = await read_ranked(ctx)
        if ranked.counter > req.consumed or not req.wakes:
            refs = await Ranked.serve(ctx, ranked, req.consumed, WAIT_REFS)
            return WaitReply(refs=refs, mode=meta.mode, incarnation=meta.incarnation)
    elif meta.counter > req.consumed or not req.wakes:
        # ADR: read rank consumed + 1 out of state first, and only otherwise wait.
        fence = await ctx.get("fence", serde=SHAPE)
        assert fence is not None
        served = meta.positions(req.consumed, WAIT_REFS)
        refs = [Ref(position=p, replay_key=fence.replay_keys[p]) for p in served]
        return WaitReply(refs=refs, mode=meta.mode, incarnation=meta.incarnation)
    waiters = [*meta.waiters, *meta.waiting(req.consumed, req.wakes)]
    ctx.set("meta", msgspec.structs.replace(meta, waiters=waiters), serde=META)
    return WaitReply(refs=[], mode=meta.mode, incarnation=meta.incarnation)


async def on_close(ctx: restate.ObjectContext, req: CloseRequest) -> None:
    meta = await ctx.get("meta", serde=META)
    if meta is None:
        return  # ADR: close is idempotent, and so is the delete
    check_child_count(meta.child_count, req.child_count, group_key=ctx.key())
    effective = effective_disposition(meta.disposition, req.disposition, group_key=ctx.key())
    await _close(ctx, meta, effective)


async def on_operator_close(ctx: restate.ObjectContext, req: OperatorClose) -> OperatorClosed:
    """The operator's close (decision 45): a caller's close, nothing else, reached through the ingress.

    It can only close: it records no rank and settles nothing. It closes only the incarnation the
    operator read through the admin API (which is the capability: the ingress does not show it),
    and only if no opener arrived since they looked. Narrowing only, like any close.
    """
    meta = await ctx.get("meta", serde=META)
    if meta is None:
        return OperatorClosed(closed=False)  # idempotent: not open (closed already, or never)
    if meta.incarnation != req.incarnation:
        return OperatorClosed(closed=False, refused="the group was closed and opened again since")
    if len(meta.openers) != req.openers:
        return OperatorClosed(closed=False, refused="the group was reopened since: look at it again")
    requested = LoserPolicy.CANCEL if req.cancel else None
    effective = effective_disposition(meta.disposition, requested, group_key=ctx.key())
    cancelled = await _close(ctx, meta, effective)
    logs.event("group.operator_closed", ctx, group_key=ctx.key())
    return OperatorClosed(closed=True, disposition=effective, cancelled=cancelled)


async def on_watch(ctx: restate.ObjectSharedContext, ended: CallerEnded) -> None:
    """Wait for an opener's invocation to end, however it ends, then report how to the writer."""
    try:
        await ctx.attach_invocation(ended.caller)
        failed = False
    except restate.TerminalError:
        # Failed, killed or cancelled; or this watch was cancelled by the group's close, in which
        # case the report finds the incarnation gone and changes nothing.
        failed = True
    GROUP_CALLER_ENDED.send(ctx, ctx.key(), msgspec.structs.replace(ended, failed=failed))


async def on_caller_ended(ctx: restate.ObjectContext, ended: CallerEnded, settings: GroupSettings) -> None:
    """ADR: the declared disposition applies even when the caller never reaches its close.

    Decision 13: once every opener of a group that declared `Cancel` has ended without closing,
    and the latest of them ended in failure (or was killed or cancelled), its unsettled children
    are cancelled; they still take ranks (as `Cancelled`) for a resumer. An opener that returned
    normally has parked a continuation: the losers run on, and the group stays open for whoever
    resumes it.
    """
    meta = await ctx.get("meta", serde=META)
    if meta is None or meta.incarnation != ended.incarnation:
        return  # closed already (or a namesake): nothing is left to apply
    after = meta.opener_ended(ended.caller, ended.failed)
    cancel = after.severed and meta.disposition is LoserPolicy.CANCEL
    cancels = await mode_for(meta.mode).to_cancel(ctx, meta) if cancel else []  # reads first
    ctx.set("meta", after, serde=META)
    if cancel:
        logs.event("group.caller_gone_cancel", ctx, group_key=ctx.key())
    _cancel(ctx, cancels, meta)
    if after.severed and not meta.severed and not await _saved(ctx):
        await _reclaim_later(ctx, after, settings.orphan_retention)  # orphaned now: nobody can resume it


async def on_reclaim(ctx: restate.ObjectContext, req: Reclaim, settings: GroupSettings) -> None:
    """Decision 78: close a group nobody can resume, a retention after it was orphaned.

    Nobody can resume it when every opener has ended, the latest in failure (killed, cancelled),
    and none saved its handle (a saved handle may be resumed, however long from now). Once its
    children have all settled (or were cancelled: a `Cancel` group's were), it is closed as its
    caller's close would; while any still runs, it is looked at again a retention later.
    """
    meta = await ctx.get("meta", serde=META)
    if meta is None or meta.incarnation != req.incarnation:
        return  # closed already (or a namesake)
    if await ctx.get(RECLAIM_AT, serde=MILLIS) != req.at:
        return  # a later orphaning scheduled its own
    if not meta.severed or await _saved(ctx):
        ctx.clear(RECLAIM_AT)
        return  # reopened since, or a caller saved its handle: someone may resume it
    settled = (await read_ranked(ctx)).counter if paged(meta) else meta.counter
    if settled < meta.child_count:
        await _reclaim_later(ctx, meta, settings.orphan_retention)  # its children still run
        return
    watches = await ctx.get(WATCHES, serde=STRINGS) or []
    ctx.set(WATCHES, [w for w in watches if w != ctx.request().id], serde=STRINGS)  # not itself
    await _close(ctx, meta, meta.disposition)
    logs.event("group.reclaimed", ctx, group_key=ctx.key())


async def on_saved(ctx: restate.ObjectContext, saver: CallerEnded) -> None:
    """Decision 78: a caller saved its handle. Recorded at once, so the group is never reclaimed
    (whoever holds the handle may resume it), and held from here: a hold the caller sent itself
    would be killed with it, and could then say nothing of how it ended.
    """
    meta = await ctx.get("meta", serde=META)
    if meta is None or (saver.incarnation and saver.incarnation != meta.incarnation):
        return  # closed already, or saved from a closed namesake
    savers = await ctx.get(SAVERS, serde=STRINGS) or []
    if saver.caller in savers:
        return
    ctx.set(SAVERS, [*savers, saver.caller], serde=STRINGS)
    if meta.disposition is not LoserPolicy.CANCEL:  # a Cancel group watches its openers already
        held = CallerEnded(caller=saver.caller, incarnation=meta.incarnation)
        await _keep_watch(ctx, GROUP_HOLD.send(ctx, ctx.key(), held))


async def on_hold(ctx: restate.ObjectSharedContext, saver: CallerEnded) -> None:
    """Decision 45: a caller saved its handle; wait for it to end, then report how to the writer.

    A `Cancel` group's openers are watched already (decision 13), so it needs no second watch.
    """
    meta = await ctx.get("meta", serde=META)
    if meta is None or meta.disposition is LoserPolicy.CANCEL:
        return
    if saver.incarnation and saver.incarnation != meta.incarnation:
        return  # saved from a closed namesake
    ends = await ctx.get(OPENER_ENDS, serde=ENDS) or []
    if any(end.caller == saver.caller for end in ends):
        return  # its end is recorded already
    try:
        await ctx.attach_invocation(saver.caller, serde=_RAW)
        failed = False
    except restate.TerminalError:
        failed = True  # failed, killed or cancelled
    report = CallerEnded(caller=saver.caller, incarnation=meta.incarnation, failed=failed)
    GROUP_HELD.send(ctx, ctx.key(), report)


async def on_held(ctx: restate.ObjectContext, ended: CallerEnded) -> None:
    """Record how a saver ended, under a key of its own: `GroupMeta` keeps its format-1 bytes."""
    meta = await ctx.get("meta", serde=META)
    if meta is None or meta.incarnation != ended.incarnation:
        return  # closed already (or a namesake): nothing to record
    ends = [end for end in await ctx.get(OPENER_ENDS, serde=ENDS) or [] if end.caller != ended.caller]
    ctx.set(OPENER_ENDS, [*ends, OpenerEnd(caller=ended.caller, failed=ended.failed)], serde=ENDS)


async def on_missed(ctx: restate.ObjectContext, req: MissedChildren) -> None:
    """ADR: a child with no runner is a routing fact, never an outcome. Its run ended with none
    (the terminal 404); the group keeps the child, so inspection lists it and the operator's
    `operator_redispatch` can run it again once a deployment routes it, as a reopen would."""
    meta = await ctx.get("meta", serde=META)
    if meta is None or (req.incarnation and meta.incarnation != req.incarnation):
        return  # closed (or a closed namesake's child): nobody will rank it
    fence = await ctx.get("fence", serde=SHAPE)
    assert fence is not None  # written with meta, cleared with it
    known = await ctx.get(MISSED, serde=POSITIONS) or []
    added = [c for c in req.children if _is_child(fence, c) and position_of(c) not in known]
    for child in added:
        ctx.set(missed_key(position_of(child)), child, serde=ENVELOPE)
    if added:
        ctx.set(MISSED, sorted([*known, *map(position_of, added)]), serde=POSITIONS)
        logs.event("group.missed", ctx, group_key=ctx.key(), children=len(added))


async def on_operator_redispatch(
    ctx: restate.ObjectContext, req: OperatorRedispatch, settings: GroupSettings
) -> OperatorRedispatched:
    """The operator's re-dispatch: run again the children whose runner was missing, without a
    reopen (the Restate form of the reference host's drain, which runs them once it can).

    It dispatches as a reopen does, so a re-run child reaches its rank by the same code as a
    first run's; a child this endpoint still cannot route stays listed as missed.
    """
    meta = await ctx.get("meta", serde=META)
    if meta is None:
        return OperatorRedispatched(refused="the group is not open")
    if meta.incarnation != req.incarnation:
        return OperatorRedispatched(refused="the group was closed and opened again since")
    positions = await ctx.get(MISSED, serde=POSITIONS) or []
    reads: list[Any] = [ctx.get(missed_key(position), serde=ENVELOPE) for position in positions]
    if reads:
        await restate.gather(*reads)
    children = [child for read in reads if (child := await read) is not None]
    dispatched, watched = await _dispatch_again(ctx, meta, children, settings.routing)
    await _watch(ctx, meta, watched, [])
    left = len(positions) - len(dispatched)
    return OperatorRedispatched(dispatched=len(dispatched), unroutable=left)


async def on_watch_runs(ctx: restate.ObjectSharedContext, req: RunsWatch) -> None:
    """Decision 74: wait for each invocation the group dispatched to end; one that ended in failure
    (an operator killed it, say) without settling its children is reported to the writer.

    A run that ends normally has settled its children (or reported them missed); a 404 is a
    miss (or a run Restate no longer remembers); a cancellation comes from a close, or is
    answered by the run itself (a Cancel loser still settles, as cancelled).
    """
    attached = {ctx.attach_invocation(run.invocation, serde=_RAW): run for run in req.runs}
    openers = req.callers or []  # UNSET: an earlier release's watch, of runs alone
    callers = {ctx.attach_invocation(caller, serde=_RAW): caller for caller in openers}
    pending = [*attached, *callers]
    while pending:
        done, pending = await restate.wait_completed(*pending)
        for future in done:
            if future in callers:  # decision 78: as a `Cancel` group's `watch` reports its openers
                try:
                    await future
                    failed = False
                except restate.TerminalError:
                    failed = True  # failed, killed or cancelled
                end = CallerEnded(caller=callers[future], incarnation=req.incarnation, failed=failed)
                GROUP_CALLER_ENDED.send(ctx, ctx.key(), end)
                continue
            try:
                await future
            except restate.TerminalError as error:
                if error.status_code == NOT_FOUND or cancelled(error):
                    continue
                ended = RunEnded(
                    incarnation=req.incarnation,
                    positions=attached[future].positions,
                    message=error.message,
                    code=str(error.status_code),
                )
                GROUP_RUN_ENDED.send(ctx, ctx.key(), ended)


async def on_run_ended(ctx: restate.ObjectContext, ended: RunEnded) -> None:
    """Decision 74: a run the group dispatched ended in failure. Its children that hold no rank
    settle with that failure (a killed run's: 409 `killed`, as a killed callee answers its
    caller), each through the store that keeps its outcome, so each takes its rank and the
    waiting caller is woken; one whose outcome was stored before the kill settles with it."""
    meta = await ctx.get("meta", serde=META)
    if meta is None or meta.incarnation != ended.incarnation:
        return  # closed already (or a namesake's run): nobody will read it
    settled = await Ranked.settled(ctx, meta) if paged(meta) else meta.settled()
    asked = range(meta.child_count) if ended.positions is None else ended.positions
    positions = [p for p in asked if p < meta.child_count and p not in settled]
    if ended.positions is None and meta.mode is SettlementMode.PUMPED:
        # The group's pump is gone: it listens for no close, so the close releases by `forget`.
        link = await ctx.get(PUMP_LINK, serde=LINK)
        if link is not None and not link.left:
            ctx.set(PUMP_LINK, msgspec.structs.replace(link, left=True), serde=LINK)
    if not positions:
        return
    fence = await ctx.get("fence", serde=SHAPE)
    assert fence is not None  # written with meta, cleared with it
    failed = ChildrenFailed(
        group_key=ctx.key(),
        incarnation=meta.incarnation,
        positions=positions,
        replay_keys=[fence.replay_keys[p] for p in positions],
        outcome=Err(message=ended.message, code=ended.code),
    )
    mode_for(meta.mode).fail(ctx, meta, failed)
    logs.event("group.run_ended", ctx, group_key=ctx.key(), children=len(positions), code=ended.code)


async def _close(ctx: restate.ObjectContext, meta: GroupMeta, effective: LoserPolicy) -> int:
    """The ADR's close under ``effective``; how many cancels it sent.

    Decision 61: a pumped group's pump that reported an awakeable and still listens on it is released
    through it, with no invocation; any other pumped group's through its `forget`.
    """
    mode = mode_for(meta.mode)
    # Every read before the first effect (decision 22): the closing caller's own cancellation
    # surfaces only at an await, so a close is never cut off half done.
    cancels = await mode.to_cancel(ctx, meta) if effective is LoserPolicy.CANCEL else []
    settled = (await read_ranked(ctx)).counter if paged(meta) else meta.counter
    if meta.mode is SettlementMode.PUMPED and settled == meta.child_count:
        cancels = []  # every child settled: none is left to cancel (its pump is the invocation listed)
    releases = await mode.releases(ctx, meta)
    link = None
    if meta.mode is SettlementMode.PUMPED:
        link = await ctx.get(PUMP_LINK, serde=LINK)
    watches = await ctx.get(WATCHES, serde=STRINGS) or []
    # One cancel per unsettled child, not awaiting termination (ADR, "Close deletes…").
    _cancel(ctx, cancels, meta)
    if link is not None and link.awakeable is not None and not link.left and not cancels:
        # The pump listens: resolved, it releases its store (and its further slices') and stops.
        # Not when this close cancels (decision 65): a pump that saw its awakeable before its own
        # cancellation would return and leave its pending calls running (calls outlive their caller);
        # cancelled, it waits for their Cancelled terminals, finds the group closed at its report and
        # releases then, and the forget queued behind its run finds nothing left.
        ctx.resolve_awakeable(link.awakeable, _LISTENED, serde=_RAW)
        releases = []  # a pumped group's one release is its pump's forget
    for release in releases:
        release.send(ctx)
    for waiter in meta.waiters:
        gone = GroupNotOpen.closed_while_awaiting(group_key=ctx.key())
        ctx.reject_awakeable(waiter.awakeable, gone.to_wire(), NOT_FOUND)
    for watch in watches:  # scheduled (a quick group's) or attached: nothing is left to settle
        ctx.cancel_invocation(watch)
    for watcher in (o.watcher for o in meta.openers if o.watcher is not None and not o.ended):
        # Closed: nothing is left to apply when the callers end, so their watches end now
        # instead of staying attached for the callers' whole lives.
        ctx.cancel_invocation(watcher)
    # ADR: retirement is group-atomic; close deletes the object's state.
    ctx.clear_all()
    logs.event(
        "group.closed",
        ctx,
        group_key=ctx.key(),
        disposition=effective.value,
        settled=settled,
        opened_at_ms=meta.opened_at_ms or None,  # a group's life, for its span and metrics
    )
    return len(cancels)


async def _record(
    ctx: restate.ObjectContext,
    meta: GroupMeta | None,
    req: OpenRequest,
    batch_from: int,
    page_from: int,
    routing: Routing,
) -> tuple[GroupMeta, list[RuntimeEffectEnvelope]]:
    """The group's record after this open, and the children to dispatch (none on a reopen).

    Decision 61: pumped from ``batch_from`` children on, or with a call child whatever the width;
    a pumped group of ``page_from`` children or more keeps its ranks in pages (decision 65).
    """
    if meta is not None:
        # ADR: a reopen is fenced on shape, resolves only what it dispatches and refuses nothing;
        # on Restate the children are engine-owned invocations already, so it dispatches nothing.
        recorded = await ctx.get("fence", serde=SHAPE)
        assert recorded is not None  # written with meta, cleared with it
        recorded.fence_reopen(req.shape, ctx.key())
        logs.event("group.reopened", ctx, group_key=ctx.key())
        return meta, []
    if req.reopen_only:
        # Decision 41: a resume of a group that was closed (or never recorded) must not start it over.
        raise GroupNotOpen.not_recorded(group_key=ctx.key())
    children = [decode(child, RuntimeEffectEnvelope) for child in req.children]
    calls = any(isinstance(child.command, Call) for child in children)
    mode = SettlementMode.PUMPED if calls or len(children) >= batch_from else SettlementMode.DIRECT
    # A caller of this release refused an open too large to send; a request that arrived may still
    # hold children that would not fit the messages that dispatch them: refused, recording nothing.
    mode_for(mode).check_fits(ctx.key(), children, [len(child) for child in req.children])
    # Decision 50: decided once, by the execution that records the group. An open that suspends after
    # answering and resumes on a process that routes differently replays past this point: asked
    # again, it would refuse a group it already recorded and fail its replay for ever.
    miss = None
    if not replaying(ctx):
        miss = await routing.first_refusal(children)
    if miss is not None:
        # ADR: a first open with a child nobody can run records nothing, group row included.
        raise ChildUnroutable.no_executor(
            miss.what, group_key=ctx.key(), position=miss.position, replay_key=miss.replay_key
        )
    # Decision 65: a pumped group wider than one slice keeps its ranks in pages.
    pages = mode is SettlementMode.PUMPED and req.shape.child_count >= page_from
    # Decision 78: an incarnation ending in SAVES tells its openers that the group records saves.
    incarnation = f"{PAGED if pages else ''}{ctx.uuid()}{SAVES}"
    return _recorded(ctx, req.shape, req.wakes, incarnation, mode), children


def _recorded(
    ctx: restate.ObjectContext,
    shape: GroupShape,
    wakes: list[str],
    incarnation: str,
    mode: SettlementMode,
    **logged: Any,
) -> GroupMeta:
    """Record a first open: its meta, its fence and (a paged group) its slices' keys; log it, with
    ``logged`` besides what every open logs."""
    meta = GroupMeta(
        child_count=shape.child_count,
        wake=shape.wake,
        disposition=shape.disposition,
        incarnation=incarnation,
        mode=mode,
    )
    meta = msgspec.structs.replace(meta, waiters=meta.waiting(0, wakes))
    # Recorded and dispatched in one handler run: a group is never recorded without its children.
    ctx.set("fence", shape, serde=SHAPE)
    ctx.set("meta", meta, serde=META)
    if paged(meta):
        write_keys(ctx, shape)
    logs.event(
        "group.opened",
        ctx,
        group_key=ctx.key(),
        children=shape.child_count,
        wake=shape.wake.value,
        disposition=shape.disposition.value,
        mode=meta.mode.value,
        **logged,
    )
    return meta


async def _redispatch(
    ctx: restate.ObjectContext, meta: GroupMeta, req: OpenRequest, routing: Routing
) -> list[WatchedRun]:
    """ADR: a reopen resolves only what it dispatches and refuses nothing (decision 48).

    A child whose runner was missing ended without an outcome (the Restate host's terminal 404); once the
    endpoint can route it again, a reopen dispatches it again, as the reference host's reopen does.
    Every unsettled child it can route is dispatched: the dispatch queues behind whatever still
    runs it, and runs the child only if that left no outcome, so no child runs twice.
    """
    positions = range(meta.child_count)
    children = [decode(req.children[position], RuntimeEffectEnvelope) for position in positions]
    return (await _dispatch_again(ctx, meta, children, routing))[1]


async def _dispatch_again(
    ctx: restate.ObjectContext, meta: GroupMeta, children: list[RuntimeEffectEnvelope], routing: Routing
) -> tuple[list[int], list[WatchedRun]]:
    """Dispatch again those of ``children`` that hold no rank and this endpoint can route, through
    the mode's `redispatch`; the positions dispatched, and the runs to watch. A reopen and the
    operator's re-dispatch both come here (decision 73): no child list is re-run by two codes.

    The dispatch queues behind whatever still runs a child, and runs it only if that left no
    outcome, so no child runs twice. A child dispatched is no longer kept as missed.
    """
    settled = await Ranked.settled(ctx, meta) if paged(meta) else meta.settled()
    routable = [c for c in children if position_of(c) not in settled and routing.routes(c)]
    if not routable:
        return [], []
    watched = await _note_redispatched(ctx, mode_for(meta.mode).redispatch(ctx, meta, routable))
    logs.event("group.redispatched", ctx, group_key=ctx.key(), children=len(routable))
    # After everything the release before journaled here (decision 48's in-place replay).
    dispatched = [position_of(c) for c in routable]
    missed = await ctx.get(MISSED, serde=POSITIONS)
    if missed:
        for position in set(missed).intersection(dispatched):
            ctx.clear(missed_key(position))
        left = [position for position in missed if position not in dispatched]
        if left:
            ctx.set(MISSED, left, serde=POSITIONS)
        else:
            ctx.clear(MISSED)
    return dispatched, watched


def _is_child(fence: GroupShape, child: RuntimeEffectEnvelope) -> bool:
    """Whether ``child`` is the one this group recorded at its position (not a namesake's)."""
    position = position_of(child)
    return position < fence.child_count and fence.replay_keys[position] == child.replay_key


async def _note_redispatched(ctx: restate.ObjectContext, dispatched: list[Dispatched]) -> list[WatchedRun]:
    """Keep the invocations a reopen re-dispatched, which a Cancel cancels too (decision 48); what
    to watch of them (decision 74)."""
    if not dispatched:
        return []
    known = await ctx.get(REDISPATCHED, serde=STRINGS) or []
    ids = [await d.handle.invocation_id() for d in dispatched]
    ctx.set(REDISPATCHED, [*known, *ids], serde=STRINGS)
    return [WatchedRun(invocation=i, positions=d.positions) for i, d in zip(ids, dispatched, strict=True)]


async def _watch(
    ctx: restate.ObjectContext, meta: GroupMeta, runs: list[WatchedRun], callers: list[str]
) -> None:
    """Decision 74: attach to ``runs`` until each ends; one killed settles its unsettled children.
    And to ``callers`` (decision 78): how each ends is recorded, as a `Cancel` group's watch does.

    The watch starts WATCH_AFTER from now, so a group closed sooner (a race of quick calls) never
    runs one: its close cancels it while it is scheduled. Restate keeps a run's end for longer than
    that, so a kill before the watch starts is seen when it attaches.
    """
    if runs or callers:
        watch = RunsWatch(incarnation=meta.incarnation, runs=runs, callers=callers or msgspec.UNSET)
        await _keep_watch(ctx, GROUP_WATCH_RUNS.send(ctx, ctx.key(), watch, delay=WATCH_AFTER))


async def _keep_watch(ctx: restate.ObjectContext, handle: restate.SendHandle) -> None:
    """Keep the id of an invocation the group sent itself, which its close cancels (decision 74)."""
    known = await ctx.get(WATCHES, serde=STRINGS) or []
    ctx.set(WATCHES, [*known, await handle.invocation_id()], serde=STRINGS)


def _callers(meta: GroupMeta, caller: str | None) -> list[str]:
    """The opener to watch (decision 78): a `Cancel` group's are watched already (decision 13)."""
    return [caller] if caller is not None and meta.disposition is not LoserPolicy.CANCEL else []


async def _reclaim_later(ctx: restate.ObjectContext, meta: GroupMeta, retention: timedelta) -> None:
    """Decision 78: have `reclaim` look at this orphaned group once ``retention`` has passed."""
    at = int(await ctx.time() * 1000 + retention.total_seconds() * 1000)
    handle = GROUP_RECLAIM.send(ctx, ctx.key(), Reclaim(incarnation=meta.incarnation, at=at), delay=retention)
    ctx.set(RECLAIM_AT, at, serde=MILLIS)
    # Kept with the watches, which a close cancels: a group closed meanwhile leaves nothing scheduled.
    await _keep_watch(ctx, handle)


async def _saved(ctx: restate.ObjectContext) -> bool:
    """Whether a caller saved the group's handle: recorded at the save (decision 78), or, for a saver
    an earlier release held, when it ended (decision 45)."""
    savers = await ctx.get(SAVERS, serde=STRINGS)
    ends = await ctx.get(OPENER_ENDS, serde=ENDS)
    return bool(savers) or bool(ends)


def _unsettled_in(slice_index: int, settled: set[int], child_count: int) -> bool:
    """Whether a child of slice ``slice_index`` holds no rank yet."""
    first = slice_index * PUMP_SLICE
    return any(p not in settled for p in range(first, min(first + PUMP_SLICE, child_count)))


async def _rank(
    ctx: restate.ObjectContext, meta: GroupMeta, refs: list[Ref], reads: list[Any] | None = None
) -> None:
    """Rank each settled child in order, record it and wake its waiter: one durable handler step,
    whichever entry (a report, a settle) brought it and whatever the group's layout.

    ADR: rank assignment, rank readability and the wake are one journal step; a child already
    ranked is skipped (idempotent on the child: one terminal, one rank, however often it is sent).
    Every ref names a child of the group: its callers refused the batch otherwise (`_check_batch`).
    A paged group (decision 65) reads and writes only its counter with the last page's tail and the
    reporting slices' entries: ``reads`` are `Ranked.prefetch`'s, if the caller issued them.
    """
    if not refs:
        return
    if paged(meta):
        if not reads:
            reads = Ranked.prefetch(ctx, refs)
            await restate.gather(*reads)
        woken = await Ranked.rank(ctx, meta, refs, reads)
        changed = any(waiter.rank in woken for waiter in meta.waiters)
    else:
        woken, fresh = _order(meta, refs)
        meta, changed = meta.ranked(fresh), bool(fresh)
    for rank, ref in woken.items():
        # The first rank carries when the group opened: the time to it is a span's and a metric's.
        opened = (meta.opened_at_ms or None) if rank == 1 else None
        logs.event(
            "group.ranked", ctx, group_key=ctx.key(), rank=rank, position=ref.position, opened_at_ms=opened
        )
    if changed:
        ctx.set("meta", msgspec.structs.replace(meta, waiters=_wake(ctx, meta, woken)), serde=META)


def _check_batch(ctx: restate.ObjectContext, meta: GroupMeta, refs: list[Ref]) -> None:
    """Refuse a batch naming no child of the group, whole, before anything of it is written."""
    for ref in refs:
        check_position(meta, ref, ctx.key())


def _order(meta: GroupMeta, refs: list[Ref]) -> tuple[dict[int, Ref], list[int]]:
    """A group ordered in ``meta``: the ranks ``refs`` take (rank -> ref) and their positions, in order."""
    woken: dict[int, Ref] = {}
    settled = meta.settled()  # once per batch: a lookup per ref, not a scan of every rank (decision 36)
    fresh: list[int] = []
    for ref in refs:
        if ref.position in settled:
            continue
        settled.add(ref.position)
        fresh.append(ref.position)
        # (1) strictly monotonic; (2) appends above every consumed rank
        woken[meta.counter + len(fresh)] = ref
    return woken, fresh


def _wake(ctx: restate.ObjectContext, meta: GroupMeta, woken: dict[int, Ref]) -> list[Waiter]:
    """Resolve the waiters of the ranks in ``woken``; the waiters left."""
    waiting = []
    for waiter in meta.waiters:
        if waiter.rank not in woken:
            waiting.append(waiter)
            continue
        # The small outcome rides along; the state keeps only the reference.
        reply = WaitReply(refs=[woken[waiter.rank]], mode=meta.mode, incarnation=meta.incarnation)
        ctx.resolve_awakeable(waiter.awakeable, reply, serde=_REPLY)
        logs.event("group.woken", ctx, group_key=ctx.key(), rank=waiter.rank)
    return waiting


def _release_staged(ctx: restate.ObjectContext, staged: list[str]) -> None:
    """The parts an open in parts staged, which no run will read (decision 65)."""
    for key in staged:
        PUMP_FORGET.send(ctx, key, None)


def _cancel(ctx: restate.ObjectContext, invocations: list[str], meta: GroupMeta) -> None:
    for invocation in invocations:
        ctx.cancel_invocation(invocation)
    if invocations:
        logs.event(
            "group.cancelled", ctx, group_key=ctx.key(), cancelled=len(invocations), mode=meta.mode.value
        )


async def _note_opener(
    ctx: restate.ObjectContext, meta: GroupMeta, caller: str | None, changed: bool
) -> None:
    """Record a new opener in ``meta`` (writing it if anything ``changed``); under a declared
    `Cancel`, watch for its end (decision 13). RunToCompletion losers run on whatever happens to it."""
    if caller is not None and all(opener.caller != caller for opener in meta.openers):
        watcher = None
        if meta.disposition is LoserPolicy.CANCEL:
            watch = CallerEnded(caller=caller, incarnation=meta.incarnation)
            watcher = await GROUP_WATCH.send(ctx, ctx.key(), watch).invocation_id()
        meta = msgspec.structs.replace(meta, openers=[*meta.openers, Opener(caller=caller, watcher=watcher)])
        changed = True
    if changed:
        ctx.set("meta", meta, serde=META)


async def _open_meta(ctx: restate.ObjectContext, child_count: int) -> GroupMeta:
    meta = await ctx.get("meta", serde=META)
    if meta is None:
        raise GroupNotOpen.not_recorded(group_key=ctx.key())
    check_child_count(meta.child_count, child_count, group_key=ctx.key())
    return meta
