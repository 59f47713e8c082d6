"""A checkout that races a payment call against a deadline; the loser is cancelled.

Serve it with ``python -m examples.checkout --port 9080`` and register the endpoint with Restate.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

import restate

import lash_restate as lash

payments = restate.Service("Payments")


@payments.handler()
async def charge(ctx: restate.Context, order: dict[str, Any]) -> dict[str, Any]:
    if order.get("slow"):
        await ctx.sleep(timedelta(hours=1))  # a provider that does not answer in time
    return {"charged": order["amount"]}


checkout = restate.Service("Checkout")


@checkout.handler()
async def pay(ctx: restate.Context, order: dict[str, Any]) -> dict[str, Any]:
    deadline = lash.sleep(timedelta(seconds=order.get("deadline_s", 30)))
    payment = lash.call("Payments", "charge", order)
    # Durable: a crash here resumes the same race; the loser (payment or deadline) is cancelled.
    result = await lash.race(ctx, [payment, deadline], losers=lash.CANCEL)
    if result is None:  # the deadline won: it fulfils with None
        return {"status": "timed out"}
    return {"status": "paid", **result}


app = lash.app(checkout, payments)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9080)
    asyncio.run(lash.serve(app, "127.0.0.1", parser.parse_args().port))


if __name__ == "__main__":
    main()
