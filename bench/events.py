"""`python -m bench.events N[,N…] [--rounds R]`: many children waiting on one event.

One `all` over N event children that all wait on one event, on a fresh local stack per run: the
seconds from the open until every child has subscribed to the event (`LashSignal/{event}/subscribe`
completed N times), then from the emit until the caller has every value. An event's subscribes run
one at a time on its key, so this is where the cost of each shows. Rounds alternate the sizes; for
an A/B, run it on each code in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from lash_restate.inspection import sql
from lash_restate.testing import LocalStack
from lash_restate.testing.conformance import Scope

_SUBSCRIBED = (
    "SELECT count(*) AS n FROM sys_invocation WHERE target_service_name = 'LashSignal' "
    "AND target_handler_name = 'subscribe' AND status = 'completed'"
)


async def one(n: int) -> tuple[float, float]:
    """Seconds to subscribe ``n`` waiters of one event, and from its emit to the caller's answer."""
    with tempfile.TemporaryDirectory() as tmp, LocalStack.single(Path(tmp)).start() as stack:
        scope = Scope()
        gate = scope.event("gate")
        group = scope.group([{"type": "await_event", "name": gate}] * n)
        started = time.monotonic()
        step = {"type": "combine", "kind": "all", "group": group}
        waiting = asyncio.create_task(stack.turn(step, within=3600))
        while (await asyncio.to_thread(sql, stack.server.admin_url, _SUBSCRIBED))[0]["n"] < n:  # noqa: ASYNC110 (Restate tells nothing: polled)
            await asyncio.sleep(0.2)
        subscribed = time.monotonic()
        await stack.emit(gate, "go")
        [answer] = await waiting
        assert len(answer["ok"]["value"]) == n, str(answer)[:300]
        return subscribed - started, time.monotonic() - subscribed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.events", description=__doc__)
    parser.add_argument("sizes", help="comma-separated numbers of waiters, e.g. 3000,10000")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every size, alternating")
    args = parser.parse_args(argv)
    for _ in range(args.rounds):
        for n in [int(size) for size in args.sizes.split(",")]:
            subscribe, answer = asyncio.run(one(n))
            print(
                f"N={n}: every waiter subscribed in {subscribe:.2f} s; emit to answer {answer:.2f} s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
