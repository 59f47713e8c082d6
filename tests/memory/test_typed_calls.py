"""Typed calls on the reference host: pydantic models, dataclasses and msgspec Structs through the
handler's own serde (`lash_restate.calls.HandlerRef`), the one path the Restate host takes too
(decision 51), and what is refused, typed, where lash builds the group."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgspec
import pytest
import restate
from pydantic import BaseModel

import lash_restate as lash
from lash_restate._front._invocation import typed_grouped
from lash_restate.engine import RestateController
from lash_restate.handlers import handler_ref
from lash_restate.memory import CallRegistry, MemoryHost, first_of
from lash_restate.testing import demo_tools
from tests.sdk_context import replaying_context


class Order(BaseModel):
    sku: str
    qty: int


class Priced(BaseModel):
    sku: str
    total: int


@dataclass
class Booking:
    row: int
    seats: list[str]


@dataclass
class Booked:
    ticket: str
    seats: int


class Parcel(msgspec.Struct):
    grams: int


class Label(msgspec.Struct):
    key: str
    grams: int


shop = restate.Service("Shop")
post = restate.VirtualObject("Post")


@shop.handler()
async def price(ctx: restate.Context, order: Order) -> Priced:
    raise AssertionError("the in-process twin runs on the reference host")


@shop.handler()
async def book(ctx: restate.Context, booking: Booking) -> Booked:
    raise AssertionError("the in-process twin runs on the reference host")


@shop.handler()
async def untyped(ctx: restate.Context, anything: Any) -> Any:
    raise AssertionError("the in-process twin runs on the reference host")


@shop.handler()
async def ping(ctx: restate.Context) -> int:
    raise AssertionError("the in-process twin runs on the reference host")


@shop.handler()
async def find(ctx: restate.Context, booking: Booking | None) -> Booked | None:
    raise AssertionError("the in-process twin runs on the reference host")


@shop.handler()
async def ratio(ctx: restate.Context, parts: list[int]) -> float:
    raise AssertionError("the in-process twin runs on the reference host")


class _Digits(restate.serde.Serde[Decimal]):
    """An application's own serde that writes an amount as a JSON number, every digit kept."""

    def serialize(self, obj: Decimal | None) -> bytes:
        return b"" if obj is None else f'{{"amount": {obj}}}'.encode()

    def deserialize(self, buf: bytes) -> Decimal | None:
        return Decimal(str(json.loads(buf)["amount"])) if buf else None


@shop.handler(input_serde=_Digits())
async def credit(ctx: restate.Context, amount: Decimal) -> str:
    raise AssertionError("the in-process twin runs on the reference host")


@post.handler(kind="shared")
async def track(ctx: restate.ObjectSharedContext) -> Label:
    raise AssertionError("never run: only built")


@post.handler()
async def weigh(ctx: restate.ObjectContext, parcel: Parcel) -> Label:
    raise AssertionError("the in-process twin runs on the reference host")


received: list[Any] = []  # what each twin was handed: its handler's model, not a dict


def _calls() -> CallRegistry:
    calls = CallRegistry()

    @calls.typed(price)
    async def price_here(key: str | None, order: Order) -> Priced:
        received.append(order)
        return Priced(sku=order.sku, total=3 * order.qty)

    @calls.typed(book)
    async def book_here(key: str | None, booking: Booking) -> Booked:
        received.append(booking)
        return Booked(ticket=f"r{booking.row}", seats=len(booking.seats))

    @calls.typed(untyped)
    async def untyped_here(key: str | None, anything: Any) -> Any:
        received.append(anything)
        return {"echo": anything}

    @calls.typed(ping)
    async def ping_here(key: str | None, nothing: None) -> int:
        received.append(nothing)
        return 1

    @calls.typed(find)
    async def find_here(key: str | None, booking: Booking | None) -> Booked | None:
        received.append(booking)
        return None if booking is None else Booked(ticket=f"r{booking.row}", seats=len(booking.seats))

    @calls.typed(ratio)
    async def ratio_here(key: str | None, parts: list[int]) -> float:
        return parts[0] / parts[1] if parts[1] else float("nan")  # DefaultSerde writes NaN, no JSON

    @calls.typed(credit)
    async def credit_here(key: str | None, amount: Decimal) -> str:
        received.append(amount)
        return str(amount)

    @calls.typed(weigh)
    async def weigh_here(key: str | None, parcel: Parcel) -> Label:
        assert key is not None
        received.append(parcel)
        return Label(key=key, grams=parcel.grams)

    return calls


@asynccontextmanager
async def _host() -> AsyncIterator[MemoryHost]:
    received.clear()
    memory = MemoryHost(resolver=first_of(demo_tools(), _calls()))
    try:
        yield memory
    finally:
        await memory.aclose()


async def test_models_of_every_kind_reach_the_twin_as_models_and_come_back_as_models() -> None:
    async with _host() as host:
        values = await lash.all(
            host,
            lash.call(price, Order(sku="tea", qty=2)),
            lash.call(book, Booking(row=7, seats=["a", "b"])),
            lash.call(weigh, Parcel(grams=40), key="p1"),
            lash.call(ping),
            key="s:group:kinds:0",
        )
        assert values == (
            Priced(sku="tea", total=6),
            Booked(ticket="r7", seats=2),
            Label(key="p1", grams=40),
            1,
        )
        assert received == [Order(sku="tea", qty=2), Booking(row=7, seats=["a", "b"]), Parcel(grams=40), None]


async def test_a_handler_that_takes_no_input_is_called_alike_with_none_as_natively_written() -> None:
    """`ctx.service_call(ping, arg=None)` is how a native caller calls a handler without input:
    `lash.call(ping, None)` and `lash.call(ping, arg=None)` make the child `lash.call(ping)` makes
    (the same command, so the same group key), and it runs; any other argument is refused."""
    given = [lash.call(ping, None), lash.call(ping, arg=None), lash.call(track, None, key="p1")]
    assert [child.command(0) for child in given[:2]] == [lash.call(ping).command(0)] * 2
    assert given[2].command(0) == lash.call(track, key="p1").command(0)
    async with _host() as host:
        assert await lash.all(host, given[:2], key="s:group:none:0") == [1, 1]
    with pytest.raises(lash.InvalidInput, match=r"Shop/ping takes no argument: lash\.call\(handler\) or"):
        lash.call(ping, arg=0)  # type: ignore[arg-type]


async def test_a_typed_call_is_recorded_as_a_call_holding_the_json_its_serde_writes() -> None:
    """The persisted `Call` keeps its format: the argument is the JSON value of the model, so the
    group key (a hash of the children) is the one a string call with that JSON gets."""
    async with _host() as host:
        typed = lash.call(book, Booking(row=7, seats=["a"]))
        assert typed.command(0) == lash.Call(service="Shop", handler="book", arg={"row": 7, "seats": ["a"]})
        assert lash.call(price, Order(sku="t", qty=1)).command(0).arg == {"sku": "t", "qty": 1}
        assert lash.call(weigh, Parcel(grams=1), key="k").command(0) == lash.Call(
            service="Post", handler="weigh", arg={"grams": 1}, key="k"
        )
        group = await lash.open(host, [typed], key="s:group:rec:0")
        [child] = host.store.groups[group.key].children
        assert child.command == typed.command(0)
        settlement = await group.next()
        assert settlement.outcome == lash.Ok(value=Booked(ticket="r7", seats=1))  # read by the output serde
        await group.close()


async def test_an_untyped_handler_takes_any_model_as_its_own_type_writes_it() -> None:
    """A handler whose input names no model keeps the SDK's untyped serde; a model given to it is
    written as its own type writes itself (as `ctx.set` does), and its answer stays JSON."""
    async with _host() as host:
        values = await lash.all(
            host,
            [lash.call(untyped, Order(sku="x", qty=1)), lash.call(untyped, Parcel(grams=2))],
            key="s:group:untyped:0",
        )
        assert values == [{"echo": {"sku": "x", "qty": 1}}, {"echo": {"grams": 2}}]


async def test_a_child_keeps_the_argument_it_was_made_with_as_a_native_call_does() -> None:
    """A native call writes its argument as it is made. So does `lash.call`, typed or by name, and
    `lash.tool` keeps its arguments: a loop that changes one object between its children's makings
    sends each child the value it had then, not the last one."""
    async with _host() as host:
        order, spec = Order(sku="a", qty=1), {"value": ["a"]}
        children: list[lash.Child[Any]] = []
        for sku in "abc":
            order.sku, spec["value"][0] = sku, sku
            children += [lash.call(price, order), lash.call("Shop", "untyped", spec), lash.tool("echo", spec)]
        order.sku, spec["value"][0] = "changed", "changed"
        values = await lash.all(host, children, key="s:group:as-made:0")
        assert values == [
            value for sku in "abc" for value in (Priced(sku=sku, total=3), {"echo": {"value": [sku]}}, [sku])
        ]
        assert received == [value for sku in "abc" for value in (Order(sku=sku, qty=1), {"value": [sku]})]


async def test_an_argument_the_serde_cannot_write_is_refused_before_anything_is_sent() -> None:
    """Refused where the group is built, naming the child's position; a note says where the call
    was made (the traceback shows the group's build)."""
    async with _host() as host:
        made_at = sys._getframe().f_lineno + 1
        children: list[lash.Child] = [lash.tool("echo", {"value": 1}), lash.call(price, {"sku": "tea"})]  # type: ignore[arg-type]
        with pytest.raises(lash.InvalidInput) as refused:
            await lash.race(host, children, key="s:group:bad:0")
        assert refused.value.position == 1
        assert refused.value.__notes__ == [f"lash.call made at {__file__}:{made_at}"]
        assert refused.value.message == (
            "child 1: Shop/price takes an Order, and its input serde cannot write the dict given "
            "(AttributeError: 'dict' object has no attribute 'model_dump_json')"
        )
        with pytest.raises(lash.InvalidInput, match="child 'paid': Shop/book takes a Booking") as named:
            await lash.select(host, key="s:group:bad:1", fine=lash.tool("echo"), paid=lash.call(book, {1, 2}))  # type: ignore[arg-type]
        assert named.value.position == 1
        nan = lash.call(untyped, float("nan"))
        with pytest.raises(lash.InvalidInput, match=r"child 0: Shop/untyped .* cannot write the float given"):
            await lash.all(host, [nan], key="s:group:bad:2")
        assert not host.store.groups  # nothing was opened


async def test_an_argument_lash_would_round_is_refused_as_a_group_is_first_opened() -> None:
    """lash records a call's argument as JSON whose numbers are floats, so a number its serde writes
    with more digits than a float holds would reach the callee rounded (a native call sends the
    serde's bytes). A first open refuses it, naming the number; one a float holds passes, however
    the serde spells it. A resume records it rounded, as an earlier release opened the group with
    it: a saved group resumes with the children it was opened with."""
    exact = Decimal("0.1000000000000000055511151231257827")
    async with _host() as host:
        with pytest.raises(lash.InvalidInput) as refused:
            await lash.all(host, [lash.call(credit, exact)], key="s:group:round:0")
        assert refused.value.position == 0
        assert refused.value.message == (
            "child 0: Shop/credit takes a Decimal, and its input serde cannot write the Decimal given "
            "(it writes the number 0.1000000000000000055511151231257827, which lash, recording a "
            "call's argument as JSON, would round to 0.1: write it as a string)"
        )
        with pytest.raises(lash.InvalidInput, match=r"would round to 3\.141592653589793"):
            await lash.open(
                host, [lash.call(credit, Decimal("3.14159265358979323846"))], key="s:group:round:1"
            )
        assert not host.store.groups
        assert await lash.all(host, [lash.call(credit, Decimal("1.10"))], key="s:group:round:2") == ["1.1"]
        assert await lash.all(host, [lash.call(credit, Decimal("1E+300"))], key="s:group:round:3") == [
            "1E+300"
        ]
        # Opened with the amount a float holds (as an earlier release recorded the exact one), saved,
        # and resumed with the exact amount: the same child.
        async with lash.open(host, [lash.call(credit, Decimal("0.1"))], key="s:group:round:4") as group:
            saved = group.save()
        async with lash.open(host, [lash.call(credit, exact)], resume=saved) as resumed:
            [settlement] = [s async for s in resumed]
        assert settlement.outcome == lash.Ok(value="0.1")


def test_a_replayed_first_open_keeps_the_argument_an_earlier_release_rounded() -> None:
    """On Restate, a caller replaying a journal that holds the open an earlier release sent, with a
    typed call's argument it rounded, builds the same open (a refusal there would fail a caller
    that release had running); a live first open refuses it. A handler's context says which
    (restate-sdk keeps it on the context's VM)."""
    exact = Decimal("0.1000000000000000055511151231257827")
    for replaying in (True, False):
        owner = RestateController(replaying_context(replaying))
        if replaying:
            _, [envelope], _ = typed_grouped(
                owner, [lash.call(credit, exact)], "s:group:replay:0", "lash.all"
            )
            assert envelope.command == lash.call(credit, Decimal("0.1")).command(0)
        else:
            with pytest.raises(lash.InvalidInput, match=r"would round to 0\.1:"):
                typed_grouped(owner, [lash.call(credit, exact)], "s:group:r:0", "lash.all")


async def test_a_handler_whose_input_serde_writes_no_json_is_refused_saying_why() -> None:
    """A handler that takes raw bytes (`restate.serde.BytesSerde`) cannot be a typed call's target:
    lash records the argument as JSON. The refusal says so, rather than blaming the argument."""
    raw = restate.Service("Raw")

    @raw.handler(input_serde=restate.serde.BytesSerde())
    async def blob(ctx: restate.Context, data: bytes) -> int:
        return len(data)

    async with _host() as host:
        with pytest.raises(lash.InvalidInput) as refused:
            await lash.all(host, [lash.call(blob, b"\x00\x01")], key="s:group:raw:0")
        assert refused.value.message == (
            "child 0: Raw/blob cannot be a lash.call child: its input serde, BytesSerde, writes no "
            "JSON, and lash records a call's argument as JSON; give the handler's input a JSON serde "
            "(a pydantic model, a msgspec Struct, or the default)"
        )
        assert not host.store.groups


def test_a_handler_whose_output_serde_writes_no_json_is_refused_as_the_call_is_built() -> None:
    """Its answer would be read as JSON only where the child settles, after the callee ran: refused
    where the call is made, naming the serde (a native call's serde reads the bytes as they are)."""
    raw = restate.Service("Raw")

    @raw.handler(output_serde=restate.serde.BytesSerde())
    async def render(ctx: restate.Context, page: str) -> bytes:
        return page.encode()

    with pytest.raises(lash.InvalidInput, match=r"Raw/render cannot be a lash\.call child: its output serde"):
        lash.call(render, "home")


def test_a_call_that_cannot_be_made_is_refused_as_it_is_built() -> None:
    with pytest.raises(lash.InvalidInput, match="is not a Restate handler"):
        lash.call(print, 1)  # type: ignore[arg-type]
    with pytest.raises(
        lash.InvalidInput, match="Post/weigh is a virtual object's handler: the call needs key="
    ):
        lash.call(weigh, Parcel(grams=1))  # type: ignore[arg-type]  # the type checker refuses it too
    # A native object call's order, `ctx.object_call(handler, key, arg)`: the key goes by name.
    with pytest.raises(
        lash.InvalidInput,
        match=r"takes one argument and the key by name: lash\.call\(handler, arg, key=\.\.\.\)",
    ):
        lash.call(weigh, "p1", Parcel(grams=1))  # type: ignore[call-overload]
    with pytest.raises(
        lash.InvalidInput, match="Shop/price is a service's handler: the call must not carry a key"
    ):
        lash.call(price, Order(sku="t", qty=1), key="k")  # type: ignore[type-var]  # and this
    with pytest.raises(lash.InvalidInput, match="Shop/price takes an argument"):
        lash.call(price)  # type: ignore[arg-type]
    with pytest.raises(lash.InvalidInput, match="Shop/ping takes no argument"):
        lash.call(ping, 1)  # type: ignore[arg-type]
    with pytest.raises(lash.InvalidInput, match="takes one argument, given twice"):
        lash.call(price, Order(sku="t", qty=1), arg=Order(sku="t", qty=1))  # type: ignore[call-overload]
    # What a native call would refuse only as it is sent, refused as the call is built.
    with pytest.raises(lash.InvalidEnvelope, match="call key must be"):
        lash.call(weigh, Parcel(grams=1), key=123)  # type: ignore[call-overload]
    for headers in (5, "abc", [1]):
        with pytest.raises(lash.InvalidInput, match="a call's headers are a mapping of text to text"):
            lash.call(price, Order(sku="t", qty=1), headers=headers)  # type: ignore[call-overload]
        with pytest.raises(lash.InvalidInput, match="a call's headers are a mapping of text to text"):
            lash.call("Shop", "price", {}, headers=headers)  # type: ignore[call-overload]


async def test_a_value_the_output_serde_cannot_read_is_a_typed_error_naming_the_child() -> None:
    """A callee answering another shape than its reference declares: the settlement stands, and the
    front door says so, typed (a terminal error in a handler), instead of handing back a dict."""
    calls = CallRegistry()

    @calls.handler("Shop", "price")
    async def wrong(key: str | None, arg: Any) -> Any:
        return {"sku": "tea"}  # no total

    memory = MemoryHost(resolver=calls)
    try:
        with pytest.raises(lash.UndecodableResult) as undecodable:
            await lash.race(memory, [lash.call(price, Order(sku="tea", qty=1))], key="s:group:wrong:0")
    finally:
        await memory.aclose()
    error = undecodable.value
    assert (error.position, error.replay_key, error.group_key) == (0, "s:group:wrong:0/0", "s:group:wrong:0")
    assert error.message.startswith(
        "Shop/price settled with a value its output serde cannot read as a Priced"
    )


async def test_a_twin_handed_json_its_input_serde_cannot_read_rejects_as_the_sdk_does() -> None:
    """The SDK ends a handler whose input it cannot parse in a terminal error (status 500); so does
    an in-process twin: the child rejects, it is not retried."""
    async with _host() as host:
        [outcome] = await lash.all_settled(
            host, [lash.call("Shop", "price", {"sku": "tea"})], key="s:group:parse:0"
        )
        assert isinstance(outcome, lash.Err) and outcome.code == "500"
        assert outcome.message.startswith("Unable to parse an input argument.")


def test_a_handler_reference_says_what_ctx_service_call_reads() -> None:
    ref = handler_ref(weigh)
    assert (ref.service, ref.handler, ref.kind, ref.keyed, ref.takes_input) == (
        "Post",
        "weigh",
        "object",
        True,
        True,
    )
    assert ref.arg.to_json(Parcel(grams=3)) == {"grams": 3}
    assert ref.result.from_json({"key": "k", "grams": 3}) == Label(key="k", grams=3)
    assert handler_ref(book).result.from_json({"ticket": "t", "seats": 2}) == Booked(ticket="t", seats=2)
    assert handler_ref(ping).takes_input is False


async def test_any_answers_the_position_of_its_first_success_not_of_its_first_settlement() -> None:
    async with _host() as host:
        key = "s:group:any:0"
        children: list[lash.Child] = [lash.tool("fail", {"message": "no"}), lash.event("approved")]
        answer = asyncio.create_task(lash.any(host, children, key=key, with_position=True))
        while not (record := host.store.groups.get(key)) or not record.order:
            await (record.changed.wait() if record is not None else asyncio.sleep(0))
        host.store.emit_event("approved", {"by": "ops"})  # the success comes second, at rank 2
        assert await answer == (1, {"by": "ops"})


async def test_call_options_are_carried_in_the_command_and_ignored_by_the_reference_host() -> None:
    """They are what Restate gives the callee's invocation (tests/engine/test_call_options.py); an
    in-process twin has no invocation to give them to, and settles as without them."""
    options: dict[str, Any] = {"headers": {"x-tenant": "acme"}, "scope": "billing", "limit_key": "acme/u1"}
    options["idempotency_key"] = "order-7"
    typed = lash.call(price, Order(sku="tea", qty=2), **options)
    assert typed.command(0) == lash.Call(
        service="Shop", handler="price", arg={"sku": "tea", "qty": 2}, **options
    )
    assert repr(typed).endswith(
        "headers={'x-tenant': 'acme'}, scope='billing', limit_key='acme/u1', idempotency_key='order-7')"
    )
    named = lash.call("Shop", "price", {"sku": "tea", "qty": 2}, **options)
    assert named == typed.command(0)
    assert lash.call("S", "h", headers={}) == lash.call("S", "h")  # empty headers are no headers
    async with _host() as host:
        assert await lash.all(host, typed, key="s:group:options:0") == (Priced(sku="tea", total=6),)


@pytest.mark.parametrize(
    "options",
    [
        {"limit_key": "acme"},
        {"scope": "no spaces"},
        {"scope": "s", "limit_key": "a/b/c"},
        {"headers": {"x": 1}},
    ],
    ids=["limit-key-alone", "bad-scope", "bad-limit-key", "non-string-header"],
)
def test_a_bad_call_option_is_refused_typed_where_the_call_is_written(options: dict[str, Any]) -> None:
    """Restate retries a call whose scope or limit key breaks its rules for ever (RT0024): refused here,
    as `InvalidEnvelope`, for a typed call and a named one alike."""
    with pytest.raises(lash.InvalidEnvelope):
        lash.call(price, Order(sku="tea", qty=2), **options)
    with pytest.raises(lash.InvalidEnvelope):
        lash.call("Shop", "price", {}, **options)


async def test_an_optional_dataclass_is_none_both_ways_as_an_empty_body_reads() -> None:
    """A handler taking and answering an optional dataclass: no argument reaches its twin as ``None``
    and a ``None`` answer comes back ``None`` (the SDK strips ``Optional``: it was read as a
    dataclass, and failed), a dataclass as the dataclass."""
    async with _host() as host:
        values = await lash.all(
            host, lash.call(find, None), lash.call(find, Booking(row=2, seats=["a"])), key="s:group:opt:0"
        )
        assert values == (None, Booked(ticket="r2", seats=1))
        assert received == [None, Booking(row=2, seats=["a"])]


async def test_an_answer_its_serde_writes_as_no_json_rejects_the_child_not_json_as_on_restate() -> None:
    """A twin whose output serde writes what is not JSON (the SDK's default serde writes a NaN as
    ``NaN``) rejects its child as Restate's child reads such an answer, ``not_json``, once, where
    the reference host retried it and settled ``retries_exhausted``."""
    async with _host() as host:
        [nan, half] = await lash.all_settled(
            host, [lash.call(ratio, [1, 0]), lash.call(ratio, [1, 2])], key="s:group:nan:0"
        )
        assert nan == lash.Err(message="Shop/ratio answered 3 bytes that are not JSON", code="not_json")
        assert half == lash.Ok(value=0.5)
