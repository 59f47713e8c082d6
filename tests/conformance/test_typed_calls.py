"""Typed calls on every tier: ``lash.call(handler, arg)`` sends the handler's own model through its
input serde and hands back its output serde's model (decision 51). The targets are the demo's
`DemoTyped/quote` (pydantic) and keyed `DemoLedger/weigh` (a msgspec Struct): Restate handlers on
Restate, their in-process twins (`CallRegistry.typed`) on the reference host."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.builders import Scope, echo, err, event, fail, front, ok, typed

ENDED_WITHIN = 30  # how long a cancelled loser may take to end before the test calls it left running


async def test_a_typed_call_sends_the_handlers_model_and_hands_back_its_model(tier: Any) -> None:
    """The callee reads the argument as its model (it prices it, and weighs it per key), and each
    value comes back as the model its handler returns, per position, beside an untyped child's."""
    s = Scope()
    children = [
        typed("quote", {"sku": "tea", "qty": 3}),
        typed("weigh", {"grams": 250}, key=s.id),
        echo("plain"),
    ]
    [first, again] = await tier.turn(front("all", s.key(), children), front("all", s.key("again"), children))
    assert ok(first) == {
        "values": [
            {"type": "Quote", "value": {"sku": "tea", "total": 21}},
            {"type": "Label", "value": {"key": s.id, "grams": 250, "total": 250}},
            {"type": "str", "value": "plain"},
        ]
    }
    assert ok(again)["values"][1]["value"]["total"] == 500  # the keyed call reached the same object
    await tier.wait_closed(s.key())


async def test_all_settled_reads_each_fulfilled_typed_call_and_keeps_a_rejection_as_it_is(tier: Any) -> None:
    s = Scope()
    children = [
        typed("quote", {"sku": "tea", "qty": 1, "refuse": "out of stock"}),
        typed("quote", {"sku": "m", "qty": 2}),
    ]
    [settled] = await tier.turn(front("all_settled", s.key(), children))
    assert ok(settled) == {
        "outcomes": [
            {"type": "err", "message": "out of stock", "code": "409"},
            {"type": "ok", "value": {"type": "Quote", "value": {"sku": "m", "total": 14}}},
        ]
    }


async def test_an_argument_its_handlers_serde_cannot_write_is_refused_naming_the_child(tier: Any) -> None:
    """A bad argument is refused where lash builds the group, typed and naming the child's position
    and the types, before anything is sent: no group is opened."""
    s = Scope()
    children = [echo("a"), typed("quote", {"sku": "tea", "qty": 1}, raw=True)]
    [refused, unkeyed] = await tier.turn(
        front("race", s.key(), children), front("race", s.key("k"), [typed("weigh", {"grams": 1})])
    )
    assert err(refused) == {
        "code": "invalid_input",
        "message": "child 1: DemoTyped/quote takes a QuoteRequest, and its input serde cannot write the dict "
        "given (AttributeError: 'dict' object has no attribute 'model_dump_json')",
        "position": 1,
    }
    assert err(unkeyed) == {
        "code": "invalid_input",
        "message": "DemoLedger/weigh is a virtual object's handler: the call needs key=",
    }
    assert not {s.key(), s.key("k")} & await tier.open_groups()


async def test_race_and_any_answer_the_winners_position_and_its_model(tier: Any) -> None:
    s = Scope()
    name = s.event("never")
    raced = front("race", s.key(), [event(name), typed("quote", {"sku": "tea", "qty": 2})], losers="cancel")
    anyone = front("any", s.key("any"), [fail("no"), typed("weigh", {"grams": 5}, key=s.id)])
    [won, succeeded] = await tier.turn(raced, anyone)
    assert ok(won) == {"value": {"type": "Quote", "value": {"sku": "tea", "total": 14}}, "position": 1}
    assert ok(succeeded) == {
        "value": {"type": "Label", "value": {"key": s.id, "grams": 5, "total": 5}},
        "position": 1,
    }
    async with asyncio.timeout(ENDED_WITHIN):
        await tier.wait_child_finished(f"{s.key()}/0")  # the event arm lost, and was cancelled
    await tier.wait_closed(s.key("any"))
