"""Losers and lost processes, as behaviour every tier must show (ADR, "Loser disposition is declared
at open"): a caller that returned, crashed or was severed; a child's runner that went missing and
came back, or that an operator killed; a restart while children run."""

from __future__ import annotations

import asyncio
from typing import Any

from ...contract import Cancelled, Err, GroupHandle, Ok, Settlement
from ._answers import Answer
from ._scenario import scenario
from ._steps import Scope, count, event, next_, open_, save
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []


async def _slow_child_ranked_second(
    tier: Tier, s: Scope, name: str, first: Answer[Settlement], second: Answer[Settlement]
) -> None:
    """The fast child read at rank 1, the slow one at rank 2 with the tool's real outcome, and its
    side effect done once."""
    assert (first.ok.rank, first.ok.position) == (1, 1)
    assert (second.ok.rank, second.ok.position) == (2, 0)
    assert second.ok.outcome == Ok(value="slow")
    await _ran_once(tier, s, name)


async def _ran_once(tier: Tier, s: Scope, name: str) -> None:
    """Once the group is closed and every run of child 0 (and the pump's) has ended, its `count`
    side effect ``name`` happened once."""
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c0")
    assert [n for n in await tier.counts() if n == name] == [name]


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
    # Its first run waits (the restart cuts it off); run again once the tool is back, it answers at once.
    group = s.group([count(name, "slow", delay_ms=60_000, slow_once=True), s.echo("fast")])
    async with Turn(tier) as t:
        g = t.open(group)
        opened, fast = g.opened, g.next()
    # The fast child ranked first before anything is lost: the slow one, run again, answers at once.
    assert fast.ok.position == 1
    async with asyncio.timeout(60):
        while True:  # its first run has started (a line another process writes: nothing to await)
            if f"started:{name}" in await tier.counts():
                break
            await asyncio.sleep(0.02)
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
    await _slow_child_ranked_second(tier, s, name, first, second)


@scenario("groups")
async def a_child_whose_tool_came_back_settles_once_a_resume_reopens_it(
    tier: Tier, children: ChildKind
) -> None:
    """Decision 48 for a resume: ``lash.open(..., resume=saved)`` reopens the group, and a reopen
    runs again a child whose runner was missing, whatever the group's layout. The process restarts
    without the `count` tool while that child runs, and the group lists it as missed; the tool is
    restored, and a caller that resumes from the saved cursor reads the tool's real outcome at rank
    2, the side effect done once."""
    s, name, group, opened = await _lose_the_tool_of_a_running_child(tier, children)
    await tier.wait_missed(s.key(), 0)
    await tier.restart()  # the tool is back
    async with Turn(tier) as t:
        block = t.iterate(group, resume=opened)
    assert [(x.rank, x.position) for x in block.answer.ok.settlements] == [(1, 1), (2, 0)]
    assert block.answer.ok.settlements[1].outcome == Ok(value="slow")
    await _ran_once(tier, s, name)


@scenario("groups")
async def a_reopen_while_a_childs_tool_is_still_missing_refuses_nothing(
    tier: Tier, children: ChildKind
) -> None:
    """ADR: a reopen resolves only what it dispatches and refuses nothing, whatever the group's
    layout. The process restarts without the `count` tool while that child runs; a reopen while
    the tool is still missing is answered, serves the rank that settled and invents no outcome for
    the missing one; once the tool is back, the next reopen runs it."""
    s, name, group, _ = await _lose_the_tool_of_a_running_child(tier, children)
    await tier.wait_missed(s.key(), 0)
    async with Turn(tier) as t:
        g = t.open(group)
        fast, gone = g.next(), g.next(cancel_after_ms=300)
    assert (fast.ok.rank, fast.ok.position) == (1, 1)
    assert gone.error.code == "await_cancelled"
    await tier.restart()  # the tool is back
    async with Turn(tier) as t:
        g = t.open(group)
        first, second = g.next(), g.next()
        g.close()
    await _slow_child_ranked_second(tier, s, name, first, second)


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
    await _ran_once(tier, s, name)


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
