"""A fan-out: reserve one unit of each of 20 items, each item a virtual object, all at once.

Serve it with ``python -m examples.fanout --port 9080`` and register the endpoint with Restate.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import restate

import lash_restate as lash

inventory = restate.VirtualObject("Inventory")


@inventory.handler()
async def reserve(ctx: restate.ObjectContext, quantity: int) -> dict[str, Any]:
    reserved = (await ctx.get("reserved", type_hint=int) or 0) + quantity
    ctx.set("reserved", reserved)
    return {"sku": ctx.key(), "reserved": reserved}


orders = restate.Service("Orders")


@orders.handler()
async def place(ctx: restate.Context, skus: list[str]) -> list[dict[str, Any]]:
    # One durable group of calls; the answers come back in input order, whatever order they settled in.
    return await lash.all(ctx, [lash.call("Inventory", "reserve", 1, key=sku) for sku in skus])


app = lash.app(orders, inventory)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9080)
    asyncio.run(lash.serve(app, "127.0.0.1", parser.parse_args().port))


if __name__ == "__main__":
    main()
