"""`python -m bench [--quick] [--json]`: group path vs native Restate, in one run on one server.

Starts its own restate-server and the bench endpoint (bench/app.py), measures round trips through
the ingress, prints a table (median, p95, ratio to native), writes docs/bench-all.png, and with
--json prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from lash_restate.testing import LocalStack

ROOT = Path(__file__).resolve().parents[1]


# N -> (runs in a --quick run, runs in a full run); 0 skips. Issue #14: the full run reaches 10,000.
SIZES = {1: (15, 50), 10: (10, 30), 100: (4, 10), 1000: (1, 3), 4000: (0, 1), 10000: (0, 1)}
WIDE_FROM = 4000  # from this N a size runs once, without a warm-up


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


class Bench:
    def __init__(self, client: httpx.AsyncClient, ingress: str) -> None:
        self.client = client
        self.ingress = ingress

    async def call(self, handler: str, body: dict[str, Any]) -> float:
        start = time.perf_counter()
        response = await self.client.post(f"{self.ingress}/Bench/{handler}", json=body)
        elapsed = time.perf_counter() - start
        if response.status_code != 200:
            raise RuntimeError(f"{handler} failed: {response.status_code} {response.text[:300]}")
        return elapsed

    async def pair(
        self, native: str, group: str, body: dict[str, Any], runs: int, *, warm: bool = True
    ) -> dict[str, list[float]]:
        """Interleave the two paths so drift hits both alike; one warm-up each first unless not ``warm``."""
        if warm:
            await self.call(native, body)
            await self.call(group, body)
        out: dict[str, list[float]] = {"native": [], "group": []}
        for _ in range(runs):
            out["native"].append(await self.call(native, body))
            out["group"].append(await self.call(group, body))
        return out

    async def throughput(self, handler: str, concurrent: int, rounds: int) -> float:
        best = 0.0
        for _ in range(rounds):
            start = time.perf_counter()
            await asyncio.gather(*(self.call(handler, {}) for _ in range(concurrent)))
            best = max(best, concurrent / (time.perf_counter() - start))
        return best


async def measure(quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    stack = LocalStack.single(
        server_env={"RESTATE_DEFAULT_NUM_PARTITIONS": "4", "RESTATE_LOG_FILTER": "warn"},
        module="bench.app",
        endpoint_args=(),
    )
    results: dict[str, Any] = {"quick": quick}
    with stack.start():
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            b = Bench(client, stack.ingress_url)
            progress("floor: no-op invocation")
            floor = [await b.call("noop", {}) for _ in range(30 if quick else 200)]
            results["floor"] = {"median": statistics.median(floor), "p95": _p95(floor)}
            progress("race, 2 arms")
            results["race"] = await b.pair("native_race", "group_race", {}, 20 if quick else 100)
            results["all"] = {}
            for n, (q, full) in SIZES.items():
                runs = q if quick else full
                if not runs:
                    continue
                progress(f"all, N={n}")
                # The wide sizes run once, unwarmed: a warm-up would double minutes of native gather.
                pair = b.pair("native_all", "group_all", {"n": n}, runs, warm=n < WIDE_FROM)
                results["all"][n] = await pair
            progress("50 concurrent races")
            rounds = 1 if quick else 3
            await b.throughput("group_race", 10, 1)
            results["throughput"] = {
                "native": await b.throughput("native_race", 50, rounds),
                "group": await b.throughput("group_race", 50, rounds),
            }
    return results


def summarise(results: dict[str, Any]) -> tuple[list[list[str]], dict[str, float]]:
    rows = [["scenario", "native median", "native p95", "group median", "group p95", "ratio"]]
    floor = results["floor"]
    rows.append(
        [
            "no-op invocation (floor)",
            f"{floor['median'] * 1e3:.1f} ms",
            f"{floor['p95'] * 1e3:.1f} ms",
            "",
            "",
            "",
        ]
    )
    ratios: dict[str, float] = {}

    def add(name: str, pair: dict[str, list[float]], key: str) -> None:
        native, group = statistics.median(pair["native"]), statistics.median(pair["group"])
        ratios[key] = group / native
        rows.append(
            [
                name,
                f"{native * 1e3:.1f} ms",
                f"{_p95(pair['native']) * 1e3:.1f} ms",
                f"{group * 1e3:.1f} ms",
                f"{_p95(pair['group']) * 1e3:.1f} ms",
                f"{ratios[key]:.2f}x",
            ]
        )

    add("race, 2 arms", results["race"], "race_ratio")
    for n, pair in results["all"].items():
        add(f"all, N={n}", pair, f"all_{n}_ratio")
        for path_name in ("native", "group"):
            ratios[f"all_{n}_{path_name}_ms_per_child"] = statistics.median(pair[path_name]) * 1e3 / n
    wide = [n for n in results["all"] if n >= 1000]
    if len(wide) > 1:
        # Linear means flat: the group path's ms per child at the widest N over N=1000's, same run.
        ratios["group_ms_per_child_widest_over_1000"] = (
            ratios[f"all_{max(wide)}_group_ms_per_child"] / ratios["all_1000_group_ms_per_child"]
        )
    tp = results["throughput"]
    ratios["concurrent_race_throughput_ratio"] = tp["group"] / tp["native"]
    rows.append(
        [
            "50 concurrent races (races/s)",
            f"{tp['native']:.0f}/s",
            "",
            f"{tp['group']:.0f}/s",
            "",
            f"{ratios['concurrent_race_throughput_ratio']:.2f}x",
        ]
    )
    ratios["floor_ms"] = floor["median"] * 1e3
    return rows, ratios


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results["all"])
    fig, ax = plt.subplots(figsize=(6, 4))
    for path_name, label in (("native", "native restate.gather"), ("group", "durable group (all)")):
        per_child = [statistics.median(results["all"][n][path_name]) * 1e3 / n for n in sizes]
        ax.plot(sizes, per_child, "o-", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("children (N)")
    ax.set_ylabel("median round trip per child (ms)")
    ax.set_title("all over N immediate children, one server, same run")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="a reduced run, under two minutes (N up to 1000)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "bench-all.png")
    args = parser.parse_args(argv)

    def progress(text: str) -> None:
        print(f"bench: {text} …", file=sys.stderr, flush=True)

    results = asyncio.run(measure(args.quick, progress))
    rows, ratios = summarise(results)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    try:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    except ImportError:  # the plotting extra is optional; the numbers never depend on it
        print("plot: skipped (install the bench extra: pip install -e '.[bench]')", file=sys.stderr)
    if args.json:
        print(json.dumps({k: round(v, 3) for k, v in ratios.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
