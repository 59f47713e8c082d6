"""The effect-group contract, as behaviour every tier must show (ADR, Decision and Normative sections)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

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
    save,
    sleep,
    tool,
    use,
)


def handle_of(text: str) -> dict[str, Any]:
    return json.loads(text)  # type: ignore[no-any-return]


async def test_open_returns_once_recorded_with_cursor_at_zero(tier: Any) -> None:
    s = Scope()
    group = s.group([event(s.event("never")), event(s.event("never2"))])
    [opened] = await tier.turn(open_(group))
    handle = handle_of(ok(opened))
    # ADR: open returns once the group is durably recorded, not when a child settles.
    assert handle == {"group_key": s.key(), "child_count": 2, "consumed": 0}
    assert s.key() in await tier.open_groups()


async def test_ranks_follow_settlement_order_not_input_order(tier: Any) -> None:
    s = Scope()
    a, b, c = s.event("a"), s.event("b"), s.event("c")
    [opened] = await tier.turn(open_(s.group([event(a), event(b), event(c)])))
    h = ok(opened)
    await tier.emit(c, "C")
    [_, first, h1] = await tier.turn(use(h), next_(), save())
    await tier.emit(a, "A")
    [_, second, h2] = await tier.turn(use(ok(h1)), next_(), save())
    await tier.emit(b, "B")
    [_, third] = await tier.turn(use(ok(h2)), next_())
    ranks = [(ok(r)["rank"], ok(r)["position"], ok(r)["outcome"]) for r in (first, second, third)]
    assert ranks == [
        (1, 2, {"type": "ok", "value": "C"}),
        (2, 0, {"type": "ok", "value": "A"}),
        (3, 1, {"type": "ok", "value": "B"}),
    ]


async def test_same_rank_is_served_again_to_a_fresh_invocation(tier: Any) -> None:
    """ADR cursor rule: awaiting rank consumed+1 before and after a crash yields the same settlement."""
    s = Scope()
    first_ev, second_ev = s.event("x"), s.event("y")
    [opened] = await tier.turn(open_(s.group([event(first_ev), event(second_ev)])))
    saved = ok(opened)
    await tier.emit(second_ev, 2)
    [_, before] = await tier.turn(use(saved), next_())
    await tier.emit(first_ev, 1)
    # A fresh invocation holding only the saved cursor (consumed=0) reads rank 1 again.
    [_, after, again] = await tier.turn(use(saved), next_(), next_())
    assert ok(after) == ok(before)
    assert ok(before)["position"] == 1
    assert ok(again)["rank"] == 2 and ok(again)["position"] == 0


async def test_outcomes_too_large_to_ride_the_wake_are_served_the_same_live_and_after(tier: Any) -> None:
    """Outcomes past the inline limit (16 KiB on Restate) are read from where they live: served
    the same to the live caller and to a fresh invocation, for a pair and for a wider group."""
    for width in (2, 3):  # on Restate: the direct path, then the batched one (decision 20)
        s = Scope()
        sizes = [20_000 + i for i in range(width)]
        group = s.group([tool("blob", {"size": n}) for n in sizes])
        [opened, *live] = await tier.turn(open_(group), *[next_() for _ in sizes], save())
        served = live[:-1]
        assert sorted(len(ok(r)["outcome"]["value"]) for r in served) == sizes
        [_, *again] = await tier.turn(use(ok(opened)), *[next_() for _ in sizes], close())
        assert [ok(r) for r in again[:-1]] == [ok(r) for r in served]
        await tier.wait_closed(s.key())


async def test_reopen_returns_zero_and_the_callers_cursor_wins(tier: Any) -> None:
    s = Scope()
    group = s.group([echo("v0"), echo("v1"), echo("v2")])
    [_, r1, r2, saved] = await tier.turn(open_(group), next_(), next_(), save())
    assert handle_of(ok(saved))["consumed"] == 2
    [reopened, _, r3] = await tier.turn(open_(group), use(ok(saved)), next_())
    assert handle_of(ok(reopened))["consumed"] == 0
    assert ok(r3)["rank"] == 3
    positions = {ok(r1)["position"], ok(r2)["position"], ok(r3)["position"]}
    assert positions == {0, 1, 2}


async def test_cursor_overrun_is_refused_not_clamped(tier: Any) -> None:
    s = Scope()
    [_, first, overrun, saved] = await tier.turn(open_(s.group([echo(1)])), next_(), next_(), save())
    assert ok(first)["rank"] == 1
    assert err(overrun)["code"] == "cursor_overrun"
    assert handle_of(ok(saved))["consumed"] == 1


async def test_a_handle_with_another_child_count_is_refused(tier: Any) -> None:
    s = Scope()
    await tier.turn(open_(s.group([echo(1), echo(2)])))
    forged = json.dumps({"group_key": s.key(), "child_count": 3, "consumed": 0})
    [_, mismatch] = await tier.turn(use(forged), next_())
    assert err(mismatch)["code"] == "handle_mismatch"


async def test_cancelled_await_leaves_cursor_and_rank_untouched(tier: Any) -> None:
    s = Scope()
    late = s.event("late")
    [_, cancelled, saved] = await tier.turn(open_(s.group([event(late), echo("now", 0)])), next_(), save())
    # Rank 1 is the immediate echo; rank 2 waits for an event nobody has emitted yet.
    [_, waiting, after_cancel] = await tier.turn(use(ok(saved)), next_(cancel_after_ms=50), save())
    assert err(waiting)["code"] == "await_cancelled"
    assert handle_of(ok(after_cancel)) == handle_of(ok(saved))
    await tier.emit(late, "L")
    [_, served] = await tier.turn(use(ok(saved)), next_())
    assert ok(served)["rank"] == 2 and ok(served)["outcome"] == {"type": "ok", "value": "L"}
    assert ok(cancelled)["rank"] == 1


async def test_await_on_a_group_never_opened_is_refused(tier: Any) -> None:
    s = Scope()
    ghost = json.dumps({"group_key": s.key(), "child_count": 1, "consumed": 0})
    [_, refused] = await tier.turn(use(ghost), next_())
    assert err(refused)["code"] == "group_not_open"


async def test_a_close_takes_effect_before_the_callers_next_step_on_the_group(tier: Any) -> None:
    """However a close is delivered (decision 21), the closing caller's next step sees it done."""
    s = Scope()
    group = s.group([echo(1), event(s.event("never"))], wake="first")
    [_, _, closed, after, _, again, _] = await tier.turn(
        open_(group), next_(), close(), next_(), open_(group), next_(), close()
    )
    assert ok(closed) is None
    assert err(after)["code"] == "group_not_open"
    # Opened afresh after the close (not a reopen of the closed one): rank 1 is served again.
    assert ok(again)["position"] == 0 and ok(again)["rank"] == 1
    await tier.wait_closed(s.key())


async def test_a_group_reopened_after_close_is_not_disturbed_by_the_closed_ones_late_loser(tier: Any) -> None:
    """Open, close with a loser still running, open the same key afresh: when the old loser ends
    (its settlement is dropped, its store released) the new group's ranks stay readable, also by a
    fresh invocation."""
    s = Scope()
    gate = s.event("gate")
    group = s.group([echo("fast"), event(gate)], wake="first")
    await tier.turn(open_(group), next_(), close())
    [opened, first] = await tier.turn(open_(group), next_())
    await tier.emit(gate, "late")  # ends the old loser and the new group's second child alike
    [_, again, second, _] = await tier.turn(use(ok(opened)), next_(), next_(), close())
    assert ok(again) == ok(first)
    assert ok(second)["position"] == 1
    assert ok(second)["outcome"] == {"type": "ok", "value": "late"}
    await tier.wait_closed(s.key())


async def test_a_group_closed_by_another_invocation_refuses_the_ranks_this_one_already_received(
    tier: Any,
) -> None:
    """Decision 32: an await is answered by the group as it stands when the await begins, whatever
    this invocation received earlier.

    Turn A opens a group whose two children settle at once, consumes rank 1 and parks on an event.
    Turn B reopens the group, reads both ranks and closes it. Once A learns that (the event), its
    next await is refused `group_not_open` on every tier, as a fresh invocation's would be; rank 2,
    settled and delivered to A before the close, is not served from what A holds.
    """
    s = Scope()
    group = s.group([echo("a"), echo("b")])
    resumed = s.event("resumed")
    parked = s.group([event(resumed)], wake="first", batch="parked")
    after_one = json.dumps({"group_key": s.key(), "child_count": 2, "consumed": 1})
    turn_a = asyncio.create_task(
        tier.turn(open_(group), next_(), save(), combine("race", parked), use(after_one), next_())
    )
    while True:  # A has consumed rank 1 and parked on its event
        if parked["key"] in await tier.open_groups() or turn_a.done():
            break
        await asyncio.sleep(0.05)
    assert not turn_a.done(), turn_a.result()
    fresh = json.dumps({"group_key": s.key(), "child_count": 2, "consumed": 0})
    [_, _, one, two, closed] = await tier.turn(open_(group), use(fresh), next_(), next_(), close())
    assert [ok(one)["rank"], ok(two)["rank"], ok(closed)] == [1, 2, None]
    await tier.wait_closed(s.key())
    await tier.emit(resumed, "go")
    [_, first, saved, raced, _, second] = await turn_a
    assert ok(first) == ok(one)
    assert ok(raced)["value"] == "go"
    assert handle_of(ok(saved))["consumed"] == 1
    assert err(second)["code"] == "group_not_open"


async def test_close_is_idempotent_and_deletes_the_group(tier: Any) -> None:
    s = Scope()
    [opened, _, first_close, second_close] = await tier.turn(
        open_(s.group([echo(1)])), next_(), close(), close()
    )
    assert ok(first_close) is None and ok(second_close) is None
    await tier.wait_closed(s.key())
    # A replayed frame closing the same group again is harmless (ADR: close is idempotent).
    [_, third_close, reread] = await tier.turn(use(ok(opened)), close(), next_())
    assert ok(third_close) is None
    assert err(reread)["code"] == "group_not_open"


async def test_close_may_narrow_but_never_widen(tier: Any) -> None:
    s = Scope()
    pending = s.event("pending")
    cancel_group = s.group([echo(1), event(pending)], wake="first", disposition="cancel")
    [_, _, widen, still] = await tier.turn(open_(cancel_group), next_(), close("run_to_completion"), save())
    assert err(widen)["code"] == "disposition_widening"
    assert s.key() in await tier.open_groups()  # the refused close changed nothing
    assert handle_of(ok(still))["consumed"] == 1

    s2 = Scope()
    rtc_group = s2.group([echo(1), event(s2.event("p"))], wake="first")
    [_, _, narrowed] = await tier.turn(open_(rtc_group), next_(), close("cancel"))
    assert ok(narrowed) is None
    await tier.wait_closed(s2.key())


async def test_a_late_settlement_does_not_resurrect_a_closed_group(tier: Any) -> None:
    s = Scope()
    loser = s.event("loser")
    [_, winner, _] = await tier.turn(
        open_(s.group([echo("w"), event(loser)], wake="first")), next_(), close()
    )
    assert ok(winner)["position"] == 0
    await tier.emit(loser, "late")
    # The loser runs to completion (RunToCompletion) and settles into a closed group: ignored.
    await tier.wait_child_finished(f"{s.key()}/c1")
    await tier.wait_closed(s.key())
    stale = json.dumps({"group_key": s.key(), "child_count": 2, "consumed": 1})
    [_, probe] = await tier.turn(use(stale), next_())
    assert err(probe)["code"] == "group_not_open"


async def test_run_to_completion_losers_take_ranks_after_the_caller_is_gone(tier: Any) -> None:
    s = Scope()
    slow = s.event("slow")
    [_, won, saved] = await tier.turn(
        open_(s.group([event(slow), echo("fast")], wake="first")), next_(), save()
    )
    assert ok(won)["position"] == 1
    # The caller's turn has ended without close; the loser settles later and takes rank 2.
    await tier.emit(slow, "S")
    [_, loser] = await tier.turn(use(ok(saved)), next_())
    assert ok(loser) == {
        "rank": 2,
        "position": 0,
        "replay_key": f"{s.key()}/c0",
        "outcome": {"type": "ok", "value": "S"},
    }


async def test_failures_settle_as_errors_with_their_code(tier: Any) -> None:
    s = Scope()
    [_, settled] = await tier.turn(open_(s.group([fail("boom", code="E42")])), next_())
    assert ok(settled)["outcome"] == {"type": "err", "message": "boom", "code": "E42"}


async def test_reopen_is_fenced_on_shape(tier: Any) -> None:
    s = Scope()
    pending = [event(s.event("p0")), event(s.event("p1")), event(s.event("p2"))]
    await tier.turn(open_(s.group(pending)))
    shrunk = s.group(pending[:2])
    rewoken = s.group(pending, wake="first")
    redisposed = s.group(pending, disposition="cancel")
    changed = s.group([pending[0], event(s.event("other")), pending[2]])
    results = await tier.turn(open_(shrunk), open_(rewoken), open_(redisposed), open_(changed))
    assert [err(r)["code"] for r in results] == [
        "shape_mismatch",
        "shape_mismatch",
        "shape_mismatch",
        "replay_mismatch",
    ]
    assert err(results[3])["position"] == 1
    assert err(results[3])["replay_key"] == f"{s.key()}/c1"
    [same] = await tier.turn(open_(s.group(pending)))
    assert handle_of(ok(same))["consumed"] == 0


async def test_first_open_with_an_unroutable_child_refuses_whole_and_records_nothing(tier: Any) -> None:
    s = Scope()
    bad = s.group([echo(1), tool("no-such-tool", {}), echo(3)])
    first, second = (await tier.turn(open_(bad)))[0], (await tier.turn(open_(bad)))[0]
    # ADR, Decision, `open_effect_group`: two identical refusals are the observable form of
    # "the refusal journals nothing".
    assert err(first) == err(second)
    assert err(first)["code"] == "child_unroutable"
    assert err(first)["position"] == 1 and err(first)["replay_key"] == f"{s.key()}/c1"
    await tier.wait_closed(s.key())
    # Nothing was recorded: a differently shaped group under the same key opens as a *first* open.
    [fresh, settled] = await tier.turn(open_(s.group([echo("only")])), next_())
    assert handle_of(ok(fresh))["child_count"] == 1
    assert ok(settled)["outcome"] == {"type": "ok", "value": "only"}


async def test_group_constructor_refusals_reach_the_caller_typed(tier: Any) -> None:
    s = Scope()
    member = {"group_key": s.key(), "position": 0, "wake": "all", "disposition": "run_to_completion"}
    cases = {
        "foreign_group_key": [{**member, "group_key": s.key(batch="other")}, None],
        "permuted_position": [None, {**member, "position": 0}],
        "wake_rule_drift": [{**member, "wake": "first"}, None],
        "disposition_drift": [{**member, "disposition": "cancel"}, None],
    }
    for code, memberships in cases.items():
        group = s.group([echo(1), echo(2)], memberships=memberships)
        [refused] = await tier.turn(open_(group))
        assert err(refused)["code"] == code
    [empty] = await tier.turn(open_(s.group([])))
    assert err(empty)["code"] == "empty_group"
    [dup] = await tier.turn(open_(s.group([echo(1), echo(2)], replay_keys=["same", "same"])))
    assert err(dup)["code"] == "duplicate_replay_key" and err(dup)["position"] == 1
    await tier.wait_closed(s.key())


async def test_identical_batches_with_distinct_occurrences_do_not_share_a_counter(tier: Any) -> None:
    """ADR: two textually identical race calls in one iteration differ only by occurrence."""
    s = Scope()
    e0, e1 = s.event("e0"), s.event("e1")
    g0 = s.group([event(e0), echo("x")], occurrence=0, replay_keys=[f"{s.id}/r0/a", f"{s.id}/r0/b"])
    g1 = s.group([event(e1), echo("x")], occurrence=1, replay_keys=[f"{s.id}/r1/a", f"{s.id}/r1/b"])
    [h0, h1] = await tier.turn(open_(g0), open_(g1))
    await tier.emit(e1, "one")
    [_, a1, b1] = await tier.turn(use(ok(h1)), next_(), next_())
    [_, a0] = await tier.turn(use(ok(h0)), next_())
    assert [ok(a1)["rank"], ok(b1)["rank"], ok(a0)["rank"]] == [1, 2, 1]
    assert {ok(a1)["position"], ok(b1)["position"]} == {0, 1}
    assert ok(a0)["position"] == 1
    assert {s.key(occurrence=0), s.key(occurrence=1)} <= await tier.open_groups()


async def test_sleep_children_are_durable_timers_that_fulfil_with_null(tier: Any) -> None:
    s = Scope()
    [_, first, second] = await tier.turn(open_(s.group([sleep(300), sleep(1)])), next_(), next_())
    assert ok(first)["outcome"] == {"type": "ok", "value": None}
    assert {ok(first)["position"], ok(second)["position"]} == {0, 1}


async def test_a_cancel_group_whose_holder_returned_keeps_its_losers_for_a_resumer(tier: Any) -> None:
    """Decision 13: a turn that returns with its group open has parked a continuation, not crashed.

    The declared `Cancel` does not apply: the loser runs on, and a fresh turn that reopens the group
    and restores the saved handle receives its real outcome.
    """
    s = Scope()
    gate = s.event("gate")
    group = s.group([echo("won"), event(gate)], wake="first", disposition="cancel")
    [_, won, saved] = await tier.turn(open_(group), next_(), save())  # ends normally, no close
    assert ok(won)["position"] == 0
    assert s.key() in await tier.open_groups()
    await tier.emit(gate, "payload")
    [_, _, loser, _] = await tier.turn(open_(group), use(ok(saved)), next_(), close())
    assert ok(loser)["position"] == 1
    assert ok(loser)["outcome"] == {"type": "ok", "value": "payload"}


async def test_a_child_whose_tool_was_missing_for_a_while_settles_once_a_reopen_finds_it(tier: Any) -> None:
    """Decision 48: a child whose runner went missing and came back. The process restarts without the
    `count` tool while that child runs: its run ends with no outcome (a miss is a routing fact, never
    an outcome), the group stays listed and the rank stays unallocated. The tool is restored; a
    reopen (which resolves what it dispatches and refuses nothing) runs the child again, and the
    resumed group finishes with the tool's real outcome, the side effect done once."""
    s = Scope()
    name = f"{s.id}-slow"
    group = s.group([tool("count", {"name": name, "value": "slow", "delay_ms": 4000}), echo("fast")])
    [opened] = await tier.turn(open_(group))
    await tier.restart(without="count")  # the deployment lost the tool while the child ran
    await tier.wait_child_ended(f"{s.key()}/c0")
    [_, fast, gone] = await tier.turn(use(ok(opened)), next_(), next_(cancel_after_ms=300))
    assert ok(fast)["position"] == 1
    assert err(gone)["code"] == "await_cancelled"  # no outcome invented while the tool was gone
    assert s.key() in await tier.open_groups()
    await tier.restart()  # the tool is back
    [_, _, first, second] = await tier.turn(open_(group), use(ok(opened)), next_(), next_())
    assert (ok(first)["rank"], ok(first)["position"]) == (1, 1)
    assert (ok(second)["rank"], ok(second)["position"]) == (2, 0)
    assert ok(second)["outcome"] == {"type": "ok", "value": "slow"}
    assert [n for n in await tier.counts() if n == name] == [name]


async def test_a_reopen_while_a_child_runs_does_not_run_it_twice(tier: Any) -> None:
    """Decision 48: a reopen dispatches every unsettled child again, and the dispatch runs a child
    only if nothing left an outcome for it: one still running settles once, its side effect once."""
    s = Scope()
    name = f"{s.id}-once"
    group = s.group([tool("count", {"name": name, "value": "once", "delay_ms": 1000}), echo("fast")])
    [_, _, first, second, _] = await tier.turn(open_(group), open_(group), next_(), next_(), close())
    assert {ok(first)["position"], ok(second)["position"]} == {0, 1}
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c0")  # every run of it, and the pump's, has ended
    assert [n for n in await tier.counts() if n == name] == [name]


async def test_a_parked_cancel_group_keeps_its_losers_across_a_restart(tier: Any) -> None:
    """Decision 13 across a restart: the process that ran the turn (and the children) dies after the
    turn returned normally with its group open. The turn parked a continuation, it did not crash, so
    the restarted process's drain does not apply the declared `Cancel`: the loser runs on and a
    resumer receives the event's payload."""
    s = Scope()
    gate = s.event("gate")
    group = s.group([echo("won"), event(gate)], wake="first", disposition="cancel")
    [_, won, saved] = await tier.turn(open_(group), next_(), save())  # ends normally, no close
    assert ok(won)["position"] == 0
    await tier.restart()
    assert s.key() in await tier.open_groups()
    await tier.emit(gate, "payload")
    [_, _, loser, _] = await tier.turn(open_(group), use(ok(saved)), next_(), close())
    assert ok(loser)["position"] == 1
    assert ok(loser)["outcome"] == {"type": "ok", "value": "payload"}


async def test_a_cancel_group_whose_holder_is_severed_cancels_its_losers(tier: Any) -> None:
    """ADR, "Loser disposition is declared at open": a caller that crashes before its close still
    has its `Cancel` losers cancelled (decision 13); they rank as Cancelled and none is left waiting."""
    s = Scope()
    group = s.group([echo("won"), event(s.event("never"))], wake="first", disposition="cancel")
    await tier.sever(s.key(), open_(group), next_(), save(), next_())  # killed while parked on rank 2
    restored = json.dumps({"group_key": s.key(), "child_count": 2, "consumed": 0})
    [_, _, first, second, _] = await tier.turn(open_(group), use(restored), next_(), next_(), close())
    assert ok(first)["outcome"] == {"type": "ok", "value": "won"}
    assert ok(second)["position"] == 1
    assert ok(second)["outcome"] == {"type": "cancelled"}
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c1")


@pytest.mark.parametrize("width", [2, 3], ids=["two", "three"])
async def test_a_run_to_completion_group_whose_holder_is_severed_keeps_its_losers_for_a_resumer(
    tier: Any, width: int
) -> None:
    """ADR, "Loser disposition is declared at open": a caller that crashes before its close leaves its
    `RunToCompletion` losers running (decision 13 applies a declared `Cancel` only). They settle with
    their real outcomes, with no caller alive, and take ranks that a resumer reading from rank 1 is
    served. Two children settle directly on R, RR and V7 (through the pump on RB); three, through the
    pump on every Restate tier (decision 20)."""
    s = Scope()
    gate = s.event("gate")
    counted = f"{s.id}-loser"
    losers = [event(gate)] + [tool("count", {"name": counted, "value": "ran", "delay_ms": 200})] * (width - 2)
    group = s.group([echo("won"), *losers], wake="first")
    # Killed once rank 1 is recorded, while parked on the event's rank (which only comes after).
    await tier.sever(s.key(), open_(group), next_(), save(), *[next_() for _ in losers])
    assert s.key() in await tier.open_groups()
    if width == 3:  # the tool loser runs to its end with nobody waiting on the group
        async with asyncio.timeout(30):
            while True:
                if counted in await tier.counts():
                    break
                await asyncio.sleep(0.05)
    await tier.emit(gate, "late")
    restored = json.dumps({"group_key": s.key(), "child_count": width, "consumed": 0})
    steps = [next_() for _ in range(width)]
    [_, _, first, *rest, _] = await tier.turn(open_(group), use(restored), *steps, close())
    assert ok(first)["outcome"] == {"type": "ok", "value": "won"}
    assert [ok(r)["rank"] for r in rest] == list(range(2, width + 1))
    expected = {1: {"type": "ok", "value": "late"}, 2: {"type": "ok", "value": "ran"}}
    assert {ok(r)["position"]: ok(r)["outcome"] for r in rest} == {p: expected[p] for p in range(1, width)}
    await tier.wait_closed(s.key())
    for position in range(1, width):
        await tier.wait_child_finished(f"{s.key()}/c{position}")
