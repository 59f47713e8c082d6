"""The soak: minutes of mixed load with a fault every minute or so, then a drain (``make soak``).

    python -m tests.engine.soak --minutes 30            # one server and one endpoint
    python -m tests.engine.soak --minutes 30 --nodes 3  # the three-node cluster behind its own network

Workers run drawn groups back to back (`tests/engine/faults.py` `scenario`: every combinator, tool and
call children, both dispositions, a held loser, now and then a wide group of `WIDE` tools, and now
and then a group left parked for a while before it is resumed), each checked as the fault matrix checks
it. Meanwhile a fault lands every 45-75 s (``--fault-every``): a SIGKILL of the server (or of a node)
and its restart, a pause of the endpoint or of the server (or of a node), and on the cluster a
partition of a node. The endpoint is paused but never killed, so its memory over the whole run is one
process's.

Every `SAMPLE_S` it samples the endpoint's RSS, the server's data directory size, how many lash
state rows the server holds and how many invocations it keeps (completed ones stay for Restate's
retention period, with their journals). At the end, the workers finish their groups, and what is
left is listed: lash state rows, unfinished invocations and open groups, which must all be none. The
last line printed is the report as JSON; ``--report`` appends it to a file too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from statistics import mean
from typing import Any

from lash_restate.inspection import list_open_groups
from tests.engine.faults import FaultStack, pause_stack, proxied_cluster, run_scenario, scenario

WIDE = 300  # past one pump slice (256): a wide group settles through two pumps
SAMPLE_S = 15.0
FAULTS = {
    1: ["server_kill", "server_pause", "endpoint_pause"],
    3: ["node_kill", "node_pause", "node_partition", "endpoint_pause"],
}


def rss_bytes(pid: int | None) -> int | None:
    """The resident set of process ``pid`` (Linux ``/proc``), or None once it is gone."""
    if pid is None:
        return None
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def tree_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                total += path.stat().st_size
    return total


@contextlib.contextmanager
def soak_stack(nodes: int, base: Path) -> Iterator[FaultStack]:
    if nodes == 1:
        with pause_stack(base) as stack:
            yield FaultStack(stack)
    else:
        with proxied_cluster(base) as fs:
            yield fs


LASH_STATE = (
    "SELECT service_name, count(*) AS n FROM state WHERE service_name IN "
    "('LashGroup', 'LashChild', 'LashPump', 'LashSignal') GROUP BY service_name"
)
UNFINISHED = "SELECT target, status FROM sys_invocation WHERE status != 'completed'"
INVOCATIONS = "SELECT count(*) AS n FROM sys_invocation"


async def soak(
    fs: FaultStack,
    *,
    minutes: float,
    workers: int,
    seed: int,
    nodes: int,
    fault_every: float = 60,
    wide_children: int = WIDE,
    quiet_s: float = 30,
) -> dict[str, Any]:
    rng = random.Random(seed)
    began = time.monotonic()
    deadline = began + minutes * 60
    combines = 0
    wide = 0
    parked = 0
    divergences: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []

    async def worker(index: int) -> None:
        nonlocal combines, wide, parked
        draws = random.Random(rng.random())
        while time.monotonic() < deadline:
            sc = scenario(draws, [], nodes, wide=wide_children)
            sc["park_s"] = round(draws.uniform(1, 20), 1) if draws.random() < 0.2 else 0
            try:
                await asyncio.wait_for(run_scenario(fs, sc, alone=False), 900)
            except AssertionError as divergence:
                divergences.append({"scenario": sc, "divergence": str(divergence), "at_s": _since(began)})
                print(f"DIVERGENCE worker {index}: {divergence}", flush=True)
                continue
            except Exception as error:  # a hang or a failure that is no divergence: still a failure
                errors.append({"scenario": sc, "error": repr(error), "at_s": _since(began)})
                print(f"ERROR worker {index}: {error!r}", flush=True)
                traceback.print_exc()
                continue
            combines += 1
            wide += bool(wide_children) and len(sc["children"]) >= wide_children
            parked += bool(sc["park_s"])

    async def faulter() -> None:
        draws = random.Random(rng.random())
        while True:
            await asyncio.sleep(draws.uniform(0.75 * fault_every, 1.25 * fault_every))
            if time.monotonic() > deadline - quiet_s:  # the last faults' effects still meet load
                return
            kind = draws.choice(FAULTS[nodes])
            node = 0 if kind == "endpoint_pause" else draws.randrange(nodes)
            print(f"{_since(began):7.0f}s fault {kind} on node {node}", flush=True)
            async with fs.fault(kind, node):
                pass

    async def sampler() -> None:
        while True:
            rows = await fs.sql(LASH_STATE)
            [retained] = await fs.sql(INVOCATIONS)
            sample = {
                "at_s": _since(began),
                "endpoint_rss": rss_bytes(fs.stack.endpoint.pid),
                "server_bytes": sum(tree_bytes(node.base_dir) for node in fs.nodes),
                "lash_rows": sum(int(r["n"]) for r in rows),
                "invocations": int(retained["n"]),  # Restate keeps completed ones for its retention
                "combines": combines,
            }
            samples.append(sample)
            print(json.dumps(sample), flush=True)
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(SAMPLE_S)

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(faulter())
        tasks.create_task(sampler())
        for index in range(workers):
            tasks.create_task(worker(index))
    drained = _since(began)
    left = await _left_everywhere(fs)
    third = len(samples) // 3 or 1
    rss = [s["endpoint_rss"] for s in samples if s["endpoint_rss"]]
    first, last = mean(rss[:third]), mean(rss[-third:])
    return {
        "nodes": nodes,
        "minutes": minutes,
        "workers": workers,
        "seed": seed,
        "combines": combines,
        "wide": wide,
        "parked_resumes": parked,
        "divergences": len(divergences),
        "errors": len(errors),
        "fault_every_s": fault_every,
        "wide_children": wide_children,
        "faults": [{k: v for k, v in f.items() if k != "at"} for f in fs.faults],
        "endpoint_rss_mib": {"first_third": round(first / 2**20, 1), "last_third": round(last / 2**20, 1)},
        "endpoint_rss_ratio": round(last / first, 3),
        "server_bytes": {"first": samples[0]["server_bytes"], "last": samples[-1]["server_bytes"]},
        "lash_rows": {"peak": max(s["lash_rows"] for s in samples), "last": samples[-1]["lash_rows"]},
        "invocations_retained": samples[-1]["invocations"],
        "drained_at_s": drained,
        "left": left,
        "divergence_details": divergences,
        "error_details": errors,
    }


async def _left_everywhere(fs: FaultStack, within: float = 180) -> dict[str, Any]:
    """What is left on the server once the last releases have run: it must be nothing."""
    left: dict[str, Any] = {}
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while True:
                groups = await asyncio.to_thread(list_open_groups, fs.spared().admin_url)
                left = {
                    "lash_rows": await fs.sql(LASH_STATE),
                    "unfinished_invocations": await fs.sql(UNFINISHED),
                    "open_groups": [g.group_key for g in groups],
                }
                if not any(left.values()):
                    break
                await asyncio.sleep(1)
    return left


def _since(began: float) -> float:
    return round(time.monotonic() - began, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.engine.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--nodes", type=int, choices=[1, 3], default=1)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--fault-every", type=float, default=60, help="seconds between faults, on average")
    parser.add_argument("--wide", type=int, default=WIDE, help="children of a wide group (0: none)")
    parser.add_argument("--report", type=Path, help="append the report (one JSON line) to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lash-soak-") as base, soak_stack(args.nodes, Path(base)) as fs:
        report = asyncio.run(
            soak(
                fs,
                minutes=args.minutes,
                workers=args.workers,
                seed=args.seed,
                nodes=args.nodes,
                fault_every=args.fault_every,
                wide_children=args.wide,
            )
        )
    line = json.dumps(report)
    if args.report is not None:
        with args.report.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
    print(line, flush=True)
    clean = not report["divergences"] and not report["errors"] and not any(report["left"].values())
    return 0 if clean and report["endpoint_rss_ratio"] <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
