"""What a type checker sees of typed calls, `select`, `race` and `any`: checked by ``mypy --strict``
(``make lint``; pyproject's ``[tool.mypy] files``), never run.

Every ``assert_type`` fails the check if the front door loses a type (an ``Any`` where the handler's
model belongs), and every ``type: ignore[...]`` fails it (``warn_unused_ignores``) if a call the front
door must refuse starts to type-check.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, assert_type

import msgspec
import restate
from pydantic import BaseModel

import lash_restate as lash


class QuoteRequest(BaseModel):
    sku: str


class Quote(BaseModel):
    total: int


class Parcel(msgspec.Struct):
    grams: int


class Label(msgspec.Struct):
    tracking: str


@dataclass
class Seat:
    row: int


shop = restate.Service("Shop")
post = restate.VirtualObject("Post")


@shop.handler()
async def quote(ctx: restate.Context, req: QuoteRequest) -> Quote:
    return Quote(total=1)


@shop.handler()
async def seat(ctx: restate.Context, row: int) -> Seat:
    return Seat(row=row)


@shop.handler()
async def ping(ctx: restate.Context) -> int:
    return 1


@post.handler()
async def weigh(ctx: restate.ObjectContext, parcel: Parcel) -> Label:
    return Label(tracking="t")


async def children_are_typed_from_their_handlers() -> None:
    assert_type(lash.call(quote, QuoteRequest(sku="tea")), lash.TypedCall[Quote])
    assert_type(lash.call(quote, arg=QuoteRequest(sku="tea")), lash.TypedCall[Quote])
    assert_type(lash.call(weigh, Parcel(grams=1), key="p1"), lash.TypedCall[Label])
    assert_type(lash.call(seat, 3), lash.TypedCall[Seat])
    assert_type(lash.call(ping), lash.TypedCall[int])
    assert_type(lash.call("Billing", "charge", {"amount": 1}), lash.Call)  # served elsewhere: JSON


async def results_are_the_handlers_types(ctx: restate.Context) -> None:
    q = lash.call(quote, QuoteRequest(sku="tea"))
    w = lash.call(weigh, Parcel(grams=1), key="p1")
    deadline = lash.sleep(timedelta(seconds=5))

    assert_type(await lash.all(ctx, [q, q]), list[Quote])
    assert_type(await lash.all(ctx, (q for _ in range(3))), list[Quote])
    assert_type(await lash.all(ctx, q, w), tuple[Quote, Label])
    assert_type(await lash.all(ctx, q, w, lash.call(seat, 1)), tuple[Quote, Label, Seat])
    assert_type(await lash.all(ctx, [lash.tool("echo"), q]), list[Any])  # an untyped child: JSON
    assert_type(await lash.all_settled(ctx, [q, w]), list[lash.Outcome])

    assert_type(await lash.race(ctx, [q, q]), Quote)
    assert_type(await lash.race(ctx, q, deadline, losers=lash.CANCEL), Quote | None)
    assert_type(await lash.race(ctx, [q, q], with_position=True), tuple[int, Quote])
    assert_type(await lash.race(ctx, q, deadline, with_position=True), tuple[int, Quote | None])
    assert_type(await lash.race(ctx, [lash.tool("echo")]), Any)

    assert_type(await lash.any(ctx, [q, q]), Quote)
    assert_type(await lash.any(ctx, q, q, with_position=True), tuple[int, Quote])

    assert_type(await lash.select(ctx, a=q, b=q), tuple[str, Quote])
    assert_type(await lash.select(ctx, paid=q, late=deadline, losers=lash.CANCEL), tuple[str, Quote | None])
    assert_type(await lash.select(ctx, paid=q, note=lash.event("noted")), tuple[str, Any])

    match await lash.select(ctx, paid=q, late=deadline, losers=lash.CANCEL):
        case ("paid", Quote() as won):
            assert_type(won, Quote)
        case _:
            pass


async def mistakes_do_not_type_check(ctx: restate.Context) -> None:
    lash.call(quote, {"sku": "tea"})  # type: ignore[arg-type]
    lash.call(quote)  # type: ignore[arg-type]
    lash.call(ping, 1)  # type: ignore[arg-type]
    await lash.race(ctx, [lash.call(quote, QuoteRequest(sku="tea"))], with_position=1)  # type: ignore[call-overload]
