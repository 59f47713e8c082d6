"""Loser dispositions as every tier shows them (ADR, "Loser disposition is declared at open").

The combinators fix or default the disposition they declare; `all` and `allSettled` refuse any
other; `select` (a signal against a deadline) is a `First` group with `Cancel` whose losing arm
ends cancelled whichever arm wins; and a close of a `Cancel` group, redriven, stays harmless.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lash_restate.combinators import all_, all_settled, any_, race, signal_or_deadline
from lash_restate.contract import (
    GroupHandle,
    LoserPolicy,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ToolCall,
)
from lash_restate.memory import MemoryHost
from lash_restate.testing import demo_tools
from tests.conformance.builders import (
    Scope,
    close,
    combine,
    echo,
    err,
    event,
    fail,
    next_,
    ok,
    open_,
    sleep,
    use,
)

# How long a loser may take to end once cancelled before the test calls it left running; a loser
# that is not cancelled would run for minutes (a long timer) or forever (an event never emitted).
ENDED_WITHIN = 30


async def test_the_combinators_declare_the_adrs_dispositions() -> None:
    """ADR: `all` and `allSettled` declare `RunToCompletion`; `race` and `any` default to it (ECMA-262)
    and may declare `Cancel`; a signal/deadline `select` declares `Cancel`.

    Recorded where every host receives it: the group handed to `open_effect_group`.
    """
    declared: dict[str, tuple[str, LoserPolicy]] = {}

    class Recording(MemoryHost):
        async def open_effect_group(self, group: RuntimeEffectGroup) -> GroupHandle:
            declared[str(group.key).split(":")[2]] = (group.wake.value, group.disposition)
            return await super().open_effect_group(group)

    def arms(batch: str) -> list[RuntimeEffectEnvelope]:
        return [RuntimeEffectEnvelope(command=ToolCall(tool="echo", args={"value": batch}), replay_key=batch)]

    host = Recording(resolver=demo_tools())
    try:
        await all_(host, "s:group:all:0", arms("all"))
        await all_(host, "s:group:all_fail_fast:0", arms("all_fail_fast"), on_reject=LoserPolicy.CANCEL)
        await all_settled(host, "s:group:all_settled:0", arms("all_settled"))
        await race(host, "s:group:race:0", arms("race"))
        await any_(host, "s:group:any:0", arms("any"))
        await race(host, "s:group:race_cancel:0", arms("race_cancel"), losers=LoserPolicy.CANCEL)
        await any_(host, "s:group:any_cancel:0", arms("any_cancel"), losers=LoserPolicy.CANCEL)
        await signal_or_deadline(host, "s:group:select:0", event="e", deadline_ms=0, replay_key_prefix="sel")
    finally:
        await host.aclose()
    rtc, cancel = LoserPolicy.RUN_TO_COMPLETION, LoserPolicy.CANCEL
    assert declared == {
        "all": ("all", rtc),
        "all_fail_fast": ("all", rtc),  # fail fast narrows at the close, never at the open
        "all_settled": ("all", rtc),
        "race": ("first", rtc),
        "any": ("first_success", rtc),
        "race_cancel": ("first", cancel),
        "any_cancel": ("first_success", cancel),
        "select": ("first", cancel),
    }


async def test_all_failing_fast_cancels_the_rest_once_a_rejection_is_consumed(tier: Any) -> None:
    """`all(on_reject=Cancel)`: the group declares `RunToCompletion` at open (above), and the close
    narrows it to `Cancel` once the first rejection is consumed (ADR: close may only narrow), so a
    child still running ends now instead of running on; a group that fulfils is closed as declared."""
    s = Scope()
    group = s.group([sleep(600_000), fail("bad"), event(s.event("never"))])
    [result] = await tier.turn(combine("all", group, on_reject="cancel"))
    assert ok(result)["status"] == "rejected"
    assert ok(result)["reason"]["position"] == 1
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c0")  # bounded wait: fails if the timer runs on
    await tier.wait_child_finished(f"{s.key()}/c2")  # and if the event wait does

    s2 = Scope()
    [fulfilled] = await tier.turn(combine("all", s2.group([echo("a"), echo("b")]), on_reject="cancel"))
    assert ok(fulfilled)["value"] == ["a", "b"]


async def test_all_and_all_settled_refuse_a_group_declaring_cancel(tier: Any) -> None:
    """ADR: "`all` and `allSettled` declare `RunToCompletion`": a group declared otherwise is refused
    typed, before anything is recorded; `race` and `any` accept a declared `Cancel`."""
    s = Scope()
    cancel = s.group([echo("a"), echo("b")], disposition="cancel")
    [refused_all, refused_settled] = await tier.turn(combine("all", cancel), combine("all_settled", cancel))
    for kind, refused in (("all", refused_all), ("all_settled", refused_settled)):
        assert err(refused) == {
            "code": "disposition_drift",
            "message": f"{kind} needs disposition run_to_completion, the group declares cancel",
            "group_key": s.key(),
        }
    assert s.key() not in await tier.open_groups()
    # Nothing was recorded: the same key opens afresh as a `RunToCompletion` group.
    [fulfilled] = await tier.turn(combine("all", s.group([echo("a"), echo("b")])))
    assert ok(fulfilled)["value"] == ["a", "b"]
    s2 = Scope()
    [raced] = await tier.turn(combine("race", s2.group([echo("r")], wake="first", disposition="cancel")))
    [anyone] = await tier.turn(
        combine("any", s2.group([echo("y")], wake="first_success", disposition="cancel", batch="any"))
    )
    assert ok(raced)["value"] == "r" and ok(anyone)["value"] == "y"


def _select(s: Scope, name: str, deadline_ms: int) -> dict[str, Any]:
    return {
        "type": "select",
        "key": s.key(),
        "event": name,
        "deadline_ms": deadline_ms,
        "replay_key_prefix": f"{s.key()}/sel",
    }


async def _ended(tier: Any, replay_key: str) -> None:
    async with asyncio.timeout(ENDED_WITHIN):
        await tier.wait_child_finished(replay_key)


async def test_select_returns_the_event_and_cancels_the_deadline_arm(tier: Any) -> None:
    """ADR, Consequences: a signal/deadline select is a two-child `First` group with `Cancel`.

    The select parks until the event is emitted, returns it, and its ten-minute deadline arm ends
    cancelled at once instead of running on; the group is closed.
    """
    s = Scope()
    name = s.event("approved")
    parked = asyncio.create_task(tier.turn(_select(s, name, deadline_ms=600_000)))
    async with asyncio.timeout(30):
        while s.key() not in await tier.open_groups():
            assert not parked.done(), parked.result()
            await asyncio.sleep(0.05)
    await tier.emit(name, {"by": "ops"})
    [selected] = await parked
    assert ok(selected) == {"winner": "event", "value": {"by": "ops"}}
    await _ended(tier, f"{s.key()}/sel:deadline")
    await tier.wait_closed(s.key())


async def test_select_returns_the_deadline_and_cancels_the_event_arm(tier: Any) -> None:
    """The other outcome: no event comes, the deadline wins with null, and the event arm (which would
    otherwise wait forever) ends cancelled; the group is closed."""
    s = Scope()
    [selected] = await tier.turn(_select(s, s.event("never"), deadline_ms=50))
    assert ok(selected) == {"winner": "deadline", "value": None}
    await _ended(tier, f"{s.key()}/sel:event")
    await tier.wait_closed(s.key())


async def test_select_with_a_rejected_event_rejects_and_cancels_the_deadline_arm(tier: Any) -> None:
    s = Scope()
    name = s.event("denied")
    await tier.reject(name, "no")
    [selected] = await tier.turn(_select(s, name, deadline_ms=600_000))
    assert ok(selected) == {
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


async def test_a_redriven_close_of_a_cancel_group_is_harmless_and_ends_its_losers(tier: Any) -> None:
    """ADR: close is idempotent, and "a redriven close re-issues the same idempotent cancels harmlessly".

    A `Cancel` group with two unsettled children is closed twice by its opener and once more by a
    fresh turn restoring the saved handle: every close answers, the losers (a ten-minute timer and an
    event never emitted) end cancelled, and the group is gone.
    """
    s = Scope()
    losers = [sleep(600_000), event(s.event("never"))]
    group = s.group([echo("won"), *losers], wake="first", disposition="cancel")
    [opened, won, first, second] = await tier.turn(open_(group), next_(), close(), close())
    assert ok(won)["position"] == 0
    assert ok(first) is None and ok(second) is None
    [_, redriven, after] = await tier.turn(use(ok(opened)), close(), next_())
    assert ok(redriven) is None
    assert err(after)["code"] == "group_not_open"
    for loser in (1, 2):
        await _ended(tier, f"{s.key()}/c{loser}")
    await tier.wait_closed(s.key())
