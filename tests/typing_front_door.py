"""What a type checker sees of the front door: every public function and class as an application
uses it, checked by ``mypy --strict`` and ``pyright`` strict (``make lint``; pyproject's
``[tool.mypy] files`` and ``[tool.pyright] include``), never run.

Every ``assert_type`` fails the check if the front door loses a type (an ``Any`` where the handler's
model belongs), and every ``type: ignore[...]`` (mypy's) or ``pyright: ignore[...]`` fails it if a
call the front door must refuse starts to type-check. Where the two checkers infer differently (mypy
joins different models to ``object``, pyright keeps their union), each one's answer is pinned, the
other's ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, assert_type, cast

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
    # restate-sdk 1.3 cannot write a dataclass it is handed: such a handler answers its JSON object.
    return cast(Seat, dataclasses.asdict(Seat(row=row)))


@shop.handler()
async def stock(ctx: restate.Context, sku: str) -> dict[str, Any]:
    return {"sku": sku}


@shop.handler()
async def ping(ctx: restate.Context) -> int:
    return 1


@post.handler()
async def weigh(ctx: restate.ObjectContext, parcel: Parcel) -> Label:
    return Label(tracking="t")


@post.handler(kind="shared")
async def track(ctx: restate.ObjectSharedContext) -> Label:
    return Label(tracking="t")


flow = restate.Workflow("Ship")


@flow.main()
async def ship(ctx: restate.WorkflowContext, parcel: Parcel) -> Label:
    return Label(tracking="t")


@flow.handler()
async def where(ctx: restate.WorkflowSharedContext) -> str:
    return "here"


@flow.handler()
async def approve(ctx: restate.WorkflowSharedContext, ok: bool) -> None:
    # An event's signals from any handler's context, as a native one resolves a promise.
    if ok:
        assert_type(lash.emit(ctx, f"approval-{ctx.key()}", {"ok": True}), None)
    else:
        assert_type(lash.reject_event(ctx, f"approval-{ctx.key()}", "refused"), None)
    assert_type(lash.clear_event(ctx, f"approval-{ctx.key()}"), None)


async def children_are_typed_from_their_handlers() -> None:
    assert_type(lash.call(quote, QuoteRequest(sku="tea")), lash.TypedCall[Quote])
    assert_type(lash.call(quote, arg=QuoteRequest(sku="tea")), lash.TypedCall[Quote])
    assert_type(lash.call(weigh, Parcel(grams=1), key="p1"), lash.TypedCall[Label])
    assert_type(lash.call(seat, 3), lash.TypedCall[Seat])
    assert_type(lash.call(ping), lash.TypedCall[int])
    # A handler that takes no input, given None as a native call to it is written (`arg=None`).
    assert_type(lash.call(ping, None), lash.TypedCall[int])
    assert_type(lash.call(ping, arg=None), lash.TypedCall[int])
    assert_type(lash.call(track, None, key="p1"), lash.TypedCall[Label])
    assert_type(lash.call(where, arg=None, key="order-7"), lash.TypedCall[str])
    assert_type(lash.call("Billing", "charge", {"amount": 1}), lash.Call)  # served elsewhere: JSON
    scoped = lash.call(quote, QuoteRequest(sku="tea"), headers={"x-t": "a"}, scope="billing", limit_key="a/u")
    assert_type(scoped, lash.TypedCall[Quote])
    assert_type(lash.call(weigh, Parcel(grams=1), key="p1", scope="billing"), lash.TypedCall[Label])
    assert_type(lash.call(weigh, Parcel(grams=1), key="p1", idempotency_key="once"), lash.TypedCall[Label])
    assert_type(lash.call("Billing", "charge", {"amount": 1}, idempotency_key="once"), lash.Call)
    # A virtual object's or a workflow's handler, exclusive or shared, takes its key.
    assert_type(lash.call(weigh, arg=Parcel(grams=1), key="p1"), lash.TypedCall[Label])
    assert_type(lash.call(track, key="p1"), lash.TypedCall[Label])
    assert_type(lash.call(ship, Parcel(grams=1), key="order-7"), lash.TypedCall[Label])
    assert_type(lash.call(where, key="order-7"), lash.TypedCall[str])


def _model_of(ok: lash.Ok[BaseModel]) -> BaseModel:
    return ok.value


async def results_are_the_handlers_types(ctx: restate.Context) -> None:
    q = lash.call(quote, QuoteRequest(sku="tea"))
    w = lash.call(weigh, Parcel(grams=1), key="p1")
    deadline = lash.sleep(timedelta(seconds=5))

    assert_type(await lash.all(ctx, [q, q]), list[Quote])
    assert_type(await lash.all(ctx, (q for _ in range(3))), list[Quote])
    assert_type(await lash.all(ctx, q, w), tuple[Quote, Label])
    assert_type(await lash.all(ctx, q, w, lash.call(seat, 1)), tuple[Quote, Label, Seat])
    # Spread from a list (as `restate.gather(*futures)` is written), or more than five one by one: one type.
    quotes = [q, q]
    assert_type(await lash.all(ctx, *quotes), tuple[Quote, ...])
    assert_type(await lash.all(ctx, q, q, q, q, q, q, q), tuple[Quote, ...])
    assert_type(await lash.all(ctx, [lash.tool("echo"), q]), list[Any])  # an untyped child: JSON
    assert_type(await lash.all(ctx, q, lash.tool("echo")), tuple[Quote, Any])  # each its own
    # A handler whose output holds `Any` keeps its type, and its neighbours theirs.
    rows = lash.call(stock, "tea")
    assert_type(await lash.all(ctx, [rows]), list[dict[str, Any]])
    assert_type(await lash.all(ctx, q, rows), tuple[Quote, dict[str, Any]])
    assert_type(await lash.race(ctx, rows, deadline), dict[str, Any] | None)
    assert_type(
        await lash.all_settled(ctx, [rows]), list[lash.Ok[dict[str, Any]] | lash.Err | lash.Cancelled]
    )
    assert_type(await lash.select(ctx, a=rows), tuple[str, dict[str, Any]])
    assert_type(await lash.all_settled(ctx, [q, q]), list[lash.Ok[Quote] | lash.Err | lash.Cancelled])
    assert_type(await lash.all_settled(ctx, q, q), list[lash.Ok[Quote] | lash.Err | lash.Cancelled])
    # Calls of different types: an `Ok` of their join (mypy) or their union (pyright), to narrow as the
    # value is read.
    joined = await lash.all_settled(ctx, [q, w])
    assert_type(joined, list[lash.Ok[object] | lash.Err | lash.Cancelled])  # pyright: ignore[reportAssertTypeFailure]
    assert_type(joined, list[lash.Ok[Quote | Label] | lash.Err | lash.Cancelled])  # type: ignore[assert-type]
    assert_type(await lash.all_settled(ctx, [lash.tool("echo"), q]), list[lash.Outcome])
    # An `Ok` of a model is an `Ok` of its base, as its settlement is.
    made: lash.Ok[Quote] = lash.Ok(value=Quote(total=1))
    assert_type(_model_of(made), BaseModel)
    # A bound on how many run at once changes no answer's type.
    assert_type(await lash.all(ctx, [q, q], max_in_flight=1), list[Quote])
    assert_type(await lash.all(ctx, q, w, max_in_flight=1), tuple[Quote, Label])
    bounded = await lash.all_settled(ctx, [q, w], max_in_flight=1)
    assert_type(bounded, list[lash.Ok[object] | lash.Err | lash.Cancelled])  # pyright: ignore[reportAssertTypeFailure]
    assert_type(bounded, list[lash.Ok[Quote | Label] | lash.Err | lash.Cancelled])  # type: ignore[assert-type]
    assert_type(await lash.race(ctx, [q, q], max_in_flight=1), Quote)
    group = await lash.open(ctx, [q, w], max_in_flight=1)
    assert_type(group, lash.Group[object])  # pyright: ignore[reportAssertTypeFailure]
    assert_type(group, lash.Group[Quote | Label])  # type: ignore[assert-type]
    assert_type(
        await lash.any(ctx, q, deadline, max_in_flight=1, with_position=True), tuple[int, Quote | None]
    )

    assert_type(await lash.race(ctx, [q, q]), Quote)
    assert_type(await lash.race(ctx, q, deadline, losers=lash.CANCEL), Quote | None)
    assert_type(await lash.race(ctx, [q, q], with_position=True), tuple[int, Quote])
    assert_type(await lash.race(ctx, q, deadline, with_position=True), tuple[int, Quote | None])
    assert_type(await lash.race(ctx, [lash.tool("echo")]), Any)

    assert_type(await lash.any(ctx, [q, q]), Quote)
    assert_type(await lash.any(ctx, q, q, with_position=True), tuple[int, Quote])

    assert_type(await lash.select(ctx, a=q, b=q), tuple[str, Quote])
    assert_type(await lash.select(ctx, paid=q, late=deadline, losers=lash.CANCEL), tuple[str, Quote | None])
    # An event's value is JSON (`Any`): mypy answers `Any` for the pair, pyright the call's model.
    either = await lash.select(ctx, paid=q, note=lash.event("noted"))
    assert_type(either, tuple[str, Any])  # pyright: ignore[reportAssertTypeFailure]
    assert_type(either, tuple[str, Quote])  # type: ignore[assert-type]

    match await lash.select(ctx, paid=q, late=deadline, losers=lash.CANCEL):
        case ("paid", Quote() as won):
            assert_type(won, Quote)
        case _:
            pass


async def mistakes_do_not_type_check(ctx: restate.Context) -> None:
    lash.call(quote, {"sku": "tea"})  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    lash.call(quote)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    lash.call(ping, 1)  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    lash.call(ping, arg=1)  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    # A virtual object's handler needs key=, and so does a workflow's.
    lash.call(weigh, Parcel(grams=1))  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    lash.call(weigh, arg=Parcel(grams=1))  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    lash.call(track)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    lash.call(ship, Parcel(grams=1))  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    # A service's handler takes no key= (to mypy; pyright lets a `restate.Context` handler take an
    # object's context, and the call is refused when it is made).
    lash.call(quote, QuoteRequest(sku="tea"), key="k")  # type: ignore[type-var]
    lash.call(ping, key="k")  # type: ignore[type-var]
    await lash.race(ctx, [lash.call(quote, QuoteRequest(sku="tea"))], with_position=1)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    # A forgotten await: each is a coroutine, which both checkers flag left unused (it never runs).
    q = lash.call(quote, QuoteRequest(sku="tea"))
    lash.all(ctx, [q])  # type: ignore[unused-coroutine]  # pyright: ignore[reportUnusedCoroutine]
    lash.select(ctx, paid=q)  # type: ignore[unused-coroutine]  # pyright: ignore[reportUnusedCoroutine]
    group = await lash.open(ctx, [q])
    group.next()  # type: ignore[unused-coroutine]  # pyright: ignore[reportUnusedCoroutine]
    group.close()  # type: ignore[unused-coroutine]  # pyright: ignore[reportUnusedCoroutine]


async def a_list_of_different_children_has_one_type(ctx: restate.Context) -> None:
    # Built first, then passed: the list's type is `list[lash.Child]` to mypy, not
    # `list[msgspec.Struct]`; pyright keeps the union of the children's own types.
    kids = [lash.tool("echo", {"value": 1}), lash.sleep(timedelta(seconds=1)), lash.event("e")]
    assert_type(kids, list[lash.Child])  # pyright: ignore[reportAssertTypeFailure]
    assert_type(kids, list[lash.ToolCall | lash.Sleep | lash.AwaitEvent])  # type: ignore[assert-type]
    assert_type(await lash.race(ctx, kids), Any)
    mixed = [lash.call(quote, QuoteRequest(sku="tea")), lash.sleep(timedelta(seconds=1))]
    assert_type(mixed, list[lash.Child[Quote | None]])  # pyright: ignore[reportAssertTypeFailure]
    assert_type(mixed, list[lash.TypedCall[Quote] | lash.Sleep])  # type: ignore[assert-type]
    assert_type(await lash.all(ctx, mixed, on_reject=lash.CANCEL), list[Quote | None])


async def a_group_by_hand(ctx: restate.Context, saved: str | None) -> list[lash.Settlement]:
    kids = [lash.call(quote, QuoteRequest(sku="tea")), lash.event("approved")]
    assert_type(lash.open(ctx, kids), lash.Opening)
    group = await lash.open(ctx, kids, wake=lash.GroupWakePolicy.FIRST, losers=lash.CANCEL)
    assert_type(group, lash.Group)
    assert_type(await group.next(), lash.Settlement)
    assert_type(group.save(), str)
    await group.close(lash.CANCEL)
    seen: list[lash.Settlement] = []
    async with lash.open(ctx, kids, resume=saved) as resumed:
        assert_type(resumed, lash.Group)
        assert_type((resumed.key, resumed.consumed, len(resumed)), tuple[str, int, int])
        async for settlement in resumed:
            assert_type(settlement.outcome, lash.Ok[Any] | lash.Err | lash.Cancelled)
            assert_type(settlement.rank, int)
            seen.append(settlement)
    # Children of one value type type the group's settlements: `async for` reads the handler's type.
    async with lash.open(ctx, [lash.call(quote, QuoteRequest(sku=s)) for s in ("tea", "jam")]) as quotes:
        assert_type(quotes, lash.Group[Quote])
        async for quoted in quotes:
            assert_type(quoted, lash.Settlement[Quote])
            if isinstance(quoted.outcome, lash.Ok):
                assert_type(quoted.outcome.value, Quote)
        assert_type(await quotes.next(), lash.Settlement[Quote])
    return seen


async def errors_are_one_tree(ctx: restate.Context) -> None:
    try:
        await lash.all(ctx, [lash.call(quote, QuoteRequest(sku="tea"))])
    except lash.Rejected as rejected:
        assert_type(rejected.settlement, lash.Settlement)
        assert_type(rejected.name, str | None)
        assert_type(rejected.code, lash.RuntimeErrorCode)
    except lash.AggregateRejection as none_succeeded:
        assert_type(none_succeeded.errors, list[lash.Outcome])
    except lash.LashError as error:
        assert_type((error.message, error.group_key, error.position), tuple[str, str | None, int | None])


def the_endpoint() -> None:
    tools = lash.ToolRegistry()

    @tools.tool("echo")
    async def echo(args: Any) -> Any:
        return args

    lash.use_prefix("Shop")
    billing = lash.external("Billing", "charge")
    assert_type(billing, lash.Target)
    services = lash.services(shop, post, tools=tools, external=[billing], prefix=None)
    assert_type(services, list[restate.Service | restate.VirtualObject | restate.Workflow])
    app = lash.app(shop, post, tools=tools, external=[billing], name="shop")
    serving = lash.serve(app, "127.0.0.1", 9080, server="hypercorn")
    serving.close()  # a coroutine: `asyncio.run(serving)` runs the endpoint


def a_controller(ctx: restate.Context) -> lash.RestateController | None:
    owner = lash.controller(ctx)
    return owner if isinstance(owner, lash.RestateController) else None
