"""An application for the front door's tests: one handler opening two identical groups, one whose
only child rejects, and one that parks a group (reads its winner, saves its handle, returns)."""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta

import restate

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
