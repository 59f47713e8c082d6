"""`LashPump`, keyed by group incarnation and key: a wide group's children, and its outcome store.

Decision 20: ``run`` calls every child and, each time it wakes, stores what settled meanwhile and
forwards it to the group in one settle: the single writer then runs once per batch, and while it does,
the next batch gathers. The store is this object's state (``o{position}``), read in bulk by
``outcomes`` and released by one ``forget`` at close.

Decision 35: a pump waits on at most `PUMP_SLICE` children. The group's pump (the one its open
sends) runs the first slice and calls one pump per further slice; each settles its own batches into
the group, which stays the single writer of ranks. Cancelling the group's pump cancels those calls,
and its ``forget`` (queued behind its ``run``, which outlives theirs) releases their stores too.

Decision 61: ``run2`` is the pump of every pumped group `LashGroup/open` records now, and each of its
children's only caller: a call child straight to the user's handler (no `LashChild` invocation in
between, under an idempotency key that names the child), anything else through `LashChild/execute`,
as a plan says: the open's, sent with the children (decision 66), or one the pump journals once. It
reports each batch to `LashGroup/report`, which answers whether the group is still open, and listens
on an awakeable the group's close resolves: then it releases its store and stops, so neither a late
settlement nor a release invocation follows the close.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec
import restate
from restate.serde import BytesSerde

from .. import logs
from ..contract import Call, ChildUnroutable, GroupNotOpen, RuntimeEffectEnvelope
from ._calls import (
    CALL,
    CHILD,
    MISS,
    answered,
    call_arg,
    callee_key,
    cancelled,
    invocation_options,
    plan,
    refused,
)
from ._child import stored_outcome
from ._errors import HANDLER_RETRY, NOT_FOUND, is_cancellation, terminal_errors
from ._messages import (
    BATCH_INLINE_BYTES,
    INLINE_OUTCOME_BYTES,
    ChildrenFailed,
    OutcomesRead,
    PumpAwait,
    PumpParts,
    PumpReport,
    PumpRun,
    Ref,
    ReportReply,
    RunEnded,
    SettleBatch,
    StagedPart,
)
from ._mode import PUMP_FANOUT, PUMP_SLICE, position_of, pump_store, slice_key
from ._records import ENVELOPES, MsgspecSerde, SettlementMode
from ._routes import (
    CHILD_EXECUTE,
    GROUP_REPORT,
    GROUP_RUN_ENDED,
    GROUP_SETTLE,
    PUMP,
    PUMP_FAIL,
    PUMP_FORGET,
    PUMP_OUTCOMES,
    PUMP_REDISPATCH,
    PUMP_REDISPATCH_STAGED,
    PUMP_REDRIVE,
    PUMP_REDRIVE2,
    PUMP_RUN,
    PUMP_RUN2,
    PUMP_RUN_PARTS,
    PUMP_STAGE,
    described_by,
    group_of_pump,
    named,
)
from ._routing import Routing, replaying

__all__ = ["LINGER", "OUTCOMES_PER_READ", "STAGED", "fan_out", "pump_object", "split_plan", "subtrees"]

_BYTES = BytesSerde()
_KEYS: MsgspecSerde[list[str]] = MsgspecSerde(list[str])
# The SDK's default serde leaves a union as plain JSON: decode a bulk read's request ourselves.
_READ: MsgspecSerde[list[int] | OutcomesRead] = MsgspecSerde(list[int] | OutcomesRead)
# The group's pump keeps the keys of the further slices' pumps here, for its forget (decision 35).
SLICES = "slices"
# Decision 65: a slice's children of a group opened in parts, kept here by `stage` until `run_parts`.
STAGED = "staged"
# A bulk read of the outcomes this pump keeps asks for at most this many at once.
OUTCOMES_PER_READ = 256
# Decision 61: how long the group's pump, every child settled, keeps listening for the close before it
# reports that it left (its store then waits for the close's forget). A combinator closes within
# milliseconds of its last rank; a parked group's pump does not stay suspended for the park's length.
LINGER = timedelta(seconds=10)


def pump_object(routing: Routing, *, metadata: dict[str, str] | None = None) -> restate.VirtualObject:
    pump = restate.VirtualObject(named(PUMP), invocation_retry_policy=HANDLER_RETRY, metadata=metadata)

    @pump.handler(name=PUMP_RUN.handler, ingress_private=True, state_preload=False)
    @described_by(on_run)
    async def run(ctx: restate.ObjectContext, req: PumpRun) -> None:
        await on_run(ctx, req)

    @pump.handler(name=PUMP_RUN2.handler, ingress_private=True, state_preload=False)
    @described_by(on_run2)
    async def run2(ctx: restate.ObjectContext, req: PumpAwait) -> None:
        await on_run2(ctx, req, routing)

    @pump.handler(name=PUMP_STAGE.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @described_by(on_stage)
    async def stage(ctx: restate.ObjectContext, part: StagedPart) -> None:
        await on_stage(ctx, part, routing)

    @pump.handler(name=PUMP_RUN_PARTS.handler, ingress_private=True, state_preload=False)
    @described_by(on_run_parts)
    async def run_parts(ctx: restate.ObjectContext, req: PumpParts) -> None:
        await on_run_parts(ctx, req, routing)

    @pump.handler(name=PUMP_REDISPATCH.handler, ingress_private=True, state_preload=False)
    @described_by(on_redispatch)
    async def redispatch(ctx: restate.ObjectContext, req: PumpAwait) -> None:
        await on_redispatch(ctx, req, routing)

    @pump.handler(name=PUMP_FAIL.handler, ingress_private=True, state_preload=False)
    @described_by(on_fail)
    async def fail(ctx: restate.ObjectContext, req: ChildrenFailed) -> None:
        await on_fail(ctx, req)

    @pump.handler(name=PUMP_REDISPATCH_STAGED.handler, ingress_private=True, state_preload=False)
    @described_by(on_redispatch_staged)
    async def redispatch_staged(ctx: restate.ObjectContext, req: PumpAwait) -> None:
        await on_redispatch_staged(ctx, req)

    # Kept for a reopen an earlier release sent (`redispatch` replaced it): a pumped group recorded by
    # `run`, whose children settle through `LashGroup/settle`.
    @pump.handler(name=PUMP_REDRIVE.handler, ingress_private=True, state_preload=False)
    @described_by(on_redrive)
    async def redrive(ctx: restate.ObjectContext, req: PumpRun) -> None:
        await on_redrive(ctx, req)

    # Kept for a reopen an earlier release sent (`redispatch` replaced it).
    @pump.handler(name=PUMP_REDRIVE2.handler, ingress_private=True, state_preload=False)
    @described_by(on_redrive2)
    async def redrive2(ctx: restate.ObjectContext, req: PumpRun) -> None:
        await on_redrive2(ctx, req)

    # Lazy state (decision 46): Restate 1.7 pauses an invocation whose eager state is over its
    # per-invocation memory limit (the message limit, 32 MiB, by default), and a pump may keep up to
    # PUMP_SLICE outcomes of up to that size each: a read must load only what it asks for.
    @pump.handler(
        name=PUMP_OUTCOMES.handler,
        kind="shared",
        ingress_private=True,
        state_preload=False,
        input_serde=_READ,
        output_serde=_BYTES,
    )
    @terminal_errors
    @described_by(on_outcomes)
    async def outcomes(ctx: restate.ObjectSharedContext, asked: list[int] | OutcomesRead) -> bytes:
        return await on_outcomes(ctx, asked)

    @pump.handler(name=PUMP_FORGET.handler, ingress_private=True, state_preload=False)
    @described_by(on_forget)
    async def forget(ctx: restate.ObjectContext) -> None:
        await on_forget(ctx)

    del run, run2, stage, run_parts, redispatch, fail, redispatch_staged, redrive, redrive2, outcomes, forget
    return pump


async def on_run(ctx: restate.ObjectContext, req: PumpRun) -> None:
    own, further = req.children[:PUMP_SLICE], req.children[PUMP_SLICE:]
    calls: dict[Any, RuntimeEffectEnvelope | None] = {
        CHILD_EXECUTE.call(ctx, child.replay_key, child): child for child in own
    }
    if further:
        # Decision 35: each further slice of PUMP_SLICE children gets a pump of its own, called (not
        # sent) so that cancelling this pump cancels it, and this run outlives it.
        keys = [_slice_key(req, child) for child in further[::PUMP_SLICE]]
        ctx.set(SLICES, keys, serde=_KEYS)
        for key, first in zip(keys, range(0, len(further), PUMP_SLICE), strict=True):
            part = msgspec.structs.replace(req, children=further[first : first + PUMP_SLICE])
            calls[PUMP_RUN.call(ctx, key, part)] = None
    await _settle_as_they_finish(ctx, req, calls)


async def on_run2(ctx: restate.ObjectContext, req: PumpAwait, routing: Routing) -> None:
    own, further = req.children[:PUMP_SLICE], req.children[PUMP_SLICE:]
    # The open's plan (decision 66), if it sent one entry per child; else this pump plans itself.
    decided = req.plan if isinstance(req.plan, list) and len(req.plan) == len(req.children) else None
    own_plan = decided[:PUMP_SLICE] if decided is not None else None
    awaited = await _dispatch_all(ctx, own, routing, req.incarnation, own_plan)
    slices: list[str] = []
    if further:
        # Decision 65: a tree of pumps. The further slices are split into at most PUMP_FANOUT runs of
        # whole slices, each handed to the pump of its first slice, which keeps that slice and splits
        # the rest the same way: no pump awaits more than PUMP_SLICE children and PUMP_FANOUT pumps,
        # whatever the width. Called, as `run` calls its slices (decision 35), so that cancelling
        # this pump cancels them, and they theirs; each releases its subtree's stores by `forget`.
        parts = subtrees(further)
        # Each further pump gets its part of the open's plan; without one, plans for itself.
        plans: list[list[str] | msgspec.UnsetType] = [msgspec.UNSET] * len(parts)
        if decided is not None:
            plans = [*split_plan(decided[PUMP_SLICE:], parts)]
        for part, part_plan in zip(parts, plans, strict=True):
            key = _slice_key(req, part[0])
            slices.append(key)
            run = PumpAwait(
                group_key=req.group_key,
                incarnation=req.incarnation,
                children=part,
                listens=False,
                plan=part_plan,
            )
            covers = (position_of(part[0]), position_of(part[-1]) + 1)
            awaited[PUMP_RUN2.call(ctx, key, run)] = _Awaited(_SLICE, -1, key, covers=covers)
        ctx.set(SLICES, slices, serde=_KEYS)
    closing = ctx.awakeable(serde=_BYTES) if req.listens else None
    await _await_and_report(ctx, req.group_key, req.incarnation, awaited, closing, slices)


async def on_stage(ctx: restate.ObjectContext, part: StagedPart, routing: Routing) -> None:
    """Decision 65: keep one slice's children of a group opened in parts, once they all route.

    ADR: a first open resolves all N before it records the group; refused here, before anything
    is kept, the opener releases the parts staged already and the group is never recorded.
    """
    miss = None
    if not replaying(ctx):
        miss = await routing.first_refusal(part.children)
    if miss is not None:
        child = part.children[miss.position]
        raise ChildUnroutable.no_executor(
            miss.what, group_key=part.group_key, position=position_of(child), replay_key=child.replay_key
        )
    ctx.set(STAGED, part.children, serde=ENVELOPES)


async def on_run_parts(ctx: restate.ObjectContext, req: PumpParts, routing: Routing) -> None:
    """`run2` for a group opened in parts (decision 65): this slice's children are staged here."""
    own = await ctx.get(STAGED, serde=ENVELOPES) or []
    ctx.clear(STAGED)  # dispatched from the journal from now on
    awaited = await _dispatch_all(ctx, own, routing, req.incarnation, None)
    slices: list[str] = []
    for offset, count in fan_out(req.count - 1):
        first = req.first + 1 + offset
        key = slice_key(req.group_key, req.incarnation, first * PUMP_SLICE)
        slices.append(key)
        run = PumpParts(
            group_key=req.group_key, incarnation=req.incarnation, first=first, count=count, listens=False
        )
        covers = (first * PUMP_SLICE, (first + count) * PUMP_SLICE)  # the group clips the last
        awaited[PUMP_RUN_PARTS.call(ctx, key, run)] = _Awaited(_SLICE, -1, key, covers=covers)
    if slices:
        ctx.set(SLICES, slices, serde=_KEYS)
    closing = ctx.awakeable(serde=_BYTES) if req.listens else None
    await _await_and_report(ctx, req.group_key, req.incarnation, awaited, closing, slices)


async def on_redispatch(ctx: restate.ObjectContext, req: PumpAwait, routing: Routing) -> None:
    """Decision 48: a reopen's re-dispatch of this slice's children that had no outcome when it
    reopened, by the dispatch `run2` makes, reported as `run2` reports: a re-run child reaches its
    rank by the same code as a first run's, whatever the group's layout.

    Queued behind this key's run (both exclusive), which ends only once its children have: a
    child runs again only if no outcome is stored for it (its runner was missing). It asks the
    group first: a run releases its store once the group closes, and a closed group needs
    nothing re-run.
    """
    if not (await _report(ctx, req.group_key, PumpReport(incarnation=req.incarnation))).open:
        return
    stored: list[Any] = [ctx.get(pump_store(position_of(child)), serde=_BYTES) for child in req.children]
    if stored:
        await restate.gather(*stored)
    missing = [child for child, read in zip(req.children, stored, strict=True) if await read is None]
    awaited = await _dispatch_all(ctx, missing, routing, req.incarnation, None)
    await _await_and_report(ctx, req.group_key, req.incarnation, awaited, None, [])


async def on_fail(ctx: restate.ObjectContext, req: ChildrenFailed) -> None:
    """Decision 74: the run that awaited these children of this slice ended in failure (an
    operator killed it, and its calls with it). Each settles with that failure, stored here as a
    run stores an outcome and reported as a run reports; one whose outcome was stored before the
    kill settles with it. Asks the group first: a closed group's store is released."""
    if not (await _report(ctx, req.group_key, PumpReport(incarnation=req.incarnation))).open:
        return
    reads: list[Any] = [ctx.get(pump_store(position), serde=_BYTES) for position in req.positions]
    if reads:
        await restate.gather(*reads)
    failure = stored_outcome(req.outcome)
    refs: list[Ref] = []
    inline = 0
    for position, replay_key, read in zip(req.positions, req.replay_keys, reads, strict=True):
        outcome = await read
        if outcome is None:
            outcome = failure
            ctx.set(pump_store(position), outcome, serde=_BYTES)
        inline = _add_ref(refs, position, replay_key, outcome, inline)
    await _report(ctx, req.group_key, PumpReport(incarnation=req.incarnation, refs=refs))


async def on_redispatch_staged(ctx: restate.ObjectContext, req: PumpAwait) -> None:
    """A reopen of a group opened in parts (decision 65): its opener staged the children here again;
    they go to their slice's `redispatch` under the group's incarnation, and the stage is released.
    Called, so that a Cancel close cancelling this invocation cancels the re-run children too."""
    staged = await ctx.get(STAGED, serde=ENVELOPES) or []
    ctx.clear_all()
    if staged:
        key = slice_key(req.group_key, req.incarnation, position_of(staged[0]))
        await PUMP_REDISPATCH.call(ctx, key, msgspec.structs.replace(req, children=staged))


async def on_redrive(ctx: restate.ObjectContext, req: PumpRun) -> None:
    """Decision 48: a reopen's re-dispatch of children that had no outcome when it reopened.

    Sent to the group's pump, it queues behind that pump's run (both exclusive on its key), which
    ends only after every further slice's run has: so every child some run could still settle has
    settled or ended by now, and a child runs again only if no outcome is stored for it (its runner
    was missing: a routing miss ended it). The further slices' children are redriven by their
    own pumps, called (so that cancelling this one cancels them), where their outcomes live.
    """
    await _redrive(ctx, req)


async def on_redrive2(ctx: restate.ObjectContext, req: PumpRun) -> None:
    """`redrive` for a group `open` records now (decision 61): it asks the group first whether it is
    still open.

    Queued behind the group's `run2`, which releases its store when the group closes: a redrive
    behind it would find no outcome stored and run every child again (and keep their outcomes
    with nobody left to release them). A group that is still open has nothing released, as
    `redrive` expects; a closed one needs nothing re-run.
    """
    if (await _report(ctx, req.group_key, PumpReport(incarnation=req.incarnation))).open:
        await _redrive(ctx, req)


async def on_outcomes(ctx: restate.ObjectSharedContext, asked: list[int] | OutcomesRead) -> bytes:
    """The stored outcomes asked for, one JSON array, cut short to stay within the read's budget."""
    read = asked if isinstance(asked, OutcomesRead) else OutcomesRead(positions=asked)
    reads = [
        ctx.get(pump_store(int(position)), serde=_BYTES) for position in read.positions[:OUTCOMES_PER_READ]
    ]
    if reads:
        await restate.gather(*reads)
    found: list[bytes] = []
    size = 0
    for state in reads:
        outcome = await state
        if outcome is None:
            if not found:  # ranked, so stored, unless the group was closed meanwhile
                raise GroupNotOpen("the group was closed while reading", group_key=group_of_pump(ctx.key()))
            break
        if (found or not read.first) and size + len(outcome) > read.budget:
            break
        found.append(outcome)
        size += len(outcome)
    return b"[" + b",".join(found) + b"]"


async def on_forget(ctx: restate.ObjectContext) -> None:
    for key in await ctx.get(SLICES, serde=_KEYS) or []:
        PUMP_FORGET.send(ctx, key, None)  # each ran to its end before this pump's run did
    ctx.clear_all()


_SLICE = "slice"


@dataclass(frozen=True, slots=True)
class _Awaited:
    """What a future `run2` awaits is: a call to the user's handler, a `LashChild/execute`, or a pump."""

    kind: str
    position: int
    replay_key: str  # a further slice's pump key for a pump
    target: str = ""  # a call's ``service/handler``
    covers: tuple[int, int] = (0, 0)  # a pump's: the positions its subtree runs, first and past the last


async def _dispatch_all(
    ctx: restate.ObjectContext,
    children: list[RuntimeEffectEnvelope],
    routing: Routing,
    incarnation: str,
    decided: list[str] | None,
) -> dict[Any, _Awaited]:
    """Call each of ``children`` from this pump, as the open ``decided`` (`PumpAwait.plan`, one per
    child) or, when it did not, as this pump decides; what is awaited, by future."""
    how_each = decided if decided is not None else [CHILD] * len(children)
    if decided is None and any(isinstance(child.command, Call) for child in children):
        # Decided once and journaled: an in-place redeploy may change this endpoint's routing, and a
        # replay must make the calls the first execution made (decision 61). A plan the open sent is
        # in this pump's input, which a replay reads as it was.
        options: restate.RunOptions[list[str]] = restate.RunOptions(serde=_KEYS)
        how_each = await ctx.run_typed("route", lambda: plan(routing, children), options)
    awaited: dict[Any, _Awaited] = {}
    for child, how in zip(children, how_each, strict=True):
        dispatched = _dispatch(ctx, child, how, incarnation)
        if dispatched is not None:
            awaited[dispatched[0]] = dispatched[1]
    return awaited


def _dispatch(
    ctx: restate.ObjectContext, child: RuntimeEffectEnvelope, how: str, incarnation: str
) -> tuple[Any, _Awaited] | None:
    """Call ``child`` from this pump as its plan says (`plan`)."""
    position = position_of(child)
    if how == CHILD or not isinstance(child.command, Call):  # only a call child is called directly
        future = CHILD_EXECUTE.call(ctx, child.replay_key, child)
        return future, _Awaited(CHILD, position, child.replay_key)
    call = child.command
    if how == MISS:
        # Only in a `route` an earlier release journaled (`plan` now sends such a call through
        # `LashChild/execute`, which lists the miss): a routing miss, never an outcome (ADR: the
        # Restate host's form of it is a terminal 404; the rank stays unallocated).
        logs.logger.warning(
            "call child ended without a settlement: %s is not bound here",
            call.target,
            extra={"replay_key": child.replay_key},
        )
        return None
    # The idempotency key names the child on the callee's invocation, for inspection and operators.
    key = callee_key(child, incarnation)
    future = ctx.generic_call(
        call.service,
        call.handler,
        call_arg(call),
        key=call.key,
        idempotency_key=key,
        **invocation_options(call),
    )
    return future, _Awaited(CALL, position, child.replay_key, call.target)


async def _call_outcome(future: Any, target: str) -> bytes:
    """The stored outcome of a call to the user's handler ``target``: its answer, or its terminal error."""
    try:
        raw = await future
    except restate.TerminalError as error:
        return stored_outcome(refused(error))
    return stored_outcome(answered(target, bytes(raw) if raw is not None else None))


async def _await_and_report(
    ctx: restate.ObjectContext,
    group_key: str,
    incarnation: str,
    awaited: dict[Any, _Awaited],
    closing: tuple[str, Any] | None,
    slices: list[str],
) -> None:
    """Await ``awaited``; each time some finish, store what settled and report it to the group in one
    call; stop once the group is closed (its close resolves ``closing``, or a report finds it closed)."""
    pending: list[Any] = list(awaited)
    listen = closing[0] if closing is not None else None
    stored = cancelled = closed = missed = False
    while pending:
        watched = pending if closing is None or closed else [*pending, closing[1]]
        try:
            done, _ = await restate.wait_completed(*watched)
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise
            # Cancelled (a Cancel close, or its caller ended): the SDK has cancelled the calls still
            # pending, and their Cancelled terminals still rank (ADR, "Close deletes…").
            cancelled = True
            continue
        if closing is not None and not closed and closing[1] in done:
            _release(ctx, slices)
            return
        pending = [future for future in pending if future not in done]
        refs: list[Ref] = []
        inline = 0
        for future in done:
            what = awaited[future]
            if what.kind == _SLICE:
                failure = await _slice_ended(future)
                if failure is not None:
                    # Decision 74: killed (say), its subtree's children are settled by the group with
                    # the failure, through their slices' stores, unless they hold a rank already.
                    ended = RunEnded(
                        incarnation=incarnation,
                        positions=list(range(*what.covers)),
                        message=failure.message,
                        code=str(failure.status_code),
                    )
                    GROUP_RUN_ENDED.send(ctx, group_key, ended)
                continue
            if closed:
                continue  # nobody reads it: the group is closed, and this pump's store released
            if what.kind == CALL:
                outcome: bytes | None = await _call_outcome(future, what.target)
            else:
                outcome = await _child_outcome(future, what.replay_key)
            if outcome is None:
                missed = True  # a routing miss: no terminal is synthesized, the rank stays unallocated
                continue
            # Stored before the report is sent, so a rank is never readable before its outcome.
            ctx.set(pump_store(what.position), outcome, serde=_BYTES)
            stored = True
            inline = _add_ref(refs, what.position, what.replay_key, outcome, inline)
        if refs:
            answer = await _report(
                ctx, group_key, PumpReport(incarnation=incarnation, refs=refs, listen=listen)
            )
            listen = None  # the group keeps it from the first report on
            if not answer.open:
                # Decision 65: released now, but this pump awaits what is still pending rather than
                # return: calls outlive their caller, so a pump that returned would leave its pending
                # children (and further pumps) beyond the reach of a Cancel close's cancellation,
                # which comes down the tree of calls. Under RunToCompletion they run on, as declared.
                _release(ctx, slices)
                closed = True
    if closed or closing is None or not stored:
        return  # a further slice's store is released by the group's pump; an empty one needs nothing
    # A Cancel close does not resolve the awakeable (decision 65): ask whether the group is closed.
    if cancelled and not (await _report(ctx, group_key, PumpReport(incarnation=incarnation))).open:
        _release(ctx, slices)
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
            # A Cancel close cancels this pump as it resolves the awakeable: listen on.
    if which == "closed":
        _release(ctx, slices)
        return
    answer = await _report(ctx, group_key, PumpReport(incarnation=incarnation, left=True))
    if not answer.open:
        _release(ctx, slices)


def _add_ref(refs: list[Ref], position: int, replay_key: str, outcome: bytes, inline: int) -> int:
    """Append the ref reporting a stored ``outcome``, carrying it if it fits what one outcome and one
    batch may carry (``inline`` bytes carried so far); the bytes carried now."""
    carry = len(outcome) <= INLINE_OUTCOME_BYTES and inline + len(outcome) <= BATCH_INLINE_BYTES
    refs.append(Ref(position=position, replay_key=replay_key, outcome=outcome if carry else None))
    return inline + len(outcome) if carry else inline


def _release(ctx: restate.ObjectContext, slices: list[str]) -> None:
    """The group is closed: nothing this pump (or a further slice's) keeps will be read again."""
    for key in slices:
        PUMP_FORGET.send(ctx, key, None)  # queued behind its run, as the group's `forget` sends them
    ctx.clear_all()


async def _report(ctx: restate.ObjectContext, group_key: str, report: PumpReport) -> ReportReply:
    """Hand a report to the group, again if a cancel of the pump interrupted the call (it is idempotent)."""
    while True:
        try:
            return await GROUP_REPORT.ask(ctx, group_key, report)
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise


async def _settle_as_they_finish(
    ctx: restate.ObjectContext, req: PumpRun, calls: dict[Any, RuntimeEffectEnvelope | None]
) -> None:
    """Wait on ``calls`` (children, and further slices' pumps: None); each time some finish, store the
    children's outcomes and settle them into the group in one batch."""
    pending: list[Any] = list(calls)
    while pending:
        try:
            done, pending = await restate.wait_completed(*pending)
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise
            # Cancelled (a Cancel close, or its caller ended): the SDK has cancelled the calls
            # still pending, and their Cancelled terminals still rank (ADR, "Close deletes…").
            continue
        refs: list[Ref] = []
        inline = 0
        for future in done:
            child = calls[future]
            if child is None:
                await _slice_ended(future)
                continue
            outcome = await _child_outcome(future, child.replay_key)
            if outcome is None:
                continue  # a routing miss: no terminal is synthesized, the rank stays unallocated
            position = position_of(child)
            # Stored before the batch is sent, so a rank is never readable before its outcome.
            ctx.set(pump_store(position), outcome, serde=_BYTES)
            inline = _add_ref(refs, position, child.replay_key, outcome, inline)
        if refs:
            batch = SettleBatch(incarnation=req.incarnation, mode=SettlementMode.PUMPED, refs=refs)
            await _forward(ctx, req.group_key, batch)


async def _redrive(ctx: restate.ObjectContext, req: PumpRun) -> None:
    """Run again the children of ``req`` no outcome is stored for, here and in the further slices."""
    mine: list[RuntimeEffectEnvelope] = []
    theirs: dict[str, list[RuntimeEffectEnvelope]] = {}
    for child in req.children:
        key = _slice_key(req, child)
        if key == ctx.key():
            mine.append(child)
        else:
            theirs.setdefault(key, []).append(child)
    calls: dict[Any, RuntimeEffectEnvelope | None] = {}
    for child in mine:
        if await ctx.get(pump_store(position_of(child)), serde=_BYTES) is None:
            calls[CHILD_EXECUTE.call(ctx, child.replay_key, child)] = child
    for key, part in theirs.items():
        calls[PUMP_REDRIVE.call(ctx, key, msgspec.structs.replace(req, children=part))] = None
    await _settle_as_they_finish(ctx, req, calls)


def fan_out(count: int) -> list[tuple[int, int]]:
    """``count`` further slices split into at most `PUMP_FANOUT` contiguous runs of whole slices, as
    even as they come: (offset of the run's first slice, its number of slices) each (decision 65)."""
    per = -(-count // PUMP_FANOUT)
    return [(offset, min(per, count - offset)) for offset in range(0, count, per)] if count else []


def split_plan(plan: list[str], parts: list[list[RuntimeEffectEnvelope]]) -> list[list[str]]:
    """``plan`` (one entry per child of ``parts``, in order) cut as ``parts`` are, one list per part."""
    cut, first = [], 0
    for part in parts:
        cut.append(plan[first : first + len(part)])
        first += len(part)
    return cut


def subtrees(further: list[RuntimeEffectEnvelope]) -> list[list[RuntimeEffectEnvelope]]:
    """``further`` (whole slices after a pump's own, in position order) as `fan_out` splits them."""
    runs = fan_out(-(-len(further) // PUMP_SLICE))
    return [further[o * PUMP_SLICE : (o + n) * PUMP_SLICE] for o, n in runs]


def _slice_key(req: PumpRun | PumpAwait, first: RuntimeEffectEnvelope) -> str:
    assert first.membership is not None  # the group stamped every child
    return slice_key(req.group_key, req.incarnation, first.membership.position)


async def _slice_ended(future: Any) -> restate.TerminalError | None:
    """A further slice's pump returned: its children were settled by it, not here; the failure it
    ended with, if it did not settle them (it was killed, say), else None."""
    try:
        await future
    except restate.TerminalError as error:
        if cancelled(error):
            return None  # a Cancel close: its children settled as cancelled through it
        logs.logger.warning("a slice's pump failed: %s", error.message)
        return error
    return None


async def _child_outcome(future: Any, replay_key: str) -> bytes | None:
    """A child call's outcome bytes; None when the child could not be routed (ADR: a 404 is terminal)."""
    try:
        return bytes(await future)
    except restate.TerminalError as error:
        if error.status_code == NOT_FOUND:
            return None  # a miss: the child told its group, which keeps it (decision 73)
        # Cancelled before it could record its own terminal, or ended otherwise (an operator killed
        # it: 409 `killed`), as a call child's callee would answer (decision 74): never unsettled.
        return stored_outcome(refused(error))


async def _forward(ctx: restate.ObjectContext, group_key: str, batch: SettleBatch) -> None:
    """Hand a batch to the group, again if a cancel of the pump interrupted the call (it is idempotent)."""
    while True:
        try:
            await GROUP_SETTLE.call(ctx, group_key, batch)
            return
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise
