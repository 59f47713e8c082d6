"""The front door's Python protocols on a group, on every tier: ``async with lash.open(...)`` closes
the group when the block ends unless it was saved, and ``async for`` yields the settlements still to
consume, in rank order (ADR: the caller's cursor advances by exactly one per settlement)."""

from __future__ import annotations

from ...contract import Ok
from ._scenario import scenario
from ._steps import Scope, event
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []


@scenario("protocols")
async def async_for_yields_every_settlement_in_rank_order_and_the_block_closes_the_group(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        block = t.iterate(s.group([s.echo("a"), s.echo("b"), s.echo("c")]))
    settlements = block.answer.ok.settlements
    assert [x.rank for x in settlements] == [1, 2, 3]
    assert sorted(x.position for x in settlements) == [0, 1, 2]
    assert sorted(x.outcome.value for x in settlements if isinstance(x.outcome, Ok)) == ["a", "b", "c"]
    assert block.answer.ok.saved is None
    await tier.wait_closed(s.key())


@scenario("protocols")
async def a_group_saved_inside_the_block_stays_open_and_resumes_where_it_was_left(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    late = s.event("late")
    group = s.group([s.echo("now"), event(late)])
    async with Turn(tier) as t:
        first = t.iterate(group, save_after=1)
        handle = first.group.save()
    assert [x.outcome for x in first.answer.ok.settlements] == [Ok(value="now")]
    assert first.answer.ok.saved_handle == handle.ok  # the block's save is the turn's handle
    assert s.key() in await tier.open_groups()  # saved: the end of the block left it open
    await tier.emit(late, "L")
    async with Turn(tier) as t:
        rest = t.iterate(group, resume=handle.ok)
    assert [(x.rank, x.outcome) for x in rest.answer.ok.settlements] == [(2, Ok(value="L"))]
    await tier.wait_closed(s.key())


@scenario("protocols")
async def an_error_raised_inside_the_block_still_closes_the_group(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        raised = t.iterate(s.group([s.echo(1), event(s.event("never"))]), raise_after=1)
    assert raised.answer.error.code == "invalid_input"
    await tier.wait_closed(s.key())
