"""An application whose handlers leave lash's errors uncaught, for what a client then sees.

`Carriers/quote` answers ``{"price": P}`` after ``delay_ms``, or ends in
``restate.TerminalError(message, status)`` when asked to refuse. `Shop/<entry>` calls lash and catches
nothing; ``entry`` names which combinator (``all``, ``race``, ``any``) over which children, or which
refusal of the contract (``unroutable``: a tool nobody registered; ``not_open``: a resume of a
group this invocation closed; ``not_open_below``: the same through the controller, below the front
door).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import restate

import lash_restate as lash
from lash_restate.combinators import Combinator, SuspendedResult, combine
from lash_restate.contract import RuntimeEffectEnvelope, ToolCall, error_from_wire
from lash_restate.testing import demo_tools

carriers = restate.Service("Carriers")
shop = restate.Service("Shop")
forger = restate.Service("Forger")


@carriers.handler()
async def quote(ctx: restate.Context, req: dict[str, Any]) -> dict[str, Any]:
    if req.get("delay_ms"):
        await ctx.sleep(timedelta(milliseconds=int(req["delay_ms"])))
    if "refuse" in req:
        status = int(req["status"]) if req.get("status") else 500  # TerminalError's own default
        raise restate.TerminalError(req["refuse"], status, metadata=req.get("metadata"))
    return {"price": req.get("price", 1)}


@carriers.handler(output_serde=restate.serde.BytesSerde())
async def raw(ctx: restate.Context) -> bytes:
    """Answers bytes that are not JSON (a handler of its own serde)."""
    return b"\x00 not json"


def _quote(**req: Any) -> lash.Call:
    return lash.call("Carriers", "quote", req)


@shop.handler(name="all")
async def all_(ctx: restate.Context, children: list[dict[str, Any]]) -> Any:
    return await lash.all(ctx, [_quote(**c) for c in children])


@shop.handler(name="race")
async def race_(ctx: restate.Context, children: list[dict[str, Any]]) -> Any:
    return await lash.race(ctx, [_quote(**c) for c in children], losers=lash.CANCEL)


@shop.handler(name="any")
async def any_(ctx: restate.Context, children: list[dict[str, Any]]) -> Any:
    return await lash.any(ctx, [_quote(**c) for c in children])


@shop.handler()
async def native(ctx: restate.Context, req: dict[str, Any]) -> Any:
    """The same quote awaited natively, its error uncaught: what a client gets from Restate itself."""
    return await ctx.service_call(quote, arg=req)


def _seen(error: restate.TerminalError | lash.Rejected | lash.ChildRejected) -> dict[str, Any]:
    status = error.status_code
    message = error.message if isinstance(error, restate.TerminalError) else error.child_message
    return {"status": status, "message": message, "metadata": error.metadata}


@shop.handler()
async def caught(ctx: restate.Context, req: dict[str, Any]) -> Any:
    """The same refusal caught three ways: awaited natively, by `all` and by `any` (each child's)."""
    try:
        await ctx.service_call(quote, arg=req)
    except restate.TerminalError as error:
        native = _seen(error)
    try:
        await lash.all(ctx, [_quote(**req)])
    except lash.Rejected as rejected:
        in_all = _seen(rejected)
    try:
        await lash.any(ctx, [_quote(**req)])
    except lash.AggregateRejection as aggregate:
        in_any = [_seen(child) for child in aggregate.exceptions]
    return {"native": native, "all": in_all, "any": in_any}


@shop.handler()
async def tools(ctx: restate.Context, children: list[dict[str, Any]]) -> Any:
    """`all` over the demo tools' ``fail``/``echo`` (a tool's rejection has no status of its own)."""
    return await lash.all(ctx, [lash.tool(c.pop("tool"), c) for c in children])


@shop.handler()
async def unroutable(ctx: restate.Context) -> Any:
    return await lash.all(ctx, [_quote(price=1), lash.tool("no_such_tool")])


@shop.handler()
async def not_open(ctx: restate.Context) -> Any:
    children = [_quote(price=1)]
    group = await lash.open(ctx, children)
    saved = group.save()
    await group.close()
    return await lash.open(ctx, children, resume=saved)  # closed: refused, never started over


@shop.handler()
async def not_open_below(ctx: restate.Context) -> Any:
    """The controller's own method, no front-door function around it."""
    group = await lash.open(ctx, [_quote(price=1)])
    handle = lash.GroupHandle.from_bytes(group.save())
    await group.close()
    return await lash.controller(ctx).await_next_settlement(handle)


@shop.handler()
async def await_event(ctx: restate.Context, name: str) -> Any:
    """Every value the event ``name`` settles a child with (a rejection left uncaught)."""
    return await lash.all(ctx, [lash.event(name)])


@shop.handler()
async def signal(ctx: restate.Context, request: dict[str, Any]) -> None:
    """An event's signal sent from a handler's own code: ``emit``, ``reject``, ``clear``, or an
    ``emit`` of what lash cannot record (``nan``)."""
    name, do = request["name"], request["do"]
    if do == "emit":
        lash.emit(ctx, name, request.get("payload"))
    elif do == "reject":
        lash.reject_event(ctx, name, request["message"])
    elif do == "clear":
        lash.clear_event(ctx, name)
    else:
        lash.emit(ctx, name, float("nan"))


approval = restate.Workflow("Approval")


@approval.main()
async def run(ctx: restate.WorkflowContext) -> Any:
    """A `next(cancel=...)` given a workflow's durable promise itself, where its ``.value()`` is the
    durable future (what a user reaches for first: ``await ctx.promise(...)`` works natively)."""
    async with lash.open(ctx, [lash.sleep(timedelta(hours=1))], losers=lash.CANCEL) as group:
        return (await group.next(cancel=ctx.promise("approval", type_hint=str))).position


tally = restate.VirtualObject("Tally")


@tally.handler()
async def add(ctx: restate.ObjectContext, amount: int) -> int:
    total = (await ctx.get("total", type_hint=int) or 0) + amount
    ctx.set("total", total)
    return total


@shop.handler()
async def not_json(ctx: restate.Context) -> Any:
    """A call whose argument is no JSON value (a set): refused where lash builds the child."""
    return await lash.all(ctx, [lash.call("Carriers", "quote", {"w": {1, 2}})])


@shop.handler()
async def unkeyed(ctx: restate.Context) -> Any:
    """A call to a virtual object's handler without ``key=``."""
    return await lash.all(ctx, [lash.call(add, 3)])  # type: ignore[arg-type]  # as an untyped app may


@shop.handler()
async def bad_sleep(ctx: restate.Context) -> Any:
    """A sleep of an int, not a timedelta."""
    seconds: Any = 5  # what a caller who forgot the timedelta passes
    children: list[Any] = [_quote(price=1), lash.sleep(seconds)]
    return await lash.race(ctx, children)


@shop.handler()
async def raw_answer(ctx: restate.Context) -> Any:
    """`all` over a call to a handler that answers bytes that are not JSON."""
    return await lash.all(ctx, [lash.call("Carriers", "raw")])


@shop.handler()
async def select_key(ctx: restate.Context) -> Any:
    """A `lash.select` branch named ``key``, lash's own keyword (untyped, as an app without mypy may)."""
    branches: dict[str, Any] = {"key": _quote(price=1), "other": _quote(price=2)}
    return await lash.select(ctx, **branches)


@shop.handler()
async def bad_cancel(ctx: restate.Context) -> Any:
    """A `next(cancel=...)` given something that is no awaitable, once its rank has settled."""
    async with lash.open(ctx, [lash.sleep(timedelta(0))]) as group:
        await ctx.sleep(timedelta(milliseconds=200))  # the rank settles meanwhile
        cancel: Any = 5
        return (await group.next(cancel=cancel)).position


@shop.handler()
async def caught_cancel(ctx: restate.Context) -> Any:
    """A `next(cancel=...)` refused and caught, then both ranks read, the second after a suspension:
    the replay must refuse it again, or it reads rank 1 in the first read's place."""
    children = [lash.tool("echo", {"value": "a"}), lash.sleep(timedelta(milliseconds=600))]
    async with lash.open(ctx, children) as group:
        await ctx.sleep(timedelta(milliseconds=200))  # the echo settles meanwhile: an ask serves it
        refused: Any = 5
        with contextlib.suppress(lash.InvalidInput):
            await group.next(cancel=refused)
        first = await group.next()
        await ctx.sleep(timedelta(milliseconds=50))  # suspended here, so replayed past the refusal
        second = await group.next()
        return [first.position, second.position]


@shop.handler()
async def failing_cancels(ctx: restate.Context) -> Any:
    """Three `next(cancel=...)` whose cancel, a call, fails first (its own terminal error), each
    caught; the group is saved and left open. Answers its key, whose waiters a test counts."""
    group = await lash.open(ctx, [lash.event(f"never-{ctx.request().id}")])
    for _ in range(3):
        with contextlib.suppress(restate.TerminalError):
            await group.next(cancel=ctx.service_call(quote, arg={"refuse": "no", "status": 409}))
    group.save()
    return group.key


@shop.handler()
async def suspended_then_failed(ctx: restate.Context) -> Any:
    """A combinator suspended after one settlement, answering its cursor to be saved (as a workflow
    stores it for a continuation), then the handler fails: the group, saved, is kept."""
    key = f"{ctx.request().id}:group:suspended:0"
    children = [
        RuntimeEffectEnvelope(command=ToolCall(tool="echo", args={"value": "a"}), replay_key=f"{key}/c0"),
        RuntimeEffectEnvelope(command=ToolCall(tool="echo", args={"value": "b"}), replay_key=f"{key}/c1"),
    ]
    suspended = await combine(lash.controller(ctx), Combinator.ALL, key, children, stop_after=1)
    assert isinstance(suspended, SuspendedResult)
    raise restate.TerminalError(f"failed once {suspended.handle.group_key} was saved", 500)


@shop.handler()
async def late_bug(ctx: restate.Context, seconds: float) -> Any:
    """A handler's own bug, a plain exception (which Restate retries for ever), that shows only after
    ``seconds`` of each attempt (a wall clock's wait, outside the journal): a call with a shorter
    timeout ends before its first failure."""
    await asyncio.sleep(seconds)
    raise RuntimeError("a bug of the handler's own, found late")


@shop.handler()
async def retried_block(ctx: restate.Context, marker: str) -> Any:
    """``async with lash.open(...)`` whose block raises a plain exception once (a transient fault,
    told by a file outside the journal): Restate retries the handler, and the retry reads on."""
    children = [lash.tool("echo", {"value": "now"}), lash.sleep(timedelta(milliseconds=100))]
    async with lash.open(ctx, children) as group:
        first = await group.next()
        if _first_time(marker):
            raise RuntimeError("a transient fault")
        second = await group.next()
    return sorted([first.position, second.position])


def _first_time(marker: str) -> bool:
    """Whether ``marker`` did not exist yet (it does now): what no journal records."""
    if Path(marker).exists():
        return False
    Path(marker).touch()
    return True


@shop.handler()
async def also_broken(ctx: restate.Context) -> Any:
    """Another handler's bug, retried for ever beside ``late_bug``'s."""
    raise RuntimeError("another bug")


@forger.handler()
async def open_group(ctx: restate.Context, req: dict[str, Any]) -> dict[str, Any]:
    """Sends ``req["open"]`` to `LashGroup/{req["handler"]}` (`open` or `open_parts`) of ``req["key"]``,
    answered on an awakeable of its own: the group's refusal as its status and the typed error's
    line, or ``{}`` if opened."""
    name, answer = ctx.awakeable(type_hint=dict[str, Any])
    body = json.dumps({**req["open"], "reply_to": name}).encode()
    ctx.generic_send("LashGroup", req["handler"], body, key=req["key"])
    try:
        await answer
    except restate.TerminalError as refused:
        return {"status": refused.status_code, "error": str(error_from_wire(refused.message))}
    return {}


app = lash.app(shop, carriers, tally, forger, approval, tools=demo_tools())

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(lash.serve(app, "127.0.0.1", parser.parse_args().port))
