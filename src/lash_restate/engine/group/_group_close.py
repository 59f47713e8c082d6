"""`LashGroup`'s close, a caller's or an operator's: cancel what the disposition says, release the
stored outcomes, and delete the group's state in one step (ADR: retirement is group-atomic)."""

from __future__ import annotations

import msgspec
import restate

from ... import logs
from ...contract import GroupNotOpen, LoserPolicy, check_child_count, effective_disposition
from ..wire._errors import NOT_FOUND
from ..wire._messages import CloseRequest, OperatorClose, OperatorClosed
from ..wire._records import BYTES, META, RECORD, STRINGS, GroupMeta
from ._group_common import CANCELLED_AT_CLOSE, LISTENED, cancel_runs
from ._mode import mode_for
from ._ranks import ranks_for

__all__ = ["close_group", "on_close", "on_operator_close"]


async def on_close(ctx: restate.ObjectContext, req: CloseRequest) -> None:
    """A caller's close: the disposition (the declared one, or a narrower one) applied to the losers,
    then the group's record and stores deleted (`close_group`); a group not open is left alone."""
    meta = await ctx.get(RECORD, serde=META)
    if meta is None:
        return  # ADR: close is idempotent, and so is the delete
    if req.incarnation is not msgspec.UNSET and req.incarnation != meta.incarnation:
        return  # decision 113: the closer's group is closed already; this is a namesake opened since
    check_child_count(meta.child_count, req.child_count, group_key=ctx.key())
    effective = effective_disposition(meta.disposition, req.disposition, group_key=ctx.key())
    await close_group(ctx, meta, effective)


# See decision 45 (its docstring is what Restate's UI shows).
async def on_operator_close(ctx: restate.ObjectContext, req: OperatorClose) -> OperatorClosed:
    """The operator's close: a caller's close, nothing else, reached through the ingress.

    It can only close: it records no rank and settles nothing. It closes only the incarnation the
    operator read through the admin API (which is the capability: the ingress does not show it),
    and only if no opener arrived since they looked. Narrowing only, like any close.
    """
    meta = await ctx.get(RECORD, serde=META)
    if meta is None:
        return OperatorClosed(closed=False)  # idempotent: not open (closed already, or never)
    if meta.incarnation != req.incarnation:
        return OperatorClosed(closed=False, refused="the group was closed and opened again since")
    if len(meta.openers) != req.openers:
        return OperatorClosed(closed=False, refused="the group was reopened since: look at it again")
    requested = LoserPolicy.CANCEL if req.cancel else None
    effective = effective_disposition(meta.disposition, requested, group_key=ctx.key())
    cancelled = await close_group(ctx, meta, effective)
    logs.event("group.operator_closed", ctx, group_key=ctx.key())
    return OperatorClosed(closed=True, disposition=effective, cancelled=cancelled)


async def close_group(ctx: restate.ObjectContext, meta: GroupMeta, effective: LoserPolicy) -> int:
    """The ADR's close under ``effective``; how many cancels it sent.

    Decision 61: a pumped group's pump that reported an awakeable and still listens on it is released
    through it, with no invocation, unless this close cancels: then, as any other pumped group's,
    through its `forget`, or by the pump itself once its report finds the group closed.
    """
    mode = mode_for(meta.mode)
    # Every read before the first effect (decision 22): the closing caller's own cancellation
    # surfaces only at an await, so a close is never cut off half done.
    cancels = await mode.to_cancel(ctx, meta) if effective is LoserPolicy.CANCEL else []
    settled = await ranks_for(meta.incarnation).count(ctx, meta)
    cancels = mode.left_to_cancel(meta, cancels, settled)
    releases = await mode.releases(ctx, meta)
    # A pumped group's `releases` read this link too: two journaled reads, which a close in flight
    # across an in-place upgrade replays; kept both (decision 48).
    link = await mode.pump_link(ctx)
    watches = await ctx.get(CANCELLED_AT_CLOSE, serde=STRINGS) or []
    # One cancel per unsettled child, not awaiting termination (ADR, "Close deletes…").
    cancel_runs(ctx, cancels, meta)
    if link is not None and link.awakeable is not None and not link.left and not cancels:
        # The pump listens: resolved, it releases its store (and its further slices') and stops.
        # Not when this close cancels (decision 65): a pump that saw its awakeable before its own
        # cancellation would return and leave its pending calls running (calls outlive their caller);
        # cancelled, it waits for their Cancelled terminals, finds the group closed at its report and
        # releases then, and the forget queued behind its run finds nothing left.
        ctx.resolve_awakeable(link.awakeable, LISTENED, serde=BYTES)
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
