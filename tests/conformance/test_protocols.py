"""The front door's Python protocols on a group, on every tier: ``async with lash.open(...)`` closes
the group when the block ends unless it was saved, and ``async for`` yields the settlements still to
consume, in rank order (ADR: the caller's cursor advances by exactly one per settlement)."""

from __future__ import annotations

from typing import Any

from tests.conformance.builders import Scope, echo, err, event, iterate, ok, save, use


async def test_async_for_yields_every_settlement_in_rank_order_and_the_block_closes_the_group(
    tier: Any,
) -> None:
    s = Scope()
    [body] = await tier.turn(iterate(s.group([echo("a"), echo("b"), echo("c")])))
    settlements = ok(body)["settlements"]
    assert [x["rank"] for x in settlements] == [1, 2, 3]
    assert sorted(x["position"] for x in settlements) == [0, 1, 2]
    assert sorted(x["outcome"]["value"] for x in settlements) == ["a", "b", "c"]
    assert ok(body)["saved"] is None
    await tier.wait_closed(s.key())


async def test_a_group_saved_inside_the_block_stays_open_and_resumes_where_it_was_left(tier: Any) -> None:
    s = Scope()
    late = s.event("late")
    group = s.group([echo("now"), event(late)])
    [first, handle] = await tier.turn(iterate(group, save_after=1), save())
    assert [x["outcome"]["value"] for x in ok(first)["settlements"]] == ["now"]
    assert ok(first)["saved"] == ok(handle)  # the block's save is the turn's handle
    assert s.key() in await tier.open_groups()  # saved: the end of the block left it open
    await tier.emit(late, "L")
    [_, rest] = await tier.turn(use(ok(handle)), iterate(group, resume=True))
    assert [(x["rank"], x["outcome"]["value"]) for x in ok(rest)["settlements"]] == [(2, "L")]
    await tier.wait_closed(s.key())


async def test_an_error_raised_inside_the_block_still_closes_the_group(tier: Any) -> None:
    s = Scope()
    [raised] = await tier.turn(iterate(s.group([echo(1), event(s.event("never"))]), raise_after=1))
    assert err(raised)["code"] == "invalid_input"
    await tier.wait_closed(s.key())
