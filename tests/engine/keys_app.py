"""An application for the front door's tests: one handler opening two identical groups, one whose
only child rejects, and two that park a group (read its winner, save its handle, return), one of
them answering text that is not JSON."""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta

import restate
from restate.serde import BytesSerde

import lash_restate as lash

keys = restate.Service("Keys")


@keys.handler()
async def twice(ctx: restate.Context, value: str) -> list[str]:
    children = [lash.tool("echo", {"value": value}), lash.sleep(timedelta(hours=1))]
    first = await lash.open(ctx, children, wake=lash.GroupWakePolicy.FIRST, losers=lash.CANCEL)
    won = await first.next()
    await ctx.sleep(timedelta(milliseconds=10))  # a suspension: what follows runs on a replay
    second = await lash.open(ctx, children, wake=lash.GroupWakePolicy.FIRST, losers=lash.CANCEL)
    also = await second.next()
    await first.close()
    await second.close()
    assert won.outcome == also.outcome == lash.Ok(value=value)
    return [first.key, second.key, ctx.request().id]


@keys.handler()
async def reject(ctx: restate.Context, message: str) -> str:
    """A race whose only child rejects, left uncaught: the invocation must end, not retry."""
    return str(await lash.race(ctx, [lash.tool("fail", message)]))


@keys.handler()
async def park(ctx: restate.Context, value: str) -> str:
    """Read the winner of a RunToCompletion race by hand and return its saved handle, the group open."""
    children = [lash.tool("echo", {"value": value}), lash.sleep(timedelta(hours=1))]
    group = await lash.open(ctx, children, wake=lash.GroupWakePolicy.FIRST)
    await group.next()
    return group.save()


@keys.handler(output_serde=BytesSerde())
async def park_text(ctx: restate.Context, value: str) -> bytes:
    """As `park`, for a `Cancel` group (whose group watches its opener), answering text that is not
    JSON: the group's watch reads how the opener ended, never what it answered."""
    children = [lash.tool("echo", {"value": value}), lash.sleep(timedelta(hours=1))]
    group = await lash.open(ctx, children, wake=lash.GroupWakePolicy.FIRST, losers=lash.CANCEL)
    await group.next()
    return f"parked {group.save()}".encode()


tools = lash.ToolRegistry()


@tools.tool("fail")
async def fail(message: str) -> str:
    raise lash.ToolFailure(message, code="declined")


@tools.tool("echo")
async def echo(args: dict[str, str]) -> str:
    return args["value"]


app = lash.app(keys, tools=tools)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(lash.serve(app, "127.0.0.1", parser.parse_args().port))
