"""`python -m bench.timeline [SCENARIO] [--runs K]`: where one run of a scenario spends its time.

Starts its own restate-server and the bench endpoint, runs the scenario's group handler (and its
native one) K times one after another, then reads Restate's own `sys_invocation`: every invocation a
run caused (followed down `invoked_by_id` from the caller), with the milliseconds from the caller's
creation at which it was created, began to run and completed. Prints, per invocation of the tree
(named by its target and its place under its parent), the median of those offsets over the runs.

What the numbers are: the server's own timestamps (millisecond resolution), so the client's round
trip through the ingress is outside them. With ``--cpu N``: the CPU time (user + system, from
/proc) the restate-server and the endpoint spend per run over N runs of each path in bursts of 50,
which is what bounds throughput on a machine whose cores they share. A measurement script, not
part of the library.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.__main__ import SERVER_ENV, Bench, drain
from lash_restate._http import tls
from lash_restate.engine import SERVERS
from lash_restate.inspection import sql
from lash_restate.testing import LocalStack

SCENARIOS = {
    "call_race": ("native_call_race", "group_call_race", {}),
    "race": ("native_race", "group_race", {}),
    "call_all_10": ("native_call_all", "group_call_all", {"n": 10}),
    "call_iterate_100": ("native_call_iterate", "group_call_iterate", {"n": 100}),
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


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cpu(
    b: Bench, admin: str, handler: str, body: dict[str, Any], runs: int, pids: dict[str, int]
) -> dict[str, float]:
    """CPU ms per run of ``handler`` by process (``pids``: name -> pid), ``runs`` runs in bursts of 50."""
    before = {name: _cpu_s(pid) for name, pid in pids.items()}
    for first in range(0, runs, 50):
        await asyncio.gather(*(b.call(handler, body) for _ in range(min(50, runs - first))))
    await drain(admin)
    return {name: (_cpu_s(pid) - before[name]) * 1e3 / runs for name, pid in pids.items()}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", nargs="?", default="call_race", choices=sorted(SCENARIOS))
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--server", default=SERVERS[0], choices=SERVERS)
    parser.add_argument("--cpu", type=int, default=0, help="also CPU per run over this many runs a path")
    args = parser.parse_args()
    native, group, body = SCENARIOS[args.scenario]
    stack = LocalStack()
    stack.add_server(env=SERVER_ENV)
    stack.add_endpoint("bench", module="bench.app", args=(), server=args.server)
    with stack.start():
        async with httpx.AsyncClient(verify=tls(), timeout=600) as client:
            b = Bench(client, stack.ingress_url)
            await b.pair(native, group, body, 3)  # warm both paths
            await drain(stack.admin_url)
            samples = await b.pair(native, group, body, args.runs, warm=False)
            await drain(stack.admin_url)
            rows = await asyncio.to_thread(sql, stack.admin_url, _ROWS)
            spent: dict[str, list[dict[str, float]]] = {}
            if args.cpu:
                pids = {"server": stack.server.pid, "endpoint": stack.endpoint.pid}
                for handler in (native, group, native, group):  # twice each, alternating
                    alive = {name: pid for name, pid in pids.items() if pid is not None}
                    got = await cpu(b, stack.admin_url, handler, body, args.cpu, alive)
                    spent.setdefault(handler, []).append(got)
    for handler, path in ((native, "native"), (group, "group")):
        ms = statistics.median(samples[path]) * 1e3
        print(f"\n{path}: client round trip median {ms:.1f} ms")
        print("\n".join(table(trees(rows, f"Bench/{handler}")[-args.runs :])))
    for handler, rounds in spent.items():
        each = " / ".join(", ".join(f"{k} {v:.2f} ms" for k, v in r.items()) for r in rounds)
        print(f"CPU per run of {handler}: {each}")


if __name__ == "__main__":
    asyncio.run(main())
