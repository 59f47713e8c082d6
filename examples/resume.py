"""A review that outlives the invocation that started it.

``Review/start`` asks three reviewers at once, takes the first answer, saves the group's cursor
and returns. ``Review/resume``, a fresh invocation given that saved cursor, reopens the same group
and reads the answers that came after, in the same rank order every time.

Serve it with ``python -m examples.resume --port 9080`` and register the endpoint with Restate.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

import restate

import lash_restate as lash

reviewer = restate.VirtualObject("Reviewer")


@reviewer.handler()
async def review(ctx: restate.ObjectContext, request: dict[str, Any]) -> str:
    await ctx.sleep(timedelta(milliseconds=request["after_ms"]))
    return f"{ctx.key()} approves {request['doc']}"


def asks(doc: str) -> list[lash.Child]:
    """The same children in both handlers: a reopen is fenced on them."""
    delays = {"ana": 0, "bo": 300, "cy": 600}
    return [
        lash.call("Reviewer", "review", {"doc": doc, "after_ms": ms}, key=who) for who, ms in delays.items()
    ]


def answer(settlement: lash.Settlement) -> Any:
    """A reviewer's answer, or what became of the review (a terminal error, a cancel)."""
    outcome = settlement.outcome
    return outcome.value if isinstance(outcome, lash.Ok) else {"failed": repr(outcome)}


review_service = restate.Service("Review")


@review_service.handler()
async def start(ctx: restate.Context, doc: str) -> dict[str, Any]:
    group = await lash.open(ctx, asks(doc))
    first = await group.next()
    # Ends with the group open: the other reviewers run on, and their answers take ranks meanwhile.
    return {"first": answer(first), "rank": first.rank, "saved": group.save()}


@review_service.handler()
async def resume(ctx: restate.Context, request: dict[str, Any]) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    # The block closes the group when it ends, unless it was saved for a later invocation.
    async with lash.open(ctx, asks(request["doc"]), resume=request["saved"]) as group:
        async for settlement in group:
            answers.append({"rank": settlement.rank, "answer": answer(settlement)})
        if not request.get("close", True):
            group.save()
    return answers


app = lash.app(review_service, reviewer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9080)
    asyncio.run(lash.serve(app, "127.0.0.1", parser.parse_args().port))


if __name__ == "__main__":
    main()
