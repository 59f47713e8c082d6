"""A user's application: lash-restate installed from its wheel, beside the user's own pins.

Races a tool against a timer inside the user's own handler, the way the README shows.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

import restate

import lash_restate as lash

tools = lash.ToolRegistry()


@tools.tool("greet")
async def greet(args: Any) -> Any:
    return f"hello {args}"


user = restate.Service("UserApp")


@user.handler()
async def hello(ctx: restate.Context, name: str) -> Any:
    arms = [lash.tool("greet", name), lash.sleep(timedelta(minutes=1))]
    return await lash.race(ctx, arms, losers=lash.CANCEL)


app = lash.app(user, tools=tools)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(lash.serve(app, "127.0.0.1", parser.parse_args().port))
