"""Bounded fan-out (``max_in_flight``): at most K children run at once, the next starts as one
settles, ranks are still by settlement, and the bound holds across a crash and after a close."""

from __future__ import annotations

from ...contract import Cancelled, GroupHandle, Ok
from ._scenario import scenario
from ._steps import Scope, count, event, next_, open_, save, sleep
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []


@scenario("combinators")
async def a_bounded_all_runs_at_most_k_children_and_starts_the_next_as_one_settles(
    tier: Tier, children: ChildKind
) -> None:
    """Two events hold both slots; once one settles, the others run one at a time in the slot it
    freed, while the other event still holds its own: the ranks say who could start when."""
    s = Scope(children)
    first, second = s.event("first"), s.event("second")
    group = s.group([event(first), event(second), s.echo("a"), s.echo("b")], max_in_flight=2)
    async with Turn(tier) as t:
        started = t.all(group, stop_after=0)
    await tier.emit(second, "two")
    async with Turn(tier) as t:
        mid = t.all(group, resume=started.ok.saved, stop_after=3)
    # Unbounded, the echoes would rank first; bounded by three, one of them would.
    assert mid.ok.order == [1, 2, 3]
    await tier.emit(first, "one")
    async with Turn(tier) as t:
        done = t.all(group, resume=mid.ok.saved)
    assert done.ok.status == "fulfilled"
    assert done.ok.value == ["one", "two", "a", "b"]
    assert done.ok.order == [1, 2, 3, 0]


@scenario("combinators")
async def a_bounded_groups_children_still_start_after_its_close(tier: Tier, children: ChildKind) -> None:
    """RunToCompletion with one slot: the race is decided by the first child, and the loser, which
    had no slot until then, still starts and runs once after the caller closed the group."""
    s = Scope(children)
    loser = f"{s.id}-loser"
    async with Turn(tier) as t:
        won = t.race(s.group([s.echo("fast"), count(loser, "late")], wake="first", max_in_flight=1))
    assert won.ok.value == "fast"
    await tier.wait_child_finished(f"{s.key()}/c1")
    assert (await tier.counts()).count(loser) == 1


@scenario("combinators")
async def a_bounded_cancel_groups_children_yet_to_start_never_start(tier: Tier, children: ChildKind) -> None:
    """Cancel with one slot: the race is decided, the sleep that took the freed slot is cancelled,
    and the child still waiting for a slot never starts."""
    s = Scope(children)
    loser = f"{s.id}-never"
    group = s.group(
        [s.echo("fast"), sleep(600_000), count(loser)], wake="first", disposition="cancel", max_in_flight=1
    )
    async with Turn(tier) as t:
        won = t.race(group)
    assert won.ok.value == "fast"
    await tier.wait_child_finished(f"{s.key()}/c1")  # bounded: fails if the sleep runs on
    await tier.wait_child_finished(f"{s.key()}/c2")
    assert loser not in await tier.counts()


@scenario("combinators")
async def a_bounded_cancel_race_starts_nothing_after_its_close_however_busy_its_runner(
    tier: Tier, children: ChildKind
) -> None:
    """Cancel with one slot, the winner followed by fast children that keep whatever runs them busy
    when the close comes: none of the children still waiting ever starts."""
    s = Scope(children)
    names = [f"{s.id}-n{i}" for i in range(4)]
    fast = [s.echo(f"e{i}") for i in range(6)]
    group = s.group([*fast, *map(count, names)], wake="first", disposition="cancel", max_in_flight=1)
    async with Turn(tier) as t:
        won = t.race(group)
    assert won.ok.value == "e0"
    for position in range(len(fast), len(fast) + len(names)):  # in order: each would start the next
        await tier.wait_child_finished(f"{s.key()}/c{position}")
    assert not set(names) & set(await tier.counts())


@scenario("combinators")
async def a_bounded_cancel_group_whose_holder_is_severed_settles_its_unstarted_children_cancelled(
    tier: Tier, children: ChildKind
) -> None:
    """A caller that crashes before its close has its `Cancel` losers cancelled, the one still
    waiting for a slot too: it never starts, and ranks as Cancelled like the one that ran."""
    s = Scope(children)
    never = f"{s.id}-never"
    group = s.group(
        [s.echo("won"), event(s.event("never")), count(never)],
        wake="first",
        disposition="cancel",
        max_in_flight=1,
    )
    await tier.sever(s.key(), open_(group), next_(), save(), next_())  # killed while parked on rank 2
    async with Turn(tier) as t:
        t.open(group)
        g = t.resume(GroupHandle(s.key(), 3, 0))  # the cursor the severed caller saved
        first, second, third = g.next(), g.next(), g.next()
        g.close()
    assert first.ok.outcome == Ok(value="won")
    assert {second.ok.position, third.ok.position} == {1, 2}
    assert second.ok.outcome == third.ok.outcome == Cancelled()
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c2")
    assert never not in await tier.counts()


@scenario("combinators")
async def a_bounded_group_keeps_its_bound_across_a_restart(tier: Tier, children: ChildKind) -> None:
    """One slot, the first child still running when the process dies: after the restart the children
    run one at a time in position order, so they rank in it."""
    s = Scope(children)
    group = s.group([count(f"{s.id}-a", "A", delay_ms=300), s.echo("b"), s.echo("c")], max_in_flight=1)
    async with Turn(tier) as t:
        started = t.all(group, stop_after=0)
    await tier.restart()
    async with Turn(tier) as t:
        done = t.all(group, resume=started.ok.saved)
    assert done.ok.value == ["A", "b", "c"]
    assert done.ok.order == [0, 1, 2]
