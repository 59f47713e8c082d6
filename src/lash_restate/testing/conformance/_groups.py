"""The effect-group contract, as behaviour every tier must show (ADR, Decision and Normative sections)."""

from __future__ import annotations

import asyncio
from typing import Any

from ...contract import Cancelled, Err, GroupHandle, Ok, Settlement
from ._scenario import scenario
from ._steps import Scope, count, event, fail, next_, open_, save, sleep, tool
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []


@scenario("groups")
async def open_returns_once_recorded_with_cursor_at_zero(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        g = t.open(s.group([event(s.event("never")), event(s.event("never2"))]))
    # ADR: open returns once the group is durably recorded, not when a child settles.
    assert g.opened.ok == GroupHandle(s.key(), 2, 0)
    assert s.key() in await tier.open_groups()


@scenario("groups")
async def ranks_follow_settlement_order_not_input_order(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    a, b, c = s.event("a"), s.event("b"), s.event("c")
    async with Turn(tier) as t:
        opened = t.open(s.group([event(a), event(b), event(c)])).opened
    await tier.emit(c, "C")
    async with Turn(tier) as t:
        g = t.resume(opened.ok)
        first, h1 = g.next(), g.save()
    await tier.emit(a, "A")
    async with Turn(tier) as t:
        g = t.resume(h1.ok)
        second, h2 = g.next(), g.save()
    await tier.emit(b, "B")
    async with Turn(tier) as t:
        third = t.resume(h2.ok).next()
    ranks = [(r.ok.rank, r.ok.position, r.ok.outcome) for r in (first, second, third)]
    assert ranks == [(1, 2, Ok(value="C")), (2, 0, Ok(value="A")), (3, 1, Ok(value="B"))]


@scenario("groups")
async def same_rank_is_served_again_to_a_fresh_invocation(tier: Tier, children: ChildKind) -> None:
    """ADR cursor rule: awaiting rank consumed+1 before and after a crash yields the same settlement."""
    s = Scope(children)
    first_ev, second_ev = s.event("x"), s.event("y")
    async with Turn(tier) as t:
        saved = t.open(s.group([event(first_ev), event(second_ev)])).opened
    await tier.emit(second_ev, 2)
    async with Turn(tier) as t:
        before = t.resume(saved.ok).next()
    await tier.emit(first_ev, 1)
    # A fresh invocation holding only the saved cursor (consumed=0) reads rank 1 again.
    async with Turn(tier) as t:
        g = t.resume(saved.ok)
        after, again = g.next(), g.next()
    assert after.ok == before.ok
    assert before.ok.position == 1
    assert again.ok.rank == 2 and again.ok.position == 0


@scenario("groups")
async def outcomes_too_large_to_ride_the_wake_are_served_the_same_live_and_after(
    tier: Tier, children: ChildKind
) -> None:
    """Outcomes past the inline limit (16 KiB on Restate) are read from where they live: served
    the same to the live caller and to a fresh invocation, for a pair and for a wider group."""
    for width in (2, 3):  # on Restate: the direct path, then the batched one (decision 20)
        s = Scope(children)
        sizes = [20_000 + i for i in range(width)]
        async with Turn(tier) as t:
            g = t.open(s.group([tool("blob", {"size": n}) for n in sizes]))
            served = [g.next() for _ in sizes]
            g.save()
        assert sorted(len(r.ok.outcome.value) for r in served if isinstance(r.ok.outcome, Ok)) == sizes
        async with Turn(tier) as t:
            again = t.resume(g.opened.ok)
            reread = [again.next() for _ in sizes]
            again.close()
        assert [r.ok for r in reread] == [r.ok for r in served]
        await tier.wait_closed(s.key())


@scenario("groups")
async def reopen_returns_zero_and_the_callers_cursor_wins(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    group = s.group([s.echo("v0"), s.echo("v1"), s.echo("v2")])
    async with Turn(tier) as t:
        g = t.open(group)
        r1, r2, saved = g.next(), g.next(), g.save()
    assert saved.ok.consumed == 2
    async with Turn(tier) as t:
        reopened = t.open(group)
        r3 = t.resume(saved.ok).next()
    assert reopened.opened.ok.consumed == 0
    assert r3.ok.rank == 3
    assert {r1.ok.position, r2.ok.position, r3.ok.position} == {0, 1, 2}


@scenario("groups")
async def cursor_overrun_is_refused_not_clamped(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        g = t.open(s.group([s.echo(1)]))
        first, overrun, saved = g.next(), g.next(), g.save()
    assert first.ok.rank == 1
    assert overrun.error.code == "cursor_overrun"
    assert saved.ok.consumed == 1


@scenario("groups")
async def a_handle_with_another_child_count_is_refused(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        t.open(s.group([s.echo(1), s.echo(2)]))
    async with Turn(tier) as t:
        mismatch = t.resume(GroupHandle(s.key(), 3, 0)).next()  # forged: the group has two
    assert mismatch.error.code == "handle_mismatch"


@scenario("groups")
async def cancelled_await_leaves_cursor_and_rank_untouched(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    late = s.event("late")
    async with Turn(tier) as t:
        g = t.open(s.group([event(late), s.echo("now", 0)]))
        cancelled, saved = g.next(), g.save()
    # Rank 1 is the immediate echo; rank 2 waits for an event nobody has emitted yet.
    async with Turn(tier) as t:
        g = t.resume(saved.ok)
        waiting, after_cancel = g.next(cancel_after_ms=50), g.save()
    assert waiting.error.code == "await_cancelled"
    assert after_cancel.ok == saved.ok
    await tier.emit(late, "L")
    async with Turn(tier) as t:
        served = t.resume(saved.ok).next()
    assert served.ok.rank == 2 and served.ok.outcome == Ok(value="L")
    assert cancelled.ok.rank == 1


@scenario("groups")
async def await_on_a_group_never_opened_is_refused(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        refused = t.resume(GroupHandle(s.key(), 1, 0)).next()  # a cursor of a group nobody opened
    assert refused.error.code == "group_not_open"


@scenario("groups")
async def a_close_takes_effect_before_the_callers_next_step_on_the_group(
    tier: Tier, children: ChildKind
) -> None:
    """However a close is delivered (decision 21), the closing caller's next step sees it done."""
    s = Scope(children)
    group = s.group([s.echo(1), event(s.event("never"))], wake="first")
    async with Turn(tier) as t:
        g = t.open(group)
        g.next()
        closed, after = g.close(), g.next()
        fresh = t.open(group)
        again = fresh.next()
        fresh.close()
    assert closed.ok is None
    assert after.error.code == "group_not_open"
    # Opened afresh after the close (not a reopen of the closed one): rank 1 is served again.
    assert again.ok.position == 0 and again.ok.rank == 1
    await tier.wait_closed(s.key())


@scenario("groups")
async def a_group_reopened_after_close_is_not_disturbed_by_the_closed_ones_late_loser(
    tier: Tier, children: ChildKind
) -> None:
    """Open, close with a loser still running, open the same key afresh: when the old loser ends
    (its settlement is dropped, its store released) the new group's ranks stay readable, also by a
    fresh invocation."""
    s = Scope(children)
    gate = s.event("gate")
    group = s.group([s.echo("fast"), event(gate)], wake="first")
    async with Turn(tier) as t:
        g = t.open(group)
        g.next()
        g.close()
    async with Turn(tier) as t:
        g = t.open(group)
        first = g.next()
    await tier.emit(gate, "late")  # ends the old loser and the new group's second child alike
    async with Turn(tier) as t:
        g = t.resume(g.opened.ok)
        again, second = g.next(), g.next()
        g.close()
    assert again.ok == first.ok
    assert second.ok.position == 1
    assert second.ok.outcome == Ok(value="late")
    await tier.wait_closed(s.key())


@scenario("groups")
async def a_group_closed_by_another_invocation_refuses_the_ranks_this_one_already_received(
    tier: Tier, children: ChildKind
) -> None:
    """Decision 32: an await is answered by the group as it stands when the await begins, whatever
    this invocation received earlier.

    Turn A opens a group whose two children settle at once, consumes rank 1 and parks on an event.
    Turn B reopens the group, reads both ranks and closes it. Once A learns that (the event), its
    next await is refused `group_not_open` on every tier, as a fresh invocation's would be; rank 2,
    settled and delivered to A before the close, is not served from what A holds.
    """
    s = Scope(children)
    group = s.group([s.echo("a"), s.echo("b")])
    resumed = s.event("resumed")
    parked = s.group([event(resumed)], wake="first", batch="parked")
    a = Turn(tier)
    g = a.open(group)
    first, saved = g.next(), g.save()
    raced = a.race(parked)
    second = a.resume(GroupHandle(s.key(), 2, 1)).next()  # what A holds after rank 1
    turn_a = asyncio.create_task(a.run())
    while True:  # A has consumed rank 1 and parked on its event
        if parked["key"] in await tier.open_groups() or turn_a.done():
            break
        await asyncio.sleep(0.05)
    assert not turn_a.done(), turn_a.result()
    async with Turn(tier) as b:
        b.open(group)
        g = b.resume(GroupHandle(s.key(), 2, 0))
        one, two, closed = g.next(), g.next(), g.close()
    assert [one.ok.rank, two.ok.rank, closed.ok] == [1, 2, None]
    await tier.wait_closed(s.key())
    await tier.emit(resumed, "go")
    await turn_a
    assert first.ok == one.ok
    assert raced.ok.value == "go"
    assert saved.ok.consumed == 1
    assert second.error.code == "group_not_open"


@scenario("groups")
async def close_is_idempotent_and_deletes_the_group(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        g = t.open(s.group([s.echo(1)]))
        g.next()
        first_close, second_close = g.close(), g.close()
    assert first_close.ok is None and second_close.ok is None
    await tier.wait_closed(s.key())
    # A replayed frame closing the same group again is harmless (ADR: close is idempotent).
    async with Turn(tier) as t:
        replayed = t.resume(g.opened.ok)
        third_close, reread = replayed.close(), replayed.next()
    assert third_close.ok is None
    assert reread.error.code == "group_not_open"


@scenario("groups")
async def close_may_narrow_but_never_widen(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    pending = s.event("pending")
    async with Turn(tier) as t:
        g = t.open(s.group([s.echo(1), event(pending)], wake="first", disposition="cancel"))
        g.next()
        widen, still = g.close("run_to_completion"), g.save()
    assert widen.error.code == "disposition_widening"
    assert s.key() in await tier.open_groups()  # the refused close changed nothing
    assert still.ok.consumed == 1

    s2 = Scope(children)
    async with Turn(tier) as t:
        g = t.open(s2.group([s2.echo(1), event(s2.event("p"))], wake="first"))
        g.next()
        narrowed = g.close("cancel")
    assert narrowed.ok is None
    await tier.wait_closed(s2.key())


@scenario("groups")
async def a_late_settlement_does_not_resurrect_a_closed_group(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    loser = s.event("loser")
    async with Turn(tier) as t:
        g = t.open(s.group([s.echo("w"), event(loser)], wake="first"))
        winner = g.next()
        g.close()
    assert winner.ok.position == 0
    await tier.emit(loser, "late")
    # The loser runs to completion (RunToCompletion) and settles into a closed group: ignored.
    await tier.wait_child_finished(f"{s.key()}/c1")
    await tier.wait_closed(s.key())
    async with Turn(tier) as t:
        probe = t.resume(GroupHandle(s.key(), 2, 1)).next()  # the stale cursor of the closed group
    assert probe.error.code == "group_not_open"


@scenario("groups")
async def run_to_completion_losers_take_ranks_after_the_caller_is_gone(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    slow = s.event("slow")
    async with Turn(tier) as t:
        g = t.open(s.group([event(slow), s.echo("fast")], wake="first"))
        won, saved = g.next(), g.save()
    assert won.ok.position == 1
    # The caller's turn has ended without close; the loser settles later and takes rank 2.
    await tier.emit(slow, "S")
    async with Turn(tier) as t:
        loser = t.resume(saved.ok).next()
    assert loser.ok == Settlement(rank=2, position=0, replay_key=f"{s.key()}/c0", outcome=Ok(value="S"))


@scenario("groups")
async def failures_settle_as_errors_with_their_code(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        settled = t.open(s.group([fail("boom", code="E42")])).next()
    assert settled.ok.outcome == Err(message="boom", code="E42")


@scenario("groups")
async def reopen_is_fenced_on_shape(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    pending = [event(s.event("p0")), event(s.event("p1")), event(s.event("p2"))]
    async with Turn(tier) as t:
        t.open(s.group(pending))
    async with Turn(tier) as t:
        shrunk = t.open(s.group(pending[:2]))
        rewoken = t.open(s.group(pending, wake="first"))
        redisposed = t.open(s.group(pending, disposition="cancel"))
        changed = t.open(s.group([pending[0], event(s.event("other")), pending[2]]))
    refusals = [g.opened.error for g in (shrunk, rewoken, redisposed, changed)]
    assert [e.code for e in refusals] == [
        "shape_mismatch",
        "shape_mismatch",
        "shape_mismatch",
        "replay_mismatch",
    ]
    assert refusals[3].position == 1
    assert refusals[3].replay_key == f"{s.key()}/c1"
    async with Turn(tier) as t:
        same = t.open(s.group(pending))
    assert same.opened.ok.consumed == 0


@scenario("groups")
async def first_open_with_an_unroutable_child_refuses_whole_and_records_nothing(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    bad = s.group([s.echo(1), tool("no-such-tool", {}), s.echo(3)])
    async with Turn(tier) as t:
        first = t.open(bad)
    async with Turn(tier) as t:
        second = t.open(bad)
    # ADR, Decision, `open_effect_group`: two identical refusals are the observable form of
    # "the refusal journals nothing".
    assert first.opened.error == second.opened.error
    assert first.opened.error.code == "child_unroutable"
    assert first.opened.error.position == 1 and first.opened.error.replay_key == f"{s.key()}/c1"
    await tier.wait_closed(s.key())
    # Nothing was recorded: a differently shaped group under the same key opens as a *first* open.
    async with Turn(tier) as t:
        fresh = t.open(s.group([s.echo("only")]))
        settled = fresh.next()
    assert fresh.opened.ok.child_count == 1
    assert settled.ok.outcome == Ok(value="only")


@scenario("groups")
async def group_constructor_refusals_reach_the_caller_typed(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    member = {"group_key": s.key(), "position": 0, "wake": "all", "disposition": "run_to_completion"}
    cases = {
        "foreign_group_key": [{**member, "group_key": s.key(batch="other")}, None],
        "permuted_position": [None, {**member, "position": 0}],
        "wake_rule_drift": [{**member, "wake": "first"}, None],
        "disposition_drift": [{**member, "disposition": "cancel"}, None],
    }
    for code, memberships in cases.items():
        async with Turn(tier) as t:
            refused = t.open(s.group([s.echo(1), s.echo(2)], memberships=memberships))
        assert refused.opened.error.code == code
    async with Turn(tier) as t:
        empty = t.open(s.group([]))
    assert empty.opened.error.code == "empty_group"
    async with Turn(tier) as t:
        dup = t.open(s.group([s.echo(1), s.echo(2)], replay_keys=["same", "same"]))
    assert dup.opened.error.code == "duplicate_replay_key" and dup.opened.error.position == 1
    await tier.wait_closed(s.key())


@scenario("groups")
async def identical_batches_with_distinct_occurrences_do_not_share_a_counter(
    tier: Tier, children: ChildKind
) -> None:
    """ADR: two textually identical race calls in one iteration differ only by occurrence."""
    s = Scope(children)
    e0, e1 = s.event("e0"), s.event("e1")
    g0 = s.group([event(e0), s.echo("x")], occurrence=0, replay_keys=[f"{s.id}/r0/a", f"{s.id}/r0/b"])
    g1 = s.group([event(e1), s.echo("x")], occurrence=1, replay_keys=[f"{s.id}/r1/a", f"{s.id}/r1/b"])
    async with Turn(tier) as t:
        h0, h1 = t.open(g0).opened, t.open(g1).opened
    await tier.emit(e1, "one")
    async with Turn(tier) as t:
        g = t.resume(h1.ok)
        a1, b1 = g.next(), g.next()
    async with Turn(tier) as t:
        a0 = t.resume(h0.ok).next()
    assert [a1.ok.rank, b1.ok.rank, a0.ok.rank] == [1, 2, 1]
    assert {a1.ok.position, b1.ok.position} == {0, 1}
    assert a0.ok.position == 1
    assert {s.key(occurrence=0), s.key(occurrence=1)} <= await tier.open_groups()


@scenario("groups")
async def sleep_children_are_durable_timers_that_fulfil_with_null(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        g = t.open(s.group([sleep(300), sleep(1)]))
        first, second = g.next(), g.next()
    assert first.ok.outcome == Ok(value=None)
    assert {first.ok.position, second.ok.position} == {0, 1}


@scenario("groups")
async def a_cancel_group_whose_holder_returned_keeps_its_losers_for_a_resumer(
    tier: Tier, children: ChildKind
) -> None:
    """Decision 13: a turn that returns with its group open has parked a continuation, not crashed.

    The declared `Cancel` does not apply: the loser runs on, and a fresh turn that reopens the group
    and restores the saved handle receives its real outcome.
    """
    await _a_returned_cancel_groups_loser_is_served_to_a_resumer(tier, children, restart=False)


async def _lose_the_tool_of_a_running_child(
    tier: Tier, children: ChildKind
) -> tuple[Scope, str, dict[str, Any], GroupHandle]:
    """A group of a slow `count` child and a fast one, opened; then the process restarts without
    the `count` tool while that child runs, and its run ends with no outcome. The scope, the `count`
    witness name, the group and the handle the open answered."""
    s = Scope(children)
    name = f"{s.id}-slow"
    group = s.group([count(name, "slow", delay_ms=4000), s.echo("fast")])
    async with Turn(tier) as t:
        opened = t.open(group).opened
    await tier.restart(without="count")  # the deployment lost the tool while the child ran
    await tier.wait_child_ended(f"{s.key()}/c0")
    return s, name, group, opened.ok


@scenario("groups")
async def a_child_whose_tool_was_missing_for_a_while_settles_once_a_reopen_finds_it(
    tier: Tier, children: ChildKind
) -> None:
    """Decision 48: a child whose runner went missing and came back. The process restarts without the
    `count` tool while that child runs: its run ends with no outcome (a miss is a routing fact, never
    an outcome), the group stays listed and the rank stays unallocated. The tool is restored; a
    reopen (which resolves what it dispatches and refuses nothing) runs the child again, and the
    resumed group finishes with the tool's real outcome, the side effect done once."""
    s, name, group, opened = await _lose_the_tool_of_a_running_child(tier, children)
    async with Turn(tier) as t:
        g = t.resume(opened)
        fast, gone = g.next(), g.next(cancel_after_ms=300)
    assert fast.ok.position == 1
    assert gone.error.code == "await_cancelled"  # no outcome invented while the tool was gone
    assert s.key() in await tier.open_groups()
    await tier.restart()  # the tool is back
    async with Turn(tier) as t:
        t.open(group)
        g = t.resume(opened)
        first, second = g.next(), g.next()
    assert (first.ok.rank, first.ok.position) == (1, 1)
    assert (second.ok.rank, second.ok.position) == (2, 0)
    assert second.ok.outcome == Ok(value="slow")
    assert [n for n in await tier.counts() if n == name] == [name]


@scenario("groups")
async def a_child_whose_tool_came_back_settles_at_the_drain_for_a_resumer_that_does_not_reopen(
    tier: Tier, children: ChildKind
) -> None:
    """ADR: a miss is a routing fact, and the drain runs the child once it can. The process restarts
    without the `count` tool while that child runs: its run ends with no outcome, and inspection lists
    it as missed. The tool is restored and the drain runs (on Restate, the operator's re-dispatch):
    a caller that resumes from the saved cursor, without a reopen, reads the tool's real outcome at
    rank 2, the side effect done once."""
    s, name, _, opened = await _lose_the_tool_of_a_running_child(tier, children)
    await tier.wait_missed(s.key(), 0)
    await tier.restart()  # the tool is back
    await tier.drain()
    async with Turn(tier) as t:
        g = t.resume(opened)
        first, second = g.next(), g.next()
        g.close()
    assert (first.ok.rank, first.ok.position) == (1, 1)
    assert (second.ok.rank, second.ok.position) == (2, 0)
    assert second.ok.outcome == Ok(value="slow")
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c0")
    assert [n for n in await tier.counts() if n == name] == [name]


@scenario("groups")
async def a_child_an_operator_killed_settles_as_killed_and_takes_its_rank(
    tier: Tier, children: ChildKind
) -> None:
    """A running child is killed by an operator (on Restate, `restate invocations kill` of its
    invocation, or of its callee's): it settles as a killed callee's caller is answered, 409
    `killed`, and takes its rank, so the caller that resumes reads it and nothing waits for ever."""
    s = Scope(children)
    group = s.group([s.echo("fast"), count(f"{s.id}-slow", "slow", delay_ms=120_000)])
    async with Turn(tier) as t:
        g = t.open(group)
        first, saved = g.next(), g.save()
    assert first.ok.position == 0
    await tier.kill_child(f"{s.key()}/c1")
    async with Turn(tier) as t:
        g = t.resume(saved.ok)  # its cursor is past rank 1
        killed = g.next()
        g.close()
    assert (killed.ok.rank, killed.ok.position) == (2, 1)
    assert killed.ok.outcome == Err(message="killed", code="409")


@scenario("groups")
async def a_reopen_while_a_child_runs_does_not_run_it_twice(tier: Tier, children: ChildKind) -> None:
    """Decision 48: a reopen dispatches every unsettled child again, and the dispatch runs a child
    only if nothing left an outcome for it: one still running settles once, its side effect once."""
    s = Scope(children)
    name = f"{s.id}-once"
    group = s.group([count(name, "once", delay_ms=1000), s.echo("fast")])
    async with Turn(tier) as t:
        t.open(group)
        g = t.open(group)
        first, second = g.next(), g.next()
        g.close()
    assert {first.ok.position, second.ok.position} == {0, 1}
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c0")  # every run of it, and the pump's, has ended
    assert [n for n in await tier.counts() if n == name] == [name]


@scenario("groups")
async def a_parked_cancel_group_keeps_its_losers_across_a_restart(tier: Tier, children: ChildKind) -> None:
    """Decision 13 across a restart: the process that ran the turn (and the children) dies after the
    turn returned normally with its group open. The turn parked a continuation, it did not crash, so
    the restarted process's drain does not apply the declared `Cancel`: the loser runs on and a
    resumer receives the event's payload."""
    await _a_returned_cancel_groups_loser_is_served_to_a_resumer(tier, children, restart=True)


@scenario("groups")
async def a_cancel_group_whose_holder_is_severed_cancels_its_losers(tier: Tier, children: ChildKind) -> None:
    """ADR, "Loser disposition is declared at open": a caller that crashes before its close still
    has its `Cancel` losers cancelled (decision 13); they rank as Cancelled and none is left waiting."""
    s = Scope(children)
    group = s.group([s.echo("won"), event(s.event("never"))], wake="first", disposition="cancel")
    await tier.sever(s.key(), open_(group), next_(), save(), next_())  # killed while parked on rank 2
    async with Turn(tier) as t:
        t.open(group)
        g = t.resume(GroupHandle(s.key(), 2, 0))  # the cursor the severed caller saved
        first, second = g.next(), g.next()
        g.close()
    assert first.ok.outcome == Ok(value="won")
    assert second.ok.position == 1
    assert second.ok.outcome == Cancelled()
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c1")


@scenario("groups", variants={"two": {"width": 2}, "three": {"width": 3}})
async def a_run_to_completion_group_whose_holder_is_severed_keeps_its_losers_for_a_resumer(
    tier: Tier, children: ChildKind, width: int
) -> None:
    """ADR, "Loser disposition is declared at open": a caller that crashes before its close leaves its
    `RunToCompletion` losers running (decision 13 applies a declared `Cancel` only). They settle with
    their real outcomes, with no caller alive, and take ranks that a resumer reading from rank 1 is
    served. Two children settle directly on R, RR and V7 (through the pump on RB); three, through the
    pump on every Restate tier (decision 20)."""
    s = Scope(children)
    gate = s.event("gate")
    counted = f"{s.id}-loser"
    losers = [event(gate)] + [count(counted, "ran", delay_ms=200)] * (width - 2)
    group = s.group([s.echo("won"), *losers], wake="first")
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
    async with Turn(tier) as t:
        t.open(group)
        g = t.resume(GroupHandle(s.key(), width, 0))
        first, *rest = [g.next() for _ in range(width)]
        g.close()
    served = [first, *rest]
    assert [r.ok.rank for r in served] == list(range(1, width + 1))
    # Rank 1 is the echo's or, on a machine slow enough, the tool loser's (it waits only 200 ms):
    # the ranks are the order they settled in, whichever it was; every outcome is the real one.
    expected = {0: Ok(value="won"), 1: Ok(value="late"), 2: Ok(value="ran")}
    assert {r.ok.position: r.ok.outcome for r in served} == {p: expected[p] for p in range(width)}
    assert first.ok.position != 1  # the event was emitted after the sever
    await tier.wait_closed(s.key())
    for position in range(1, width):
        await tier.wait_child_finished(f"{s.key()}/c{position}")


async def _a_returned_cancel_groups_loser_is_served_to_a_resumer(
    tier: Tier, children: ChildKind, *, restart: bool
) -> None:
    """A `Cancel` race whose turn returned with the group open (after it, with ``restart``, the
    process restarted): the group stays listed and a resumer receives its loser's real outcome."""
    s = Scope(children)
    gate = s.event("gate")
    group = s.group([s.echo("won"), event(gate)], wake="first", disposition="cancel")
    async with Turn(tier) as t:  # ends normally, no close
        g = t.open(group)
        won, saved = g.next(), g.save()
    assert won.ok.position == 0
    if restart:
        await tier.restart()
    assert s.key() in await tier.open_groups()
    await tier.emit(gate, "payload")
    async with Turn(tier) as t:
        t.open(group)
        g = t.resume(saved.ok)
        loser = g.next()
        g.close()
    assert loser.ok.position == 1
    assert loser.ok.outcome == Ok(value="payload")
