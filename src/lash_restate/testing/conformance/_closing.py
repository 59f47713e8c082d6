"""Closing a group, as behaviour every tier must show (ADR, "Close deletes…"): idempotent, narrowing
only, taking effect before the caller's next step, and final: no late settlement and no other
invocation's close brings back what it deleted."""

from __future__ import annotations

import asyncio

from ...contract import GroupHandle, Ok
from ._scenario import scenario
from ._steps import Scope, event
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []


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
async def a_close_by_an_invocation_whose_group_was_closed_leaves_a_namesake_opened_since_alone(
    tier: Tier, children: ChildKind
) -> None:
    """Decision 113: a close closes the group its invocation opened (or read), not a namesake opened
    under the same key since.

    Turn A opens a group and parks on an event before its close. Turn B closes the group from a
    saved handle, and turn C opens the same group (same key, same shape) afresh and reads rank 1.
    Once A goes on, its close finds its own group closed already and leaves C's alone: a fresh
    invocation still reads C's rank 2. (A close named the key alone, and closed C's group.)
    """
    s = Scope(children)
    group = s.group([s.echo("a"), s.echo("b")])
    resumed = s.event("resumed")
    parked = s.group([event(resumed)], wake="first", batch="parked")
    a = Turn(tier)
    a.open(group)
    a.race(parked)
    closed_by_a = a.resume(GroupHandle(s.key(), 2, 0)).close()  # the cursor A's open gave it
    turn_a = asyncio.create_task(a.run())
    while True:  # A has opened its group and parked on its event
        if parked["key"] in await tier.open_groups() or turn_a.done():
            break
        await asyncio.sleep(0.05)
    assert not turn_a.done(), turn_a.result()
    async with Turn(tier) as b:
        b.resume(GroupHandle(s.key(), 2, 0)).close()
    await tier.wait_closed(s.key())
    async with Turn(tier) as c:
        first = c.open(group).next()
    await tier.emit(resumed, "go")
    await turn_a
    assert closed_by_a.ok is None
    async with Turn(tier) as d:
        theirs = d.resume(GroupHandle(s.key(), 2, 1))
        second, closed = theirs.next(), theirs.close()
    assert (first.ok.rank, second.ok.rank) == (1, 2)  # C's group was still open
    assert {first.ok.position, second.ok.position} == {0, 1} and closed.ok is None
    await tier.wait_closed(s.key())


@scenario("groups")
async def a_saved_cursor_of_a_closed_group_reads_no_group_opened_under_its_key_since(
    tier: Tier, children: ChildKind
) -> None:
    """Decision 124: a cursor reads the group it was given by, not one opened under its key later.

    A group is read to rank 1, saved and closed, then opened again under its key (the same
    children) and read to rank 1. The saved cursor's await, a combinator resumed from it and a
    block reopened from it are each refused `group_not_open`, as with nothing opened since (it
    would read the new group's ranks otherwise); its close closes nothing, also by an invocation
    that opened the new group before it, and the new group's own cursor reads on to rank 2."""
    s = Scope(children)
    group = s.group([s.echo("a"), s.echo("b")])
    async with Turn(tier) as t:
        g = t.open(group)
        g.next()
        saved = g.save()
        g.close()
    await tier.wait_closed(s.key())
    async with Turn(tier) as t:
        fresh = t.open(group)
        first = fresh.next()
    async with Turn(tier) as t:
        stale = t.resume(saved.ok)
        refused, closed = stale.next(), stale.close()
    async with Turn(tier) as t:
        combined = t.all(group, resume=saved.ok)
    async with Turn(tier) as t:
        block = t.iterate(group, resume=saved.ok)
    async with Turn(tier) as t:
        t.open(group)  # this invocation reaches the new group, then closes the stale cursor's
        closed_after_open = t.resume(saved.ok).close()
    named = fresh.opened.ok.incarnation
    assert named is not None and named != saved.ok.incarnation  # each group names itself
    assert refused.error.code == "group_not_open" and "opened again" in refused.error.message
    assert closed.ok is None and closed_after_open.ok is None  # the closer's group is closed already
    assert combined.error.code == "group_not_open"
    assert block.answer.error.code == "group_not_open"
    async with Turn(tier) as t:
        theirs = t.resume(GroupHandle(s.key(), 2, 1, incarnation=named))
        second, done = theirs.next(), theirs.close()
    assert (first.ok.rank, second.ok.rank) == (1, 2)
    assert {first.ok.position, second.ok.position} == {0, 1} and done.ok is None
    await tier.wait_closed(s.key())


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
