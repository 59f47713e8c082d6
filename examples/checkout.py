"""The README's example: a payment raced against a deadline, losers cancelled.

Serve it with ``python -m examples.checkout --port 9080`` and register it like any endpoint.
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


@tools.tool("charge")
async def charge(args: Any) -> Any:  # raise lash_restate.ToolFailure(...) to reject the child
    return {"charged": args["amount"]}


checkout = restate.Service("Checkout")


@checkout.handler()
async def pay(ctx: restate.Context, order: dict[str, Any]) -> dict[str, Any]:
    key = f"order-{order['id']}:group:pay:0"  # {scope}:group:{batch}:{occurrence}
    arms = [
        RuntimeEffectEnvelope(command=ToolCall(tool="charge", args=order), replay_key=f"{key}/charge"),
        RuntimeEffectEnvelope(command=Sleep(duration_ms=30_000), replay_key=f"{key}/deadline"),
    ]
    result = await race(RestateController(ctx, tools), key, arms, losers=LoserPolicy.CANCEL)
    return {"result": result}


app = build_app(tools, extra_services=[checkout])  # refuses to start if anything is missing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9080)
    asyncio.run(serve(app, "127.0.0.1", parser.parse_args().port))


if __name__ == "__main__":
    main()
