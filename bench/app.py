"""The benchmark endpoint: lash's services plus `Bench`, whose handlers run the same work both ways.

Tool scenarios: every child does the same work on both paths, one `ctx.run` of the `echo` tool in
its own invocation. The native path calls `BenchChild/instant` (or `slow`) and combines the calls
with `restate.select` / `restate.gather`; the group path runs `race` / `all_` over `ToolCall`
children.

Call scenarios (issue 22): what a Restate user runs, children that are calls to their own handlers.
Both paths call the same thin handlers, `Thin/instant` (returns its argument) and `Thin/slow` (sleeps
2 s, then returns it): natively with `ctx.service_call` and `restate.select` / `restate.gather`, and
through the front door with `lash.race` / `lash.all` over `lash.call` children.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from datetime import timedelta
from typing import Any

import restate
from restate.serde import BytesSerde

import lash_restate as lash
from lash_restate import RuntimeEffectEnvelope, ToolCall
from lash_restate.combinators import all_, race
from lash_restate.engine import BATCH_FROM, RestateController, build_app, serve
from lash_restate.testing.tools import demo_tools

TOOLS = demo_tools()
_BYTES = BytesSerde()

child = restate.Service("BenchChild")
thin = restate.Service("Thin")
bench = restate.Service("Bench")


@child.handler()
async def instant(ctx: restate.Context, value: int) -> int:
    async def work() -> bytes:
        return str(value).encode()

    return int(await ctx.run_typed("echo", work, restate.RunOptions(serde=_BYTES)))


@child.handler()
async def slow(ctx: restate.Context, value: int) -> int:
    await ctx.sleep(timedelta(seconds=2))
    return value


@thin.handler(name="instant")
async def thin_instant(ctx: restate.Context, value: int) -> int:
    return value


@thin.handler(name="slow")
async def thin_slow(ctx: restate.Context, value: int) -> int:
    await ctx.sleep(timedelta(seconds=2))
    return value


@bench.handler()
async def noop(ctx: restate.Context, arg: dict[str, Any]) -> int:
    return 0


@bench.handler()
async def native_race(ctx: restate.Context, arg: dict[str, Any]) -> Any:
    winner = ctx.service_call(instant, arg=1)
    loser = ctx.service_call(slow, arg=2)
    _, value = await restate.select(winner=winner, loser=loser)
    return value


@bench.handler()
async def group_race(ctx: restate.Context, arg: dict[str, Any]) -> Any:
    key = f"bench-{ctx.request().id}:group:race:0"
    arms = [
        RuntimeEffectEnvelope(command=ToolCall(tool="echo", args={"value": 1}), replay_key=f"{key}/w"),
        RuntimeEffectEnvelope(
            command=ToolCall(tool="echo", args={"value": 2, "delay_ms": 2000}), replay_key=f"{key}/l"
        ),
    ]
    return await race(RestateController(ctx), key, arms)


@bench.handler()
async def native_all(ctx: restate.Context, arg: dict[str, Any]) -> int:
    calls = [ctx.service_call(instant, arg=i) for i in range(int(arg["n"]))]
    await restate.gather(*calls)
    return sum([await c for c in calls])


@bench.handler()
async def group_all(ctx: restate.Context, arg: dict[str, Any]) -> int:
    key = f"bench-{ctx.request().id}:group:all:0"
    children = [
        RuntimeEffectEnvelope(command=ToolCall(tool="echo", args={"value": i}), replay_key=f"{key}/{i}")
        for i in range(int(arg["n"]))
    ]
    return sum(await all_(RestateController(ctx), key, children))


@bench.handler()
async def native_call_race(ctx: restate.Context, arg: dict[str, Any]) -> Any:
    winner = ctx.service_call(thin_instant, arg=1)
    loser = ctx.service_call(thin_slow, arg=2)
    _, value = await restate.select(winner=winner, loser=loser)
    return value


@bench.handler()
async def group_call_race(ctx: restate.Context, arg: dict[str, Any]) -> Any:
    return await lash.race(ctx, [lash.call("Thin", "instant", 1), lash.call("Thin", "slow", 2)])


@bench.handler()
async def native_call_all(ctx: restate.Context, arg: dict[str, Any]) -> int:
    calls = [ctx.service_call(thin_instant, arg=i) for i in range(int(arg["n"]))]
    await restate.gather(*calls)
    return sum([await c for c in calls])


@bench.handler()
async def group_call_all(ctx: restate.Context, arg: dict[str, Any]) -> int:
    return sum(await lash.all(ctx, [lash.call("Thin", "instant", i) for i in range(int(arg["n"]))]))


@bench.handler()
async def native_bounded_all(ctx: restate.Context, arg: dict[str, Any]) -> int:
    """What a Restate user writes for a bounded fan-out: at most ``k`` calls at once, the next as one ends."""
    n, k = int(arg["n"]), int(arg["k"])
    pending: list[Any] = []
    started = total = 0
    while started < n or pending:
        while started < n and len(pending) < k:
            pending.append(ctx.service_call(thin_instant, arg=started))
            started += 1
        done, pending = await restate.wait_completed(*pending)
        for call in done:
            total += await call
    return total


@bench.handler()
async def group_bounded_all(ctx: restate.Context, arg: dict[str, Any]) -> int:
    children = [lash.call("Thin", "instant", i) for i in range(int(arg["n"]))]
    return sum(await lash.all(ctx, children, max_in_flight=int(arg["k"])))


@bench.handler()
async def native_call_iterate(ctx: restate.Context, arg: dict[str, Any]) -> int:
    """Each call's answer taken as it comes, one at a time: `restate.as_completed`."""
    calls = [ctx.service_call(thin_instant, arg=i) for i in range(int(arg["n"]))]
    return sum([await done async for done in restate.as_completed(*calls)])


@bench.handler()
async def group_call_iterate(ctx: restate.Context, arg: dict[str, Any]) -> int:
    """The same through a group read one settlement at a time, ``async for``."""
    total = 0
    async with lash.open(ctx, [lash.call("Thin", "instant", i) for i in range(int(arg["n"]))]) as group:
        async for settlement in group:
            assert isinstance(settlement.outcome, lash.Ok)
            total += settlement.outcome.value
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # LASH_BATCH_FROM moves the batching threshold, to compare both settlement paths at one width.
    batch_from = int(os.environ.get("LASH_BATCH_FROM", BATCH_FROM))
    app = build_app(TOOLS, extra_services=[bench, child, thin], batch_from=batch_from)
    # LASH_SERVER picks the HTTP server, as it does for `lash-restate serve`: the bench runs both.
    asyncio.run(serve(app, "127.0.0.1", args.port, server=os.environ.get("LASH_SERVER", "hypercorn")))


if __name__ == "__main__":
    main()
