"""`python -m bench.timeline [SCENARIO] [--runs K]`: where one run of a scenario spends its time.

Starts its own restate-server and the bench endpoint, runs the scenario's group handler (and its
native one) K times one after another, then reads Restate's own `sys_invocation`: every invocation a
run caused (followed down `invoked_by_id` from the caller), with the milliseconds from the caller's
creation at which it was created, began to run and completed. Prints, per invocation of the tree
(named by its target and its place under its parent), the median of those offsets over the runs.

What the numbers are: the server's own timestamps (millisecond resolution), so the client's round
trip through the ingress is outside them. A measurement script, not part of the library.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections import defaultdict
from datetime import datetime
from typing import Any

import httpx

from bench.__main__ import SERVER_ENV, Bench, drain
from lash_restate.engine import SERVERS
from lash_restate.inspection import sql
from lash_restate.testing import LocalStack

SCENARIOS = {
    "call_race": ("native_call_race", "group_call_race", {}),
    "race": ("native_race", "group_race", {}),
    "call_all_10": ("native_call_all", "group_call_all", {"n": 10}),
}
_ROWS = (
    "SELECT id, invoked_by_id AS parent, target_service_name AS s, target_handler_name AS h, "
    "created_at AS c, running_at AS r, completed_at AS d FROM sys_invocation"
)


def _ms(stamp: str | None) -> float | None:
    """A `sys_invocation` timestamp (RFC 3339, milliseconds) as ms since the epoch."""
    return None if stamp is None else datetime.fromisoformat(stamp).timestamp() * 1000


Span = tuple[str, float, float, float]  # an invocation's place in the tree, created, running, completed


def trees(rows: list[dict[str, Any]], caller: str) -> list[list[Span]]:
    """Each run of ``caller``: its invocations as (path, created, running, completed), ms from its start."""
    rows = [{**row, "c": _ms(row["c"]), "r": _ms(row.get("r")), "d": _ms(row.get("d"))} for row in rows]
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("parent"):
            children[row["parent"]].append(row)
    roots = sorted((r for r in rows if f"{r['s']}/{r['h']}" == caller), key=lambda r: r["c"])
    return [_walk(root, caller, root["c"], children) for root in roots]


def _walk(row: dict[str, Any], path: str, t0: float, children: dict[str, list[dict[str, Any]]]) -> list[Span]:
    """``row`` and every invocation below it, depth first, each named by its path from the caller."""
    out = [(path, row["c"] - t0, (row["r"] or row["c"]) - t0, (row["d"] or 0) - t0)]
    seen: dict[str, int] = defaultdict(int)
    for child in sorted(children[row["id"]], key=lambda r: float(r["c"])):
        name = f"{child['s']}/{child['h']}"
        seen[name] += 1
        out += _walk(child, f"{path} > {name}" + (f"#{seen[name]}" if seen[name] > 1 else ""), t0, children)
    return out


def table(runs: list[list[Span]]) -> list[str]:
    by_path: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    order: list[str] = []
    for run in runs:
        for path, *times in run:
            if path not in by_path:
                order.append(path)
            by_path[path].append((times[0], times[1], times[2]))
    lines = [f"{'invocation':70s} {'n':>3s} {'created':>8s} {'running':>8s} {'done':>8s}"]
    for path in sorted(order, key=lambda p: statistics.median(t[0] for t in by_path[p])):
        times = by_path[path]
        med = [statistics.median(t[i] for t in times) for i in range(3)]
        lines.append(f"{path:70s} {len(times):3d} {med[0]:8.1f} {med[1]:8.1f} {med[2]:8.1f}")
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", nargs="?", default="call_race", choices=sorted(SCENARIOS))
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--server", default=SERVERS[0], choices=SERVERS)
    args = parser.parse_args()
    native, group, body = SCENARIOS[args.scenario]
    stack = LocalStack()
    stack.add_server(env=SERVER_ENV)
    stack.add_endpoint("bench", module="bench.app", args=(), server=args.server)
    with stack.start():
        async with httpx.AsyncClient(timeout=600) as client:
            b = Bench(client, stack.ingress_url)
            await b.pair(native, group, body, 3)  # warm both paths
            await drain(stack.admin_url)
            samples = await b.pair(native, group, body, args.runs, warm=False)
            await drain(stack.admin_url)
            rows = await asyncio.to_thread(sql, stack.admin_url, _ROWS)
    for handler, path in ((native, "native"), (group, "group")):
        ms = statistics.median(samples[path]) * 1e3
        print(f"\n{path}: client round trip median {ms:.1f} ms")
        print("\n".join(table(trees(rows, f"Bench/{handler}")[-args.runs :])))


if __name__ == "__main__":
    asyncio.run(main())
