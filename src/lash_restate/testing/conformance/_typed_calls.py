"""Typed calls on every tier: ``lash.call(handler, arg)`` sends the handler's own model through its
input serde and hands back its output serde's model (decision 51). The targets are the demo's
`DemoTyped/quote` and `describe` (pydantic) and keyed `DemoLedger/weigh` (a msgspec Struct):
Restate handlers on Restate, their in-process twins (`CallRegistry.typed`) on the reference host."""

from __future__ import annotations

import asyncio

from ._answers import ErrorBody
from ._scenario import scenario
from ._steps import Scope, event, fail, typed
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []

ENDED_WITHIN = 30  # how long a cancelled loser may take to end before the test calls it left running


@scenario("typed_calls")
async def a_typed_call_sends_the_handlers_model_and_hands_back_its_model(
    tier: Tier, children: ChildKind
) -> None:
    """The callee reads the argument as its model (it prices it, and weighs it per key), and each
    value comes back as the model its handler returns, per position, beside an untyped child's."""
    s = Scope(children)
    kids = [
        typed("quote", {"sku": "tea", "qty": 3}),
        typed("weigh", {"grams": 250}, key=s.id),
        s.echo("plain"),
    ]
    async with Turn(tier) as t:
        first, again = t.front("all", s.key(), kids), t.front("all", s.key("again"), kids)
    assert first.ok == {
        "values": [
            {"type": "Quote", "value": {"sku": "tea", "total": 21}},
            {"type": "Label", "value": {"key": s.id, "grams": 250, "total": 250}},
            {"type": "str", "value": "plain"},
        ]
    }
    assert again.ok["values"][1]["value"]["total"] == 500  # the keyed call reached the same object
    await tier.wait_closed(s.key())


@scenario("typed_calls")
async def a_call_keyed_with_the_empty_string_reaches_that_object(tier: Tier, children: ChildKind) -> None:
    """Restate keys an object by any string, the empty one too, as ``ctx.object_call(handler,
    key="")`` reaches it: so does ``lash.call(handler, arg, key="")``, the same object each time."""
    s = Scope(children)
    async with Turn(tier) as t:
        first = t.front("all", s.key(), [typed("weigh", {"grams": 7}, key="")])
        again = t.front("all", s.key("again"), [typed("weigh", {"grams": 7}, key="")])
    [label], [later] = (reply.ok["values"] for reply in (first, again))
    assert label["value"]["key"] == "" and label["value"]["grams"] == 7, label
    assert later["value"]["total"] == label["value"]["total"] + 7, (label, later)
    await tier.wait_closed(s.key())


@scenario("typed_calls")
async def a_call_given_no_argument_reaches_a_handler_of_an_optional_model_as_none(
    tier: Tier, children: ChildKind
) -> None:
    """``lash.call(handler, None)`` gives the callee what ``ctx.service_call(handler, None)`` gives:
    no argument, which a handler that takes an optional model reads as ``None`` (a JSON ``null`` is
    no model: the SDK fails the callee before it runs)."""
    s = Scope(children)
    kids = [typed("describe", None), typed("describe", {"sku": "tea", "qty": 1}), typed("describe", None)]
    async with Turn(tier) as t:
        described = t.front("all", s.key(), kids)
    shown = [{"type": "str", "value": value} for value in ("nothing", "tea", "nothing")]
    assert described.ok == {"values": shown}
    await tier.wait_closed(s.key())


@scenario("typed_calls")
async def all_settled_reads_each_fulfilled_typed_call_and_keeps_a_rejection_as_it_is(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    kids = [
        typed("quote", {"sku": "tea", "qty": 1, "refuse": "out of stock"}),
        typed("quote", {"sku": "m", "qty": 2}),
    ]
    async with Turn(tier) as t:
        settled = t.front("all_settled", s.key(), kids)
    assert settled.ok == {
        "outcomes": [
            {"type": "err", "message": "out of stock", "code": "409"},
            {"type": "ok", "value": {"type": "Quote", "value": {"sku": "m", "total": 14}}},
        ]
    }


@scenario("typed_calls")
async def an_argument_its_handlers_serde_cannot_write_is_refused_naming_the_child(
    tier: Tier, children: ChildKind
) -> None:
    """A bad argument is refused where lash builds the group, typed and naming the child's position
    and the types, before anything is sent: no group is opened."""
    s = Scope(children)
    kids = [s.echo("a"), typed("quote", {"sku": "tea", "qty": 1}, raw=True)]
    async with Turn(tier) as t:
        refused = t.front("race", s.key(), kids)
        unkeyed = t.front("race", s.key("k"), [typed("weigh", {"grams": 1})])
    assert refused.error == ErrorBody(
        code="invalid_input",
        message="child 1: DemoTyped/quote takes a QuoteRequest, and its input serde cannot write the dict "
        "given (AttributeError: 'dict' object has no attribute 'model_dump_json')",
        position=1,
    )
    assert unkeyed.error == ErrorBody(
        code="invalid_input", message="DemoLedger/weigh is a virtual object's handler: the call needs key="
    )
    assert not {s.key(), s.key("k")} & await tier.open_groups()


@scenario("typed_calls")
async def race_and_any_answer_the_winners_position_and_its_model(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    name = s.event("never")
    async with Turn(tier) as t:
        won = t.front(
            "race", s.key(), [event(name), typed("quote", {"sku": "tea", "qty": 2})], losers="cancel"
        )
        succeeded = t.front("any", s.key("any"), [fail("no"), typed("weigh", {"grams": 5}, key=s.id)])
    assert won.ok == {"value": {"type": "Quote", "value": {"sku": "tea", "total": 14}}, "position": 1}
    assert succeeded.ok == {
        "value": {"type": "Label", "value": {"key": s.id, "grams": 5, "total": 5}},
        "position": 1,
    }
    async with asyncio.timeout(ENDED_WITHIN):
        await tier.wait_child_finished(f"{s.key()}/0")  # the event arm lost, and was cancelled
    await tier.wait_closed(s.key("any"))
