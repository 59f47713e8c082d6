"""`LashGroup`'s open: record the group (or fence a reopen), dispatch its children in the same run,
and answer the opener (ADR: a first open resolves all N before it records the group)."""

from __future__ import annotations

from typing import Any

import msgspec
import restate

from ... import logs
from ...contract import (
    Call,
    ChildUnroutable,
    GroupNotOpen,
    GroupShape,
    InvalidEnvelope,
    InvalidInput,
    LashError,
    LoserPolicy,
    RuntimeEffectEnvelope,
    decode_envelope,
    envelope_hash,
    error_from_wire,
)
from ..child._calls import open_plan
from ..child._routing import Routing, replaying
from ..wire._errors import terminal_status
from ..wire._incarnation import PAGED, bound_mark, watches_its_runs
from ..wire._messages import (
    CallerEnded,
    OpenReply,
    OpenRequest,
    PartedOpen,
    PumpParts,
    WatchedRun,
)
from ..wire._records import (
    FENCE,
    META,
    RECLAIM_AT,
    RECORD,
    SAVES,
    SHAPE,
    STRINGS,
    GroupMeta,
    Opener,
    SettlementMode,
)
from ..wire._routes import (
    GROUP_WATCH,
    PUMP_RUN_PARTS,
    PUMP_STAGED,
    pump_key,
)
from ._group_common import OPENED, GroupSettings, cancel_at_close, check_incarnation, release_staged
from ._group_dispatch import redispatch_on_reopen
from ._group_guard import guard_waiters
from ._group_watch import is_new_opener, openers_to_watch, send_watch
from ._mode import INVOCATIONS, PUMP_SLICE, Dispatched, mode_for, slice_key
from ._ranks import ranks_for

__all__ = [
    "carries_its_shape",
    "names_its_parts",
    "note_opener",
    "on_open",
    "on_open_parts",
    "record_first_open",
    "record_group",
]


def _decoded(group_key: str, position: int, raw: bytes) -> RuntimeEffectEnvelope:
    """Child ``position`` of an open request; one no release builds now (an earlier release's caller
    took a fractional sleep) is refused typed, naming it, where a plain error would be retried."""
    try:
        return decode_envelope(raw)
    except InvalidEnvelope as refused:
        raise InvalidEnvelope(refused.message, group_key=group_key, position=position) from None


# See decisions 20, 25, 61, 81 (its docstring is what Restate's UI shows).
async def on_open(ctx: restate.ObjectContext, req: OpenRequest, settings: GroupSettings) -> None:
    """Record (or fence a reopen of) the group and dispatch its children; answer on ``reply_to``.

    The opener sends this and awaits its awakeable, so its own cancellation never reaches this
    handler: a group whose children were dispatched records how to cancel them (unless an operator
    cancels this open itself while it runs: what it had not recorded by then stays unrecorded,
    decision 144). The answer goes out before the awaits that follow, so the opener resumes at once.

    A group with a call child, a ``max_in_flight`` bound, or ``batch_from`` children or more,
    settles through its pumps (one per slice of 256; a bounded group, one), each of which awaits
    its children where they run; once the close resolves the group's own pump's awakeable (or sends
    it ``forget``), that pump releases its store and has each further slice's pump release its own;
    a narrower group of tools, timers and events settles directly, each child by itself.
    """
    meta = await ctx.get(RECORD, serde=META)
    first = meta is None
    try:
        meta, children = await record_group(
            ctx, meta, req, settings.batch_from, settings.page_from, settings.routing
        )
    except LashError as error:
        ctx.reject_awakeable(req.reply_to, error.to_wire(), terminal_status(error))
        return
    handles: list[Dispatched] = []
    if first:
        # Decided here and sent with the children, so that a pump journals no plan of its own before
        # its calls (decision 66). A direct group's dispatch does not read it.
        handles = mode_for(meta.mode).dispatch(ctx, meta, children, open_plan(settings.routing, children))
    reply = OpenReply(reopened=not first, incarnation=meta.incarnation)
    ctx.resolve_awakeable(req.reply_to, reply, serde=OPENED)
    # What follows is off the opener's path: it has its answer.
    watched = None  # a reopen dispatched nothing here
    if first:  # cancels need these: one per child, or the one pump (decisions 4, 61)
        meta, watched = await _record_runs(ctx, meta, handles)
    await _answered(ctx, meta, req, settings, watched)


async def _record_runs(
    ctx: restate.ObjectContext, meta: GroupMeta, handles: list[Dispatched]
) -> tuple[GroupMeta, list[WatchedRun]]:
    """A first open's record of the runs it dispatched (``handles``), which a `Cancel` close cancels,
    and what its watch attaches to; and the group's record with the time it was opened, returned:
    `note_opener` writes it (`_answered`)."""
    ids = [await d.handle.invocation_id() for d in handles]
    # In the handles' order, whole: a direct group's close reads a child's run by its position.
    ctx.set(INVOCATIONS, ids, serde=STRINGS)
    meta = msgspec.structs.replace(meta, opened_at_ms=int(await ctx.time() * 1000))
    return meta, [WatchedRun(invocation=i, positions=d.positions) for i, d in zip(ids, handles, strict=True)]


async def _answered(
    ctx: restate.ObjectContext,
    meta: GroupMeta,
    req: OpenRequest | PartedOpen,
    settings: GroupSettings,
    dispatched: list[WatchedRun] | None,
) -> None:
    """What every open does once its opener has the answer, off the opener's path: note the opener,
    on a reopen (``dispatched`` None) run again the children kept as missed, watch the runs and the
    openers, and guard the first open's wakes (or keep the watch)."""
    first = dispatched is not None
    # A first open's record is written here (`changed`), with the time `_record_runs` stamped. `meta`
    # stays as it was before this opener was noted: `openers_to_watch` and `is_new_opener` read it so.
    await note_opener(ctx, meta, req.caller, changed=first)
    if dispatched is None:
        # After everything a format-1 open journals, so a reopen in flight when the code was
        # replaced in place replays its journal as a prefix of this one (decision 48).
        dispatched = await redispatch_on_reopen(ctx, meta, req, settings.routing)
    # After the re-dispatch, for the same reason: watched until they end (decisions 74, 78).
    watch = send_watch(ctx, meta, dispatched, openers_to_watch(meta, req.caller))
    if not first and is_new_opener(meta, req.caller):
        ctx.clear(RECLAIM_AT)  # reopened: someone holds it again, so it is not due (decision 78)
    if first:
        # The opener's wakes, registered with the record: guarded (a guard rejects them if the group's
        # state is deleted under the waiting caller, decision 83), kept with the watch.
        await guard_waiters(ctx, meta, meta.waiters, settings, watch)
    elif watch is not None:
        await cancel_at_close(ctx, watch)


# See decisions 48, 65, 95 (its docstring is what Restate's UI shows).
async def on_open_parts(ctx: restate.ObjectContext, req: PartedOpen, settings: GroupSettings) -> None:
    """`open` for a group too large for one message: its opener staged the children, one part per
    slice, with the pumps keyed by ``req.stage``, each of which routed its part.

    A first open records the group under that incarnation, paged, and sends its pump `run_parts`, in
    one handler run; a refusal releases the parts staged. A reopen releases what it staged and, as a
    reopen of a group opened in one message does, runs again the children the group kept as missed;
    so does a resume, which stages nothing.
    """
    meta = await ctx.get(RECORD, serde=META)
    first = meta is None
    whole = slices_of(req.shape)
    # Only the parts an opener staged are released, and never the recorded group's own pumps (its
    # first open's, sent again by an operator).
    named = names_its_parts(req)
    ours = meta is not None and req.stage == meta.incarnation
    releasable = req.parts if named and not ours else 0
    staged = [slice_key(ctx.key(), req.stage, at) for at in range(0, releasable * PUMP_SLICE, PUMP_SLICE)]
    try:
        if not named:
            raise InvalidInput("an open in parts names no staged parts of this group")
        if meta is not None:
            await _fence_reopen(ctx, meta, req.shape, req.reopens)
        elif req.reopen_only:
            raise GroupNotOpen.not_recorded(group_key=ctx.key())
        elif req.parts != whole:
            raise InvalidInput("an open in parts names no staged parts of this group")
        elif not isinstance(req.unroutable, msgspec.UnsetType):
            # ADR: a first open with a child nobody can run records nothing (decision 84).
            raise error_from_wire(req.unroutable) or InvalidInput(req.unroutable)
        elif not (await PUMP_STAGED.ask_made_again(ctx, slice_key(ctx.key(), req.stage, 0), None))[0]:
            # Decision 126: the parts are gone (this open was made again after its group's close
            # released them, a restart as new): recorded, the group would never settle. Asked again
            # if an operator kills or cancels the question; a cancel of this open noted meanwhile is
            # let go: its opener must be answered.
            raise InvalidInput("the children this open staged are gone (released by its group's close)")
        else:
            pumped = SettlementMode.PUMPED
            meta = record_first_open(ctx, req.shape, req.wakes, req.stage, pumped, parts=req.parts)
    except LashError as error:
        release_staged(ctx, staged)
        ctx.reject_awakeable(req.reply_to, error.to_wire(), terminal_status(error))
        return
    assert meta is not None
    pump = None
    if first:
        run = PumpParts(group_key=ctx.key(), incarnation=meta.incarnation, first=0, count=req.parts)
        pump = PUMP_RUN_PARTS.send(ctx, pump_key(ctx.key(), meta.incarnation), run)
    else:  # a reopen runs again only the children kept as missed (below), not what it staged
        release_staged(ctx, staged)
    ctx.resolve_awakeable(
        req.reply_to, OpenReply(reopened=not first, incarnation=meta.incarnation), serde=OPENED
    )
    watched = None  # a reopen (or a resume, which stages nothing): none
    if pump is not None:  # a Cancel cancels the group's pump, which cancels its calls (decision 35)
        meta, watched = await _record_runs(ctx, meta, [Dispatched(pump, None)])
    await _answered(ctx, meta, req, settings, watched)


async def _fence_reopen(
    ctx: restate.ObjectContext,
    meta: GroupMeta,
    shape: GroupShape,
    reopens: str | msgspec.UnsetType,
    carrying: OpenRequest | None = None,
) -> None:
    """ADR: a reopen is fenced on its shape: the children the group was opened with, the same. A
    resume's is fenced on the incarnation its cursor names too (decision 124): the cursor's group
    was closed if the key holds another, which is neither reopened nor told of this opener. The
    children a reopen in one message is ``carrying`` are the shape's too, if it runs them again."""
    check_incarnation(ctx, meta, reopens)
    recorded = await ctx.get(FENCE, serde=SHAPE)
    assert recorded is not None  # written with meta, cleared with it
    recorded.fence_reopen(shape, ctx.key())
    if carrying is not None and not watches_its_runs(meta.incarnation):
        # A baseline group's reopen runs again the children it carries (`redispatch_on_reopen`): one its shape
        # does not name is refused typed here, where `redispatch_on_reopen` would run it or fail, retried.
        carries_its_shape(carrying, ctx.key())
    logs.event("group.reopened", ctx, group_key=ctx.key())


async def record_group(
    ctx: restate.ObjectContext,
    meta: GroupMeta | None,
    req: OpenRequest,
    batch_from: int,
    page_from: int,
    routing: Routing,
) -> tuple[GroupMeta, list[RuntimeEffectEnvelope]]:
    """The group's record as this open finds or first writes it (its opener not yet noted), and the
    children to dispatch (none on a reopen).

    Decision 61: pumped from ``batch_from`` children on, or with a call child or a ``max_in_flight``
    bound (decision 81) whatever the width; a pumped group of ``page_from`` children or more keeps
    its ranks in pages (decision 65).
    """
    if meta is not None:
        # ADR: a reopen is fenced on shape, resolves only what it dispatches and refuses nothing;
        # on Restate the children are engine-owned invocations already: none is dispatched here, and
        # `_answered` runs again only those the group kept as missed (decision 95; a baseline group's
        # reopen, every unsettled child it carries).
        await _fence_reopen(ctx, meta, req.shape, req.reopens, req)
        return meta, []
    if req.reopen_only:
        # Decision 41: a resume of a group that was closed (or never recorded) must not start it over.
        raise GroupNotOpen.not_recorded(group_key=ctx.key())
    if len(req.children) != req.shape.child_count:  # no caller sends one: refused, recording nothing
        carried = f"the open names {req.shape.child_count} children and carries {len(req.children)}"
        raise InvalidInput(carried, group_key=ctx.key())
    children = [_decoded(ctx.key(), position, raw) for position, raw in enumerate(req.children)]
    calls = any(isinstance(child.command, Call) for child in children)
    bound = None if isinstance(req.window, msgspec.UnsetType) else req.window
    # A bound of the width or more bounds nothing: the caller sends none (`EffectGroup` drops it).
    if bound is not None and not 0 < bound < len(children):
        raise InvalidInput(f"max_in_flight must be between 1 and the group's width; got {bound}")
    # Decision 81: a bounded group's one pump starts the next child as one settles.
    pumped = calls or bound is not None or len(children) >= batch_from
    mode = SettlementMode.PUMPED if pumped else SettlementMode.DIRECT
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
    incarnation = f"{PAGED if pages else ''}{bound_mark(bound)}{ctx.uuid()}{SAVES}"
    return record_first_open(ctx, req.shape, req.wakes, incarnation, mode), children


def record_first_open(
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
    ctx.set(FENCE, shape, serde=SHAPE)
    ctx.set(RECORD, meta, serde=META)
    ranks_for(incarnation).record_open(ctx, shape)  # a paged group's slices' keys (decision 65)
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


def carries_its_shape(req: OpenRequest, group_key: str) -> None:
    """The children an open carries are those its shape names, one each: a reopen of a group the
    baseline opened dispatches them again as they came (a forged list would run children no group
    recorded, or fail the open with a plain error, retried for ever)."""
    if len(req.children) != req.shape.child_count:
        raise InvalidInput(f"the open names {req.shape.child_count} children and carries {len(req.children)}")
    for position, raw in enumerate(req.children):
        if envelope_hash(_decoded(group_key, position, raw)) != req.shape.hashes[position]:
            raise InvalidInput(f"child {position} is not the one the open's shape names")


def slices_of(shape: GroupShape) -> int:
    """The parts an open in parts of ``shape`` stages: one per slice."""
    return -(-shape.child_count // PUMP_SLICE)


def names_its_parts(req: PartedOpen) -> bool:
    """Whether ``req`` names parts as an opener stages them: every one, or none (a resume)."""
    return req.stage.startswith(PAGED) and req.parts in (0, slices_of(req.shape))


async def note_opener(ctx: restate.ObjectContext, meta: GroupMeta, caller: str | None, changed: bool) -> None:
    """Record a new opener in ``meta`` (writing it if anything ``changed``); under a declared
    `Cancel`, watch for its end here (decision 13): RunToCompletion losers run on whatever happens
    to it (every other opener is watched too, by the watch `_answered` sends, decision 78)."""
    if caller is not None and is_new_opener(meta, caller):
        watcher = None
        if meta.disposition is LoserPolicy.CANCEL:
            watch = CallerEnded(caller=caller, incarnation=meta.incarnation)
            watcher = await GROUP_WATCH.send(ctx, ctx.key(), watch).invocation_id()
        meta = msgspec.structs.replace(meta, openers=[*meta.openers, Opener(caller=caller, watcher=watcher)])
        changed = True
    if changed:
        ctx.set(RECORD, meta, serde=META)
