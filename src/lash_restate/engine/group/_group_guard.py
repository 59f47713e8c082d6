"""`LashGroup`'s guard of its waiting callers (decision 83). A caller waits on wakes that only the
group's record holds; a record deleted outside lash (an operator's `restate state clear`) would leave
it waiting for ever. So each registration of wakes is looked at again later, by a message that
carries their ids: if the record is gone, they are ended as a close ends them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import restate

from ... import logs
from ...contract import GroupNotOpen
from ..wire._errors import NOT_FOUND
from ..wire._messages import Guard
from ..wire._records import GUARDED, GUARDS, META, RECORD, STRINGS, GroupMeta, Waiter
from ..wire._routes import GROUP_GUARD
from ._group_common import CANCELLED_AT_CLOSE, GroupSettings, cancel_at_close

__all__ = ["LOOK_AT_MOST_EVERY", "WAITER_CHECK", "guard_waiters", "on_guard"]

# How long after its wakes were registered a waiting caller's group is first looked at; each look
# after that comes twice as long after the one before, up to LOOK_AT_MOST_EVERY. So a caller whose
# group's record is deleted under it ends within about as long as it had waited (a day at most),
# and the wakes of a caller that will never come back (it saved its handle and returned) cost a
# look a day.
WAITER_CHECK = timedelta(minutes=5)
LOOK_AT_MOST_EVERY = timedelta(days=1)


async def guard_waiters(
    ctx: restate.ObjectContext,
    meta: GroupMeta,
    waiters: list[Waiter],
    settings: GroupSettings,
    watch: restate.SendHandle | None = None,
) -> None:
    """Have `guard` look at ``waiters``, just registered, a check interval from now (``meta``: the
    group's record, with them (an open's) or as it stood before (an await's); either way its waiters
    hold every wake a pending guard may carry, as no guard carries these yet); kept
    with the watches, so a close (which ends its waiters itself) cancels it. Last in its handler: what
    an earlier release journaled there is a prefix of what this one does (decision 48).

    A caller registers its next wakes once it has read every rank its earlier ones were for, so the
    guards of a group read quickly would pile up until their first look: each registration cancels
    the pending guards none of whose wakes is still registered, and a group keeps a few at most.

    ``watch``, a watch this handler sent just before (`send_watch`), is kept with the guard: both
    sends reach Restate together, and their ids come back in one round trip.
    """
    wakes = [waiter.awakeable for waiter in waiters]
    if not wakes:
        if watch is not None:
            await cancel_at_close(ctx, watch)
        return
    delay = settings.waiter_check
    guard = Guard(incarnation=meta.incarnation, waiters=wakes, after_ms=_ms(delay))
    handle = GROUP_GUARD.send(ctx, ctx.key(), guard, delay=delay)
    # Read after the send on purpose: the guard's id (and the watch's) come back meanwhile.
    guarded, watches = await _pending(ctx)
    if watch is not None:
        watches = [*watches, await watch.invocation_id()]
    registered = {waiter.awakeable for waiter in meta.waiters}
    moot = {invocation for invocation, carried in guarded.items() if registered.isdisjoint(carried)}
    for invocation in sorted(moot):
        ctx.cancel_invocation(invocation)
    await _keep(ctx, guarded, watches, moot, handle, wakes)


async def on_guard(ctx: restate.ObjectContext, guard: Guard) -> None:
    """End the guarded wakes if the group's record is gone; else look again, later, at those still
    registered (a wake leaves the record when its rank wakes it, or at the close)."""
    meta = await ctx.get(RECORD, serde=META)
    if meta is None or meta.incarnation != guard.incarnation:
        # A close cancels the guards it keeps, under the same lock, so the record went another way.
        gone = GroupNotOpen.record_gone(group_key=ctx.key())
        for awakeable in guard.waiters:
            ctx.reject_awakeable(awakeable, gone.to_wire(), NOT_FOUND)
        logs.event("group.record_gone", ctx, group_key=ctx.key(), waiters=len(guard.waiters))
        return  # nothing written: the record stays gone
    registered = {waiter.awakeable for waiter in meta.waiters}
    waiting = [awakeable for awakeable in guard.waiters if awakeable in registered]
    handle = None
    if waiting:
        delay = min(timedelta(milliseconds=2 * guard.after_ms), LOOK_AT_MOST_EVERY)
        again = Guard(incarnation=meta.incarnation, waiters=waiting, after_ms=_ms(delay))
        handle = GROUP_GUARD.send(ctx, ctx.key(), again, delay=delay)
    guarded, watches = await _pending(ctx)
    # This look has run: its own id leaves the pending guards and the watches a close cancels.
    await _keep(ctx, guarded, watches, {ctx.request().id}, handle, waiting)


async def _pending(ctx: restate.ObjectContext) -> tuple[dict[str, list[str]], list[str]]:
    """The pending guards (invocation id -> the wakes each carries) and the watches, read together."""
    guarded: Any = ctx.get(GUARDED, serde=GUARDS)
    watches: Any = ctx.get(CANCELLED_AT_CLOSE, serde=STRINGS)
    await restate.gather(guarded, watches)
    return await guarded or {}, await watches or []


async def _keep(
    ctx: restate.ObjectContext,
    guarded: dict[str, list[str]],
    watches: list[str],
    dropped: set[str],
    handle: restate.SendHandle | None,
    wakes: list[str],
) -> None:
    """Record the pending guards without those ``dropped``, with ``handle``'s (carrying ``wakes``),
    under `guarded` and among the watches the close cancels."""
    kept = {invocation: carried for invocation, carried in guarded.items() if invocation not in dropped}
    watches = [watch for watch in watches if watch not in dropped]
    if handle is not None:
        invocation = await handle.invocation_id()
        kept[invocation] = wakes
        watches.append(invocation)
    ctx.set(CANCELLED_AT_CLOSE, watches, serde=STRINGS)
    if kept:
        ctx.set(GUARDED, kept, serde=GUARDS)
    else:
        ctx.clear(GUARDED)


def _ms(delay: timedelta) -> int:
    return int(delay.total_seconds() * 1000)
