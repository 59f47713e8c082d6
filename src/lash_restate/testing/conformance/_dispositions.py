"""Loser dispositions as every tier shows them (ADR, "Loser disposition is declared at open").

The combinators fix or default the disposition they declare; `all` and `allSettled` refuse any
other; `select` (a signal against a deadline) is a `First` group with `Cancel` whose losing arm
ends cancelled whichever arm wins; and a close of a `Cancel` group, redriven, stays harmless.
"""

from __future__ import annotations

import asyncio

from ._answers import ErrorBody
from ._scenario import scenario
from ._steps import Scope, event, fail, sleep
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []

# How long a loser may take to end once cancelled before the test calls it left running; a loser
# that is not cancelled would run for minutes (a long timer) or forever (an event never emitted).
ENDED_WITHIN = 30


async def _ended(tier: Tier, replay_key: str) -> None:
    async with asyncio.timeout(ENDED_WITHIN):
        await tier.wait_child_finished(replay_key)


@scenario("dispositions")
async def all_failing_fast_cancels_the_rest_once_a_rejection_is_consumed(
    tier: Tier, children: ChildKind
) -> None:
    """`all(on_reject=Cancel)`: the group declares `RunToCompletion` at open (above), and the close
    narrows it to `Cancel` once the first rejection is consumed (ADR: close may only narrow), so a
    child still running ends now instead of running on; a group that fulfils is closed as declared."""
    s = Scope(children)
    group = s.group([sleep(600_000), fail("bad"), event(s.event("never"))])
    async with Turn(tier) as t:
        result = t.all(group, on_reject="cancel")
    assert result.ok.status == "rejected"
    assert result.ok.rejection.position == 1
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c0")  # bounded wait: fails if the timer runs on
    await tier.wait_child_finished(f"{s.key()}/c2")  # and if the event wait does

    s2 = Scope(children)
    async with Turn(tier) as t:
        fulfilled = t.all(s2.group([s2.echo("a"), s2.echo("b")]), on_reject="cancel")
    assert fulfilled.ok.value == ["a", "b"]


@scenario("dispositions")
async def all_and_all_settled_refuse_a_group_declaring_cancel(tier: Tier, children: ChildKind) -> None:
    """ADR: "`all` and `allSettled` declare `RunToCompletion`": a group declared otherwise is refused
    typed, before anything is recorded; `race` and `any` accept a declared `Cancel`."""
    s = Scope(children)
    cancel = s.group([s.echo("a"), s.echo("b")], disposition="cancel")
    async with Turn(tier) as t:
        refused_all, refused_settled = t.all(cancel), t.all_settled(cancel)
    for kind, refused in (("all", refused_all), ("all_settled", refused_settled)):
        assert refused.error == ErrorBody(
            code="disposition_drift",
            message=f"{kind} needs disposition run_to_completion, the group declares cancel",
            group_key=s.key(),
        )
    assert s.key() not in await tier.open_groups()
    # Nothing was recorded: the same key opens afresh as a `RunToCompletion` group.
    async with Turn(tier) as t:
        fulfilled = t.all(s.group([s.echo("a"), s.echo("b")]))
    assert fulfilled.ok.value == ["a", "b"]
    s2 = Scope(children)
    async with Turn(tier) as t:
        raced = t.race(s2.group([s2.echo("r")], wake="first", disposition="cancel"))
    async with Turn(tier) as t:
        anyone = t.any(s2.group([s2.echo("y")], wake="first_success", disposition="cancel", batch="any"))
    assert raced.ok.value == "r" and anyone.ok.value == "y"


@scenario("dispositions")
async def select_returns_the_event_and_cancels_the_deadline_arm(tier: Tier, children: ChildKind) -> None:
    """ADR, Consequences: a signal/deadline select is a two-child `First` group with `Cancel`.

    The select parks until the event is emitted, returns it, and its ten-minute deadline arm ends
    cancelled at once instead of running on; the group is closed.
    """
    s = Scope(children)
    name = s.event("approved")
    turn = Turn(tier)
    selected = turn.signal_or_deadline(s.key(), name, deadline_ms=600_000)
    parked = asyncio.create_task(turn.run())
    async with asyncio.timeout(30):
        while s.key() not in await tier.open_groups():
            assert not parked.done(), parked.result()
            await asyncio.sleep(0.05)
    await tier.emit(name, {"by": "ops"})
    await parked
    assert selected.wire == {"ok": {"winner": "event", "value": {"by": "ops"}}}
    await _ended(tier, f"{s.key()}/sel:deadline")
    await tier.wait_closed(s.key())


@scenario("dispositions")
async def select_returns_the_deadline_and_cancels_the_event_arm(tier: Tier, children: ChildKind) -> None:
    """The other outcome: no event comes, the deadline wins with null, and the event arm (which would
    otherwise wait forever) ends cancelled; the group is closed."""
    s = Scope(children)
    async with Turn(tier) as t:
        selected = t.signal_or_deadline(s.key(), s.event("never"), deadline_ms=50)
    assert selected.wire == {"ok": {"winner": "deadline", "value": None}}
    await _ended(tier, f"{s.key()}/sel:event")
    await tier.wait_closed(s.key())


@scenario("dispositions")
async def select_with_a_rejected_event_rejects_and_cancels_the_deadline_arm(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    name = s.event("denied")
    await tier.reject(name, "no")
    async with Turn(tier) as t:
        selected = t.signal_or_deadline(s.key(), name, deadline_ms=600_000)
    assert selected.wire["ok"] == {
        "winner": "event",
        "rejected": {
            "rank": 1,
            "position": 0,
            "replay_key": f"{s.key()}/sel:event",
            "outcome": {"type": "err", "message": "no", "code": "rejected"},
        },
    }
    await _ended(tier, f"{s.key()}/sel:deadline")
    await tier.wait_closed(s.key())


@scenario("dispositions")
async def a_redriven_close_of_a_cancel_group_is_harmless_and_ends_its_losers(
    tier: Tier, children: ChildKind
) -> None:
    """ADR: close is idempotent, and "a redriven close re-issues the same idempotent cancels harmlessly".

    A `Cancel` group with two unsettled children is closed twice by its opener and once more by a
    fresh turn restoring the saved handle: every close answers, the losers (a ten-minute timer and an
    event never emitted) end cancelled, and the group is gone.
    """
    s = Scope(children)
    losers = [sleep(600_000), event(s.event("never"))]
    async with Turn(tier) as t:
        g = t.open(s.group([s.echo("won"), *losers], wake="first", disposition="cancel"))
        won, first, second = g.next(), g.close(), g.close()
    assert won.ok.position == 0
    assert first.ok is None and second.ok is None
    async with Turn(tier) as t:
        redriven_group = t.resume(g.opened.ok)
        redriven, after = redriven_group.close(), redriven_group.next()
    assert redriven.ok is None
    assert after.error.code == "group_not_open"
    for loser in (1, 2):
        await _ended(tier, f"{s.key()}/c{loser}")
    await tier.wait_closed(s.key())
