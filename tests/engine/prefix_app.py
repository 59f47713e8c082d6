"""An application whose lash services carry a prefix of its own: ``--prefix P`` binds ``P{Group,…}``
and a caller ``{P}Fanout`` that runs an `all` over two tools."""

from __future__ import annotations

import argparse
import asyncio

import restate

import lash_restate as lash

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--prefix", required=True)
args = parser.parse_args()

fanout = restate.Service(f"{args.prefix}Fanout")


@fanout.handler()
async def run(ctx: restate.Context, value: str) -> list[str]:
    return await lash.all(ctx, [lash.tool("tag", value), lash.tool("tag", value * 2)])


@fanout.handler()
async def hold(ctx: restate.Context, value: str) -> str:
    """Open a group and return with it open (its child waits for an event nobody emits)."""
    group = await lash.open(ctx, [lash.event(f"{args.prefix}-{value}")])
    return group.key


tools = lash.ToolRegistry()


@tools.tool("tag")
async def tag(value: str) -> str:
    return f"{args.prefix}:{value}"


app = lash.app(fanout, tools=tools, prefix=args.prefix)
asyncio.run(lash.serve(app, "127.0.0.1", args.port))
