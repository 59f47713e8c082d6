"""A user's application: lash-restate installed from its wheel, beside the user's own pins.

Races a tool against a timer inside the user's own handler, the way the README shows.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import restate

from lash_restate import LoserPolicy, RuntimeEffectEnvelope, Sleep, ToolCall
from lash_restate.combinators import race
from lash_restate.engine import RestateController, build_app, serve
from lash_restate.tools import ToolRegistry

tools = ToolRegistry()


@tools.tool("greet")
async def greet(args: Any) -> Any:
    return f"hello {args}"


user = restate.Service("UserApp")


@user.handler()
async def hello(ctx: restate.Context, name: str) -> Any:
    key = f"{name}:group:hello:0"
    arms = [
        RuntimeEffectEnvelope(command=ToolCall(tool="greet", args=name), replay_key=f"{key}/greet"),
        RuntimeEffectEnvelope(command=Sleep(duration_ms=60_000), replay_key=f"{key}/later"),
    ]
    return await race(RestateController(ctx, tools), key, arms, losers=LoserPolicy.CANCEL)


app = build_app(tools, extra_services=[user])

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(serve(app, "127.0.0.1", parser.parse_args().port))
