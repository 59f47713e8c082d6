"""`LashPump`'s run: call every child of its slice (and one pump per further slice, as a tree), and
each time it wakes, store what settled and report it to the group in one batch (decisions 20, 35, 61,
65). Also what a reopen, an open in parts and a killed run hand a pump."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import timedelta
from typing import Any

import msgspec
import restate

from ... import logs
from ...contract import Cancelled, ChildUnroutable
from ..child._calls import VIA_CALL
from ..child._calls import cancelled as cancelled_call
from ..child._routing import Routing, replaying
from ..group._group_watch import report_run_ended
from ..group._mode import PUMP_SLICE, position_of, pump_store, slice_key
from ..wire._errors import CANCELLED_STATUS, is_cancellation
from ..wire._formats import stored_outcome
from ..wire._incarnation import bound_of
from ..wire._messages import (
    ChildrenFailed,
    PumpAwait,
    PumpParts,
    PumpReport,
    Ref,
    RunEnded,
    StagedPart,
)
from ..wire._records import BYTES, ENVELOPES, STRINGS
from ..wire._routes import (
    PUMP_RUN2,
    PUMP_RUN_PARTS,
)

# Tests hold a pump at these names (`plan_all`, `dispatch_all`, `_runs_first`, `release_store_and_slices`,
# replaced in this module by tests/engine/held_slices_app.py and test_open_in_parts.py): keep them.
from ._pump_calls import SLICE, Awaited, Queue, call_outcome, dispatch_all, executed_outcome, plan_all
from ._pump_common import (
    SLICES,
    add_ref,
    covered_slices,
    fan_out,
    further_slice_key,
    group_is_open,
    release_store_and_slices,
    report_batch,
    report_noting_cancel,
    slice_ended,
    split_plan,
    subtrees,
)

__all__ = [
    "LINGER",
    "RAN",
    "STAGED",
    "await_and_report",
    "on_fail",
    "on_redispatch",
    "on_run2",
    "on_run_parts",
    "on_stage",
    "on_staged",
]

# Decision 61: how long the group's pump, every child settled, keeps listening for the close before it
# reports that it left (its store then waits for the close's forget). A combinator closes within
# milliseconds of its last rank; a parked group's pump does not stay suspended for the park's length.
LINGER = timedelta(seconds=10)
# Decision 65: a slice's children of a group opened in parts, kept here by `stage` until `run_parts`.
STAGED = "staged"
# Decision 125: set as a pump's run of a slice with a child it runs through `LashChild` begins, so
# that a run of the same pump made again (Restate's `restart-as-new` of the completed run) finds the
# slice run, and runs nothing again.
RAN = "ran"


async def _runs_first(
    ctx: restate.ObjectContext, group_key: str, noted: Awaitable[Any] | None = None
) -> bool:
    """Whether this is the pump's first run of its slice, noted if it is (``noted``: the read of the
    note, made already). Another was made again from outside lash: running the children again would
    replace the outcomes the group serves."""
    read: Awaitable[Any] = noted if noted is not None else ctx.get(RAN, serde=BYTES)
    if await read is not None:
        logs.logger.warning(
            "pump %s of group %s ran its children already: this run of it, made again, runs nothing",
            ctx.key(),
            group_key,
            extra={"event": "pump.run_again"},
        )
        return False
    ctx.set(RAN, b"1", serde=BYTES)
    return True


async def on_run2(ctx: restate.ObjectContext, req: PumpAwait, routing: Routing) -> None:
    """A pumped group's pump (the one its open sent, or a further slice's): call each child of its
    slice as the open planned it, start the pumps of the further slices (at most `PUMP_FANOUT`,
    each starting its own subtree's), then `await_and_report` what settles until the group's close
    releases it."""
    bound = bound_of(req.incarnation)
    # Decision 81: a bounded group's one pump runs every child, so that one run holds the bound.
    kept = PUMP_SLICE if bound is None else len(req.children)
    own, further = req.children[:kept], req.children[kept:]
    # The open's plan (decision 66), which every `run2` carries; one that does not fit its children
    # (never sent) is planned here instead, as a re-dispatch is, rather than trusted.
    decided = req.plan if isinstance(req.plan, list) and len(req.plan) == len(req.children) else None
    own_plan = decided[:kept] if decided is not None else None
    planned = await plan_all(ctx, own, routing, own_plan)
    # Decision 125: a slice with a child run through `LashChild` is run once. A call child is answered
    # from its first run by its idempotency key: a check would only delay a call race's first call.
    if any(how != VIA_CALL for _, how in planned) and not await _runs_first(ctx, req.group_key):
        return
    queue = Queue(planned, bound)
    awaited = queue.start(ctx, req.incarnation, 0)
    slices: list[str] = []
    if further:
        # Decision 65: a tree of pumps. The further slices are split into at most PUMP_FANOUT runs of
        # whole slices, each handed to the pump of its first slice, which keeps that slice and splits
        # the rest the same way: no pump awaits more than PUMP_SLICE children and PUMP_FANOUT pumps,
        # whatever the width. Called, as `run` calls its slices (decision 35), so that cancelling
        # this pump cancels them, and they theirs; each releases its subtree's stores by `forget`.
        parts = subtrees(further)
        # Each further pump gets its part of the open's plan.
        plans: list[list[str] | msgspec.UnsetType] = [msgspec.UNSET] * len(parts)
        if decided is not None:
            plans = [*split_plan(decided[kept:], parts)]
        for part, part_plan in zip(parts, plans, strict=True):
            key = further_slice_key(req, part[0])
            slices.append(key)
            run = PumpAwait(
                group_key=req.group_key,
                incarnation=req.incarnation,
                children=part,
                listens=False,
                plan=part_plan,
            )
            covers = (position_of(part[0]), position_of(part[-1]) + 1)
            awaited[PUMP_RUN2.call(ctx, key, run)] = Awaited(SLICE, -1, key, covers=covers)
        ctx.set(SLICES, slices, serde=STRINGS)
    closing = ctx.awakeable(serde=BYTES) if req.listens else None
    await await_and_report(ctx, req.group_key, req.incarnation, awaited, closing, slices, queue)


# See decisions 65, 84 (its docstring is what Restate's UI shows).
async def on_stage(ctx: restate.ObjectContext, part: StagedPart, routing: Routing) -> None:
    """Keep one slice's children of a group opened in parts, and say whether they all route.

    ADR: a first open resolves all N before it records the group, and a reopen refuses nothing.
    Which this is, only the group knows: the part is kept either way, and a child that does not
    route is refused here, which the opener carries to the group. A refused first open releases
    every part; so does a reopen, which runs again only the children the group kept as missed.
    """
    ctx.set(STAGED, part.children, serde=ENVELOPES)
    miss = None
    if not replaying(ctx):  # decision 50: asked once; a replay's routing may have changed since
        miss = await routing.first_refusal(part.children)
    if miss is not None:
        child = part.children[miss.position]
        raise ChildUnroutable.no_executor(
            miss.what, group_key=part.group_key, position=position_of(child), replay_key=child.replay_key
        )


# See decision 126 (its docstring is what Restate's UI shows).
async def on_staged(ctx: restate.ObjectSharedContext) -> bool:
    """Whether this slice's children are staged here, as a first open in parts asks of its first
    slice's pump before it records the group. Only the state's keys are read: a staged part may be
    megabytes."""
    return STAGED in await ctx.state_keys()


# See decisions 65, 110 (its docstring is what Restate's UI shows).
async def on_run_parts(ctx: restate.ObjectContext, req: PumpParts, routing: Routing) -> None:
    """`run2` for a group opened in parts: this slice's children are staged here.

    Cancelled (a `Cancel` close) before it called its further slices' pumps, it releases the parts
    staged with them: none will run, and no close's `forget` reaches a pump nobody called."""
    try:
        # Both read before either is awaited: one round trip (a pump's state is not sent with it).
        noted, staged = ctx.get(RAN, serde=BYTES), ctx.get(STAGED, serde=ENVELOPES)
        if not await _runs_first(ctx, req.group_key, noted):
            return
        own = await staged or []
        ctx.clear(STAGED)  # read: a replay reads it from the journal, so the state is let go now
        awaited = await dispatch_all(ctx, own, routing, req.incarnation)
    except restate.TerminalError:
        covers = ((req.first + 1) * PUMP_SLICE, (req.first + req.count) * PUMP_SLICE)
        release_store_and_slices(ctx, covered_slices(req.group_key, req.incarnation, covers))
        raise
    del own  # dispatched: not held while this pump waits, as a wide group's pumps all do (decision 94)
    slices: list[str] = []
    for offset, count in fan_out(req.count - 1):
        first = req.first + 1 + offset
        key = slice_key(req.group_key, req.incarnation, first * PUMP_SLICE)
        slices.append(key)
        run = PumpParts(
            group_key=req.group_key, incarnation=req.incarnation, first=first, count=count, listens=False
        )
        covers = (first * PUMP_SLICE, (first + count) * PUMP_SLICE)  # the group clips the last
        awaited[PUMP_RUN_PARTS.call(ctx, key, run)] = Awaited(SLICE, -1, key, covers=covers)
    if slices:
        ctx.set(SLICES, slices, serde=STRINGS)
    closing = ctx.awakeable(serde=BYTES) if req.listens else None
    await await_and_report(ctx, req.group_key, req.incarnation, awaited, closing, slices)


# See decisions 48, 95 (its docstring is what Restate's UI shows).
async def on_redispatch(ctx: restate.ObjectContext, req: PumpAwait, routing: Routing) -> None:
    """A reopen's (or an operator's) re-dispatch of this slice's children that the group kept as
    missed (every unsettled one, for a group the baseline opened), each called as `run2` calls its
    children (planned here: no open sent a plan) and reported as `run2` reports: a re-run child
    reaches its rank by the same code as a first run's, whatever the group's layout.

    Queued behind this key's run (both exclusive), which ends only once its children have: a
    child runs again only if no outcome is stored for it (its runner was missing). It asks the
    group first: a run releases its store once the group closes, and a closed group needs
    nothing re-run.
    """
    answer, interrupted = await report_noting_cancel(
        ctx, req.group_key, PumpReport(incarnation=req.incarnation)
    )
    if not answer.open:
        return
    if interrupted and not replaying(ctx):
        # Cancelled while the group answered (a `Cancel` group whose caller is gone cancels its runs):
        # ended as a cancel at any other await here ends it, so its watch settles the children
        # `Cancelled` rather than this run calling them (the SDK delivers a cancel once). Not on a
        # replay: an earlier release went on here, and what it journaled next replays (decision 140).
        raise restate.TerminalError("cancelled", status_code=CANCELLED_STATUS)
    stored: list[Any] = [ctx.get(pump_store(position_of(child)), serde=BYTES) for child in req.children]
    # The further slices this key's run called: a close heard of here releases them with this store,
    # which drops the list the close's own release would read (it waits behind this run).
    held: Any = ctx.get(SLICES, serde=STRINGS)
    await restate.gather(*stored, held)
    missing = [child for child, read in zip(req.children, stored, strict=True) if await read is None]
    queue = Queue(await plan_all(ctx, missing, routing, None), bound_of(req.incarnation))
    awaited = queue.start(ctx, req.incarnation, 0)
    await await_and_report(ctx, req.group_key, req.incarnation, awaited, None, await held or [], queue)


# See decision 74 (its docstring is what Restate's UI shows).
async def on_fail(ctx: restate.ObjectContext, req: ChildrenFailed) -> None:
    """The run that awaited these children of this slice ended in failure (an operator killed it,
    and its calls with it). Each settles with that failure, stored here as a run stores an outcome
    and reported as a run reports; one whose outcome was stored before the kill settles with it.
    Asks the group first: a closed group's store is released. A report answered closed releases
    nothing here: the close's `forget` queues behind this fail on this key."""
    # Decision 102: the group sent this fail before its close's forget, to the same key.
    if not await group_is_open(ctx, req.group_key, req.incarnation):
        return
    reads: list[Any] = [ctx.get(pump_store(position), serde=BYTES) for position in req.positions]
    if reads:
        await restate.gather(*reads)
    failure = stored_outcome(req.outcome)
    refs: list[Ref] = []
    inline = 0
    for position, replay_key, read in zip(req.positions, req.replay_keys, reads, strict=True):
        outcome = await read
        if outcome is None:
            outcome = failure
            ctx.set(pump_store(position), outcome, serde=BYTES)
        inline = add_ref(refs, position, replay_key, outcome, inline)
    await report_batch(ctx, req.group_key, PumpReport(incarnation=req.incarnation, refs=refs))


async def await_and_report(
    ctx: restate.ObjectContext,
    group_key: str,
    incarnation: str,
    awaited: dict[Any, Awaited],
    closing: tuple[str, Any] | None,
    slices: list[str],
    queue: Queue | None = None,
) -> None:
    """Await ``awaited``; each time some finish, store what settled and report it to the group in one
    call; stop once the group is closed (its close resolves ``closing``, or a report finds it closed).
    A child of ``queue`` is called each time one settles, as its bound allows (decision 81).

    Its phases, and the flags that mark them: *running* (each wake stores and reports a batch;
    ``listen`` rides the first report, then the group keeps it); *closed* (the store is released:
    resolved ``closing``, the pump returns, unless a bounded group's children are yet to start,
    which start and run on; a report answered closed, it goes on awaiting what is pending, unreported,
    so a `Cancel` close's cancellation still reaches those calls); *cancelled* (a
    cancel came: the calls still pending end `Cancelled` and rank as such, a queue's unstarted
    children too); then, every child settled, *lingering* (it listens for the close a while, unless a
    child ``missed`` its runner) and *left* (it tells the group its store stays, for the close's
    `forget`). ``stored``: something was stored, so there is a store to release."""
    pending: list[Any] = list(awaited)
    listen = closing[0] if closing is not None else None
    stored = cancelled = closed = missed = False

    async def cancel_queue() -> None:
        """Cancelled: the children never started settle Cancelled too, as if cancelled at their start."""
        nonlocal stored, listen, closed
        dropped = queue.drop() if queue is not None else []
        if not dropped or closed:
            return
        refs: list[Ref] = []
        inline = 0
        cancel = stored_outcome(Cancelled())
        for child in dropped:
            ctx.set(pump_store(position_of(child)), cancel, serde=BYTES)
            inline = add_ref(refs, position_of(child), child.replay_key, cancel, inline)
        stored = True
        report = PumpReport(incarnation=incarnation, refs=refs, listen=listen)
        listen = None
        if not (await report_batch(ctx, group_key, report)).open:
            release_store_and_slices(ctx, slices)
            closed = True

    while pending:
        # Once closed, the close's awakeable is resolved: watched, it would end every wait at once.
        watched = pending if closing is None or closed else [*pending, closing[1]]
        try:
            done, _ = await restate.wait_completed(*watched)
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise
            # Cancelled (a Cancel close, or its caller ended): the SDK has cancelled the calls still
            # pending, and their Cancelled terminals still rank (ADR, "Close deletes…").
            cancelled = True
            await cancel_queue()
            continue
        if closing is not None and not closed and closing[1] in done:
            release_store_and_slices(ctx, slices)
            if queue is None or not queue.waiting:
                return
            # Decision 81: closed (RunToCompletion), with children yet to start: they start as slots
            # free and run on, as they would have had they started before the close.
            closed = True
        pending = [future for future in pending if future not in done]
        if queue is not None and not cancelled:
            # Their slots are free: the next children start now, after a close too (RunToCompletion).
            started = queue.start(ctx, incarnation, len(pending))
            awaited.update(started)
            pending += started
        refs: list[Ref] = []
        inline = 0
        for future in done:
            what = awaited.pop(future, None)  # settled: its future is not held any longer (decision 94)
            if what is None:
                continue  # the close's awakeable (a bounded group's close, above)
            if what.kind == SLICE:
                failure = await slice_ended(future, group_key)
                if failure is not None and await _slice_failed(
                    ctx, group_key, incarnation, what, failure, slices, closed
                ):  # the cancel came meanwhile
                    cancelled = True
                    await cancel_queue()
                continue
            if closed:
                continue  # nobody reads it: the group is closed, and this pump's store released
            if what.kind == VIA_CALL:
                outcome: bytes | None = await call_outcome(future, what.target)
            else:
                outcome = await executed_outcome(future)
            if outcome is None:
                missed = True  # a routing miss: no terminal is synthesized, the rank stays unallocated
                continue
            # Stored before the report is sent, so a rank is never readable before its outcome.
            ctx.set(pump_store(what.position), outcome, serde=BYTES)
            stored = True
            inline = add_ref(refs, what.position, what.replay_key, outcome, inline)
        # Let go of the settled futures before the report, which may wait behind the group's other
        # work: a wide group's pumps would otherwise hold every call they settled (decision 94).
        done = watched = []
        if refs:
            report = PumpReport(incarnation=incarnation, refs=refs, listen=listen)
            answer, interrupted = await report_noting_cancel(ctx, group_key, report)
            listen = None  # the group keeps it from the first report on
            if not answer.open:
                # Decision 65: released now, but this pump awaits what is still pending rather than
                # return: calls outlive their caller, so a pump that returned would leave its pending
                # children (and further pumps) beyond the reach of a Cancel close's cancellation,
                # which comes down the tree of calls. Under RunToCompletion they run on, as declared.
                release_store_and_slices(ctx, slices)
                closed = True
            if interrupted:  # the cancel came during the report (decision 81)
                cancelled = True
                await cancel_queue()
    if closed or closing is None or not stored:
        # Released already; or a pump that does not listen (a further slice's, a re-dispatch),
        # released by the pump that called it or the close's `forget`; or nothing stored to release.
        return
    await _linger_or_leave(ctx, group_key, incarnation, closing, slices, cancelled=cancelled, missed=missed)


async def _slice_failed(
    ctx: restate.ObjectContext,
    group_key: str,
    incarnation: str,
    what: Awaited,
    failure: restate.TerminalError,
    slices: list[str],
    closed: bool,
) -> bool:
    """A further slice's pump ended in ``failure`` (killed, say): its subtree's children are settled by
    the group with the failure, through their slices' stores, unless they hold a rank already
    (decision 74). Whether this pump's own cancel came while it reported that."""
    subtree = covered_slices(group_key, incarnation, what.covers)
    if unrecorded := [key for key in subtree if key not in slices]:
        # Ended before it called its own further slices, it recorded none, and the group's repair
        # stores their outcomes there: this pump's release reaches them. Released already (the group
        # closed), it releases them now: nothing will run there, and an open in parts staged their
        # children there.
        if closed:
            release_store_and_slices(ctx, unrecorded)
        else:
            slices.extend(unrecorded)
            ctx.set(SLICES, slices, serde=STRINGS)
    ended = RunEnded(
        incarnation=incarnation,
        positions=list(range(*what.covers)),
        message=failure.message,
        code=str(failure.status_code),
        # Decision 100: cancelled before it called them, as they would have settled.
        cancelled=True if cancelled_call(failure) else msgspec.UNSET,
    )
    return await report_run_ended(ctx, group_key, ended)


async def _linger_or_leave(
    ctx: restate.ObjectContext,
    group_key: str,
    incarnation: str,
    closing: tuple[str, Any],
    slices: list[str],
    *,
    cancelled: bool,
    missed: bool,
) -> None:
    """Every child this pump awaited has ended (settled and stored, or ``missed`` its runner, for a
    re-dispatch to run): release the store at the group's close, or, once the pump stops listening
    for it, tell the group the store stays (its close then sends `forget`)."""
    # A Cancel close does not resolve the awakeable (decision 65): ask whether the group is closed.
    if cancelled and not await group_is_open(ctx, group_key, incarnation):
        release_store_and_slices(ctx, slices)
        return
    # Every child settled: listen for the close a while longer, then tell the group the store stays.
    # Not after a miss: that group waits for a reopen or a drain, whose re-dispatch queues behind this
    # run on this key. A sleep of zero journals the same command, so a run journaled either way replays.
    linger = ctx.sleep(timedelta(0) if missed else LINGER)
    while True:
        try:
            which, _ = await restate.select(closed=closing[1], linger=linger)
            break
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise
            # Every child ended, so a cancel now (an operator's, or a caller gone under `Cancel`) has
            # nothing left to stop here. Listen on: a Cancel close of a group whose children all
            # settled resolves the awakeable; after a miss (not every rank settled) the close does not,
            # and the linger of zero ends this wait instead.
    if which == "closed":
        release_store_and_slices(ctx, slices)
        return
    answer = await report_batch(ctx, group_key, PumpReport(incarnation=incarnation, left=True))
    if not answer.open:
        release_store_and_slices(ctx, slices)
