"""`LashGroup`'s guard of its waiting callers (decision 83). A caller waits on wakes that only the
group's record holds; a record deleted outside lash (an operator's `restate state clear`) would leave
it waiting for ever. So each registration of wakes is looked at again later, by a message that
carries their ids: if the record is gone, they are ended as a close ends them."""

from __future__ import annotations

from datetime import timedelta

import restate

from ... import logs
from ...contract import GroupNotOpen
from ..wire._errors import NOT_FOUND
from ..wire._messages import Guard
from ..wire._records import META, STRINGS, GroupMeta, Waiter
from ..wire._routes import GROUP_GUARD
from ._group_common import WATCHES, GroupSettings, keep_watch

__all__ = ["LOOK_AT_MOST_EVERY", "WAITER_CHECK", "guard_waiters", "on_guard"]

# How long after its wakes were registered a waiting caller's group is first looked at; each look
# after that comes twice as long after the one before, up to LOOK_AT_MOST_EVERY. So a caller whose
# group's record is deleted under it ends within about as long as it had waited (a day at most),
# and the wakes of a caller that will never come back (it saved its handle and returned) cost a
# look a day.
WAITER_CHECK = timedelta(minutes=5)
LOOK_AT_MOST_EVERY = timedelta(days=1)


async def guard_waiters(
    ctx: restate.ObjectContext, meta: GroupMeta, waiters: list[Waiter], settings: GroupSettings
) -> None:
    """Have `guard` look at ``waiters``, just registered, a check interval from now; kept with the
    watches, so a close (which ends its waiters itself) cancels it. Last in its handler: what an
    earlier release journaled there is a prefix of what this one does (decision 48)."""
    if waiters:
        delay = settings.waiter_check
        guard = Guard(
            incarnation=meta.incarnation, waiters=[w.awakeable for w in waiters], after_ms=_ms(delay)
        )
        await keep_watch(ctx, GROUP_GUARD.send(ctx, ctx.key(), guard, delay=delay))


async def on_guard(ctx: restate.ObjectContext, guard: Guard) -> None:
    """End the guarded wakes if the group's record is gone; else look again, later, at those still
    registered (a wake leaves the record when its rank wakes it, or at the close)."""
    meta = await ctx.get("meta", serde=META)
    if meta is None or meta.incarnation != guard.incarnation:
        # A close cancels the guards it keeps, under the same lock, so the record went another way.
        gone = GroupNotOpen.record_gone(group_key=ctx.key())
        for awakeable in guard.waiters:
            ctx.reject_awakeable(awakeable, gone.to_wire(), NOT_FOUND)
        logs.event("group.record_gone", ctx, group_key=ctx.key(), waiters=len(guard.waiters))
        return  # nothing written: the record stays gone
    registered = {waiter.awakeable for waiter in meta.waiters}
    waiting = [awakeable for awakeable in guard.waiters if awakeable in registered]
    watches = [w for w in await ctx.get(WATCHES, serde=STRINGS) or [] if w != ctx.request().id]
    if waiting:
        delay = min(timedelta(milliseconds=2 * guard.after_ms), LOOK_AT_MOST_EVERY)
        again = Guard(incarnation=meta.incarnation, waiters=waiting, after_ms=_ms(delay))
        watches.append(await GROUP_GUARD.send(ctx, ctx.key(), again, delay=delay).invocation_id())
    ctx.set(WATCHES, watches, serde=STRINGS)


def _ms(delay: timedelta) -> int:
    return int(delay.total_seconds() * 1000)
