"""`lash.select(ctx, name=child, ...)` on every tier: the winner's name and value, as
`restate.select` answers; a `race` (its losers run on unless ``losers=CANCEL``), whose rejection is
raised naming the child (decision 52)."""

from __future__ import annotations

import asyncio

from ._scenario import scenario
from ._steps import Scope, event, sleep, typed
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []

ENDED_WITHIN = 30  # how long a cancelled loser may take to end before the test calls it left running


async def _ended(tier: Tier, replay_key: str) -> None:
    async with asyncio.timeout(ENDED_WITHIN):
        await tier.wait_child_finished(replay_key)


@scenario("select")
async def select_answers_the_winners_name_and_value(tier: Tier, children: ChildKind) -> None:
    """The losers run on by default (ECMA-262's race): the approval arm, which lost to the quote,
    settles once its event comes."""
    s = Scope(children)
    approval = s.event("approval")
    async with Turn(tier) as t:
        selected = t.front(
            "select",
            s.key(),
            {"approval": event(approval), "quote": typed("quote", {"sku": "tea", "qty": 1})},
        )
    assert selected.ok == {"winner": "quote", "value": {"type": "Quote", "value": {"sku": "tea", "total": 7}}}
    await tier.wait_closed(s.key())
    await tier.emit(approval, "late")  # the running loser settles (and no waiter is left behind)
    await tier.wait_child_ended(f"{s.key()}/0")


@scenario("select")
async def select_with_cancel_losers_cancels_the_losing_arm_whichever_wins(
    tier: Tier, children: ChildKind
) -> None:
    """``losers=CANCEL``: the deadline wins and the hour-long call is cancelled; the call wins and
    the ten-minute deadline is cancelled. Either loser ends now, not when it would have."""
    s = Scope(children)
    slow = typed("quote", {"sku": "tea", "qty": 1, "delay_ms": 3_600_000})
    fast = typed("quote", {"sku": "tea", "qty": 1})
    async with Turn(tier) as t:
        timed_out = t.front("select", s.key("late"), {"paid": slow, "late": sleep(50)}, losers="cancel")
        charged = t.front("select", s.key("paid"), {"paid": fast, "late": sleep(600_000)}, losers="cancel")
    assert timed_out.ok == {"winner": "late", "value": {"type": "NoneType", "value": None}}
    assert charged.ok == {"winner": "paid", "value": {"type": "Quote", "value": {"sku": "tea", "total": 7}}}
    await _ended(tier, f"{s.key('late')}/0")
    await _ended(tier, f"{s.key('paid')}/1")
    await tier.wait_closed(s.key("late"))
    await tier.wait_closed(s.key("paid"))


@scenario("select")
async def select_raises_a_rejecting_winner_with_its_name(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    declined = typed("quote", {"sku": "tea", "qty": 1, "refuse": "card declined"})
    async with Turn(tier) as t:
        rejected = t.front("select", s.key(), {"deadline": sleep(600_000), "paid": declined}, losers="cancel")
    assert rejected.ok == {
        "rejected": {
            "rank": 1,
            "position": 1,
            "replay_key": f"{s.key()}/1",
            "outcome": {"type": "err", "message": "card declined", "code": "409"},
        },
        "name": "paid",
    }
    await _ended(tier, f"{s.key()}/0")
    await tier.wait_closed(s.key())
