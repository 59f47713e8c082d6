"""`LashGroup`'s re-dispatch: a reopen's, and the operator's of the children whose runner was
missing (decision 73): one code runs every child list again."""

from __future__ import annotations

from typing import Any

import restate

from ... import logs
from ...contract import GroupShape, RuntimeEffectEnvelope
from ..child._routing import Routing
from ..wire._incarnation import watches_its_runs
from ..wire._messages import (
    MissedChildren,
    OpenRequest,
    OperatorRedispatch,
    OperatorRedispatched,
    PartedOpen,
    WatchedRun,
    decode,
)
from ..wire._records import (
    ENVELOPE,
    FENCE,
    META,
    MISSED,
    POSITIONS,
    RECORD,
    SHAPE,
    STRINGS,
    GroupMeta,
    missed_key,
)
from ._group_common import GroupSettings
from ._group_watch import watch_after
from ._mode import REDISPATCHED, Dispatched, mode_for, position_of
from ._ranks import ranks_for

__all__ = [
    "dispatch_again",
    "is_child",
    "missed_children",
    "note_redispatched",
    "on_missed",
    "on_operator_redispatch",
    "redispatch_on_reopen",
]


async def on_missed(ctx: restate.ObjectContext, req: MissedChildren) -> None:
    """ADR: a child with no runner is a routing fact, never an outcome. Its run ended with none
    (the terminal 404); the group keeps the child, so inspection lists it and the operator's
    `operator_redispatch` can run it again once a deployment routes it, as a reopen would."""
    meta = await ctx.get(RECORD, serde=META)
    # "": sent by a baseline group's pump's `execute`, which names no incarnation (the fence checks).
    if meta is None or (req.incarnation and meta.incarnation != req.incarnation):
        return  # closed (or a closed namesake's child): nobody will rank it
    fence = await ctx.get(FENCE, serde=SHAPE)
    assert fence is not None  # written with meta, cleared with it
    known = await ctx.get(MISSED, serde=POSITIONS) or []
    added = [c for c in req.children if is_child(fence, c) and position_of(c) not in known]
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
    meta = await ctx.get(RECORD, serde=META)
    if meta is None:
        return OperatorRedispatched(refused="the group is not open")
    if meta.incarnation != req.incarnation:
        return OperatorRedispatched(refused="the group was closed and opened again since")
    children = await missed_children(ctx)
    dispatched, watched = await dispatch_again(ctx, meta, children, settings.routing)
    await watch_after(ctx, meta, watched)
    left = len(children) - len(dispatched)
    return OperatorRedispatched(dispatched=len(dispatched), unroutable=left)


async def missed_children(ctx: restate.ObjectContext) -> list[RuntimeEffectEnvelope]:
    """The children whose runner was missing, as the group keeps them (`on_missed`)."""
    positions = await ctx.get(MISSED, serde=POSITIONS) or []
    reads: list[Any] = [ctx.get(missed_key(position), serde=ENVELOPE) for position in positions]
    if reads:
        await restate.gather(*reads)
    return [child for read in reads if (child := await read) is not None]


async def redispatch_on_reopen(
    ctx: restate.ObjectContext, meta: GroupMeta, req: OpenRequest | PartedOpen, routing: Routing
) -> list[WatchedRun]:
    """ADR: a reopen resolves only what it dispatches and refuses nothing (decision 48).

    A child whose runner was missing ended without an outcome (the Restate host's terminal 404); once the
    endpoint can route it again, a reopen dispatches it again, as the reference host's reopen does.
    The group keeps those children (`on_missed`) and watches every other run it dispatched until it
    ends (decision 74), so only they run again (decision 95): a run still going settles its child
    itself, and one an operator killed settles it as killed, never run a second time. A group the
    baseline opened kept neither, so every unsettled child of it is dispatched again, queued behind
    whatever still runs it, and runs only if that left no outcome.
    """
    # An open in parts carries no children (they were staged), and only a release that keeps the
    # missed children sends one.
    if watches_its_runs(meta.incarnation) or isinstance(req, PartedOpen):
        return (await dispatch_again(ctx, meta, await missed_children(ctx), routing))[1]
    # A baseline group's: the children its reopen carries (`_fence_reopen` checked them against its shape).
    children = [decode(raw, RuntimeEffectEnvelope) for raw in req.children]
    return (await dispatch_again(ctx, meta, children, routing))[1]


async def dispatch_again(
    ctx: restate.ObjectContext, meta: GroupMeta, children: list[RuntimeEffectEnvelope], routing: Routing
) -> tuple[list[int], list[WatchedRun]]:
    """Dispatch again those of ``children`` that hold no rank and this endpoint can route, through
    the mode's `redispatch`; the positions dispatched, and the runs to watch. A reopen and the
    operator's re-dispatch both come here (decision 73): no child list is re-run by two codes.

    The dispatch queues behind whatever still runs a child, and runs it only if that left no
    outcome, so no child runs twice. A child dispatched is no longer kept as missed.
    """
    settled = await ranks_for(meta.incarnation).ranked_positions(ctx, meta)
    unsettled = [c for c in children if position_of(c) not in settled]
    if not unsettled:
        return [], []

    # Which of them this endpoint routes is its answer, not the journal's: journaled, so that a replay
    # on a process that routes differently (an in-place redeploy while this runs) dispatches what the
    # first execution did, where asking again failed the replay and held the group's lock (decision 50).
    # A coroutine: the SDK runs a plain function on a thread, and the app's resolver is asked here.
    async def routed_here() -> list[int]:
        return [position_of(c) for c in unsettled if routing.routes(c)]

    options: restate.RunOptions[list[int]] = restate.RunOptions(serde=POSITIONS)
    routes = await ctx.run_typed("routable", routed_here, options)
    routed = set(routes)
    routable = [c for c in unsettled if position_of(c) in routed]
    if not routable:
        return [], []
    watched = await note_redispatched(ctx, mode_for(meta.mode).redispatch(ctx, meta, routable))
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


async def note_redispatched(ctx: restate.ObjectContext, dispatched: list[Dispatched]) -> list[WatchedRun]:
    """Keep the invocations a reopen (or the operator's re-dispatch) dispatched again, which a
    Cancel cancels too (decision 48); what to watch of them (decision 74)."""
    if not dispatched:
        return []
    known = await ctx.get(REDISPATCHED, serde=STRINGS) or []
    ids = [await d.handle.invocation_id() for d in dispatched]
    ctx.set(REDISPATCHED, [*known, *ids], serde=STRINGS)
    return [WatchedRun(invocation=i, positions=d.positions) for i, d in zip(ids, dispatched, strict=True)]


def is_child(fence: GroupShape, child: RuntimeEffectEnvelope) -> bool:
    """Whether ``child`` is the one this group recorded at its position (not a namesake's)."""
    position = position_of(child)
    return position < fence.child_count and fence.replay_keys[position] == child.replay_key
