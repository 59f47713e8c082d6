"""A checkout that races a payment call against a deadline; the loser is cancelled.

Serve it with ``lash-restate serve --app checkout:app --port 9080`` beside it (or run this file:
``python checkout.py --port 9080``; in this repository, ``python -m examples.checkout``), and
register the endpoint with Restate.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

import restate
from pydantic import BaseModel

import lash_restate as lash


class Order(BaseModel):
    id: int
    amount: int
    slow: bool = False  # a provider that does not answer in time
    deadline_s: float = 30


class Receipt(BaseModel):
    order_id: int
    charged: int


payments = restate.Service("Payments")


@payments.handler()
async def charge(ctx: restate.Context, order: Order) -> Receipt:
    if order.amount <= 0:
        raise restate.TerminalError(f"cannot charge {order.amount}", status_code=422)
    if order.slow:
        await ctx.sleep(timedelta(hours=1))
    return Receipt(order_id=order.id, charged=order.amount)


checkout = restate.Service("Checkout")


@checkout.handler()
async def pay(ctx: restate.Context, order: Order) -> dict[str, Any]:
    # Durable: a crash here resumes the same race; the loser (payment or deadline) is cancelled.
    try:
        winner = await lash.select(
            ctx,
            paid=lash.call(charge, order),  # typed from `charge`: the Order goes, a Receipt comes back
            timeout=lash.sleep(timedelta(seconds=order.deadline_s)),
            losers=lash.CANCEL,
        )
    except lash.Rejected as declined:  # `charge` raised a TerminalError: its status and message
        return {"status": "declined", "code": declined.status_code, "reason": declined.child_message}
    match winner:
        case ("paid", Receipt() as receipt):
            return {"status": "paid", "charged": receipt.charged}
        case _:
            return {"status": "timed out"}


app = lash.app(checkout, payments)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9080)
    asyncio.run(lash.serve(app, "127.0.0.1", parser.parse_args().port))


if __name__ == "__main__":
    main()
