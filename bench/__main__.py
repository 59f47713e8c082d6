"""`python -m bench [--quick] [--json]`: group path vs native Restate, under each HTTP server, in one run.

Starts its own restate-server and one bench endpoint (bench/app.py) per HTTP server `serve`
offers (hypercorn, and granian where it is installed), both running for the whole run. Scenario
by scenario, each server's endpoint in turn is registered (force) and measured, native and group
interleaved, then the server is drained so the next inherits no background work. Two families of
scenarios: tool children (each child one `ctx.run` in its own invocation, both paths) and call
children (issue 22: both paths call the same thin handlers, natively and through `lash.call`), and
for the call scenarios how many invocations one run costs, counted from `sys_invocation`. Then the
call scenarios once more on a fresh restate-server with protocol v7 enabled (the default HTTP server).

Prints a table per server (median, p95, ratio to native) and the servers side by side, writes
docs/bench-all.png (with the bench extra), and with --json prints one JSON object on its last
line, whatever else failed: the ratios per server, and under ``v7`` those of the v7 server.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from lash_restate._http import tls
from lash_restate.engine import SERVERS
from lash_restate.inspection import sql
from lash_restate.testing import Endpoint, LocalStack
from lash_restate.testing.stack import NO_FSYNC

ROOT = Path(__file__).resolve().parents[1]


# N -> (runs in a --quick run, runs in a full run); 0 skips. Issue #14: the full run reaches 10,000.
SIZES = {1: (15, 50), 10: (10, 30), 100: (4, 10), 1000: (1, 3), 4000: (0, 1), 10000: (0, 1)}
WIDE_FROM = 4000  # from this N a size runs once, without a warm-up
# The call scenarios' `all` sizes (issue 22), the same way.
CALL_SIZES = {1: (15, 50), 10: (10, 30), 30: (10, 30), 100: (4, 10), 1000: (1, 3)}
# The call scenarios whose invocations are counted: (native handler, group handler, body).
COUNTED = {
    "call_race": ("native_call_race", "group_call_race", {}),
    "call_all_30": ("native_call_all", "group_call_all", {"n": 30}),
}
# A server with the newest service protocol (one-way for a cluster: only its own fresh server gets it).
V7_ENV = {"RESTATE_EXPERIMENTAL_ENABLE_PROTOCOL_V7": "true"}
# Its log fsynced, as a deployed server's is (a local stack's is not, for the tests' sake).
SERVER_ENV = {
    "RESTATE_DEFAULT_NUM_PARTITIONS": "4",
    "RESTATE_LOG_FILTER": "warn",
    **{name: "false" for name in NO_FSYNC},
}


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


def available_servers() -> list[str]:
    """The servers this environment can run: granian only with its extra installed."""
    return [s for s in SERVERS if s == "hypercorn" or importlib.util.find_spec(s) is not None]


async def drain(admin_url: str, within: float = 180) -> None:
    """Wait until the server has no unfinished invocation (a race's loser runs on for 2 s)."""
    query = "SELECT count(*) AS n FROM sys_invocation WHERE status != 'completed'"
    async with asyncio.timeout(within):
        while True:
            if not int((await asyncio.to_thread(sql, admin_url, query))[0]["n"]):
                return
            await asyncio.sleep(0.25)


_LATEST = "SELECT max(created_at) AS t FROM sys_invocation"


async def invocations(admin_url: str, run: Callable[[], Awaitable[Any]]) -> dict[str, int]:
    """The invocations one ``run`` costs, by ``service/handler``, from `sys_invocation`: the server is
    drained before and after, and what was created in between is counted (completed ones included)."""
    await drain(admin_url)
    [row] = await asyncio.to_thread(sql, admin_url, _LATEST)
    since = row.get("t") or "1970-01-01T00:00:00Z"
    await run()
    await drain(admin_url)
    rows = await asyncio.to_thread(
        sql,
        admin_url,
        "SELECT target_service_name AS s, target_handler_name AS h, count(*) AS n FROM sys_invocation "
        f"WHERE created_at > '{since}' GROUP BY target_service_name, target_handler_name",
    )
    return {f"{r['s']}/{r['h']}": int(r["n"]) for r in sorted(rows, key=lambda r: (r["s"], r["h"]))}


async def measure(
    quick: bool, servers: list[str], progress: Callable[[str], None], *, families: set[str]
) -> dict[str, Any]:
    """Each scenario under every server in turn (the order rotating), one restate-server throughout."""
    stack = LocalStack()
    stack.add_server(env=SERVER_ENV)
    endpoints: dict[str, Endpoint] = {
        name: stack.add_endpoint(name, module="bench.app", args=(), server=name) for name in servers
    }
    results: dict[str, Any] = {name: {"all": {}, "call_all": {}, "invocations": {}} for name in servers}
    with stack.start(register=False):
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(verify=tls(), timeout=600, limits=limits) as client:
            b = Bench(client, stack.ingress_url)
            turn = 0

            async def each_server(
                what: str, run: Callable[[str], Awaitable[Any]], only: list[str] | None = None
            ) -> None:
                nonlocal turn
                order = servers[turn % len(servers) :] + servers[: turn % len(servers)]
                turn += 1
                for name in [s for s in order if only is None or s in only]:
                    progress(f"{what} on {name}")
                    stack.register(endpoints[name], force=True)
                    await run(name)
                    await drain(stack.admin_url)

            async def floor(name: str) -> None:
                samples = [await b.call("noop", {}) for _ in range(30 if quick else 200)]
                results[name]["floor"] = {"median": statistics.median(samples), "p95": _p95(samples)}

            async def race(name: str) -> None:
                results[name]["race"] = await b.pair("native_race", "group_race", {}, 20 if quick else 100)

            def all_of(n: int, runs: int) -> Callable[[str], Awaitable[None]]:
                async def run(name: str) -> None:
                    # The wide sizes run once, unwarmed: a warm-up would double minutes of native gather.
                    pair = b.pair("native_all", "group_all", {"n": n}, runs, warm=n < WIDE_FROM)
                    results[name]["all"][n] = await pair

                return run

            async def throughput(name: str) -> None:
                rounds = 1 if quick else 3
                await b.throughput("group_race", 10, 1)
                results[name]["throughput"] = {
                    "native": await b.throughput("native_race", 50, rounds),
                    "group": await b.throughput("group_race", 50, rounds),
                }

            await each_server("floor: no-op invocation", floor)
            if "tools" in families:
                await each_server("race, 2 arms", race)
                for n, (q, full) in SIZES.items():
                    runs = q if quick else full
                    if runs:
                        # The wide sizes (minutes of native gather each) run under the default server only.
                        only = servers[:1] if n >= WIDE_FROM else None
                        await each_server(f"all, N={n}", all_of(n, runs), only)
                await each_server("50 concurrent races", throughput)
            if "calls" in families:
                for what, run in call_scenarios(b, stack.admin_url, results, quick):
                    await each_server(what, run)
    return results


def call_scenarios(
    b: Bench, admin_url: str, results: dict[str, Any], quick: bool
) -> list[tuple[str, Callable[[str], Awaitable[None]]]]:
    """The call-child scenarios (issue 22), each a function of the server's name."""

    async def race(name: str) -> None:
        runs = 20 if quick else 100
        results[name]["call_race"] = await b.pair("native_call_race", "group_call_race", {}, runs)

    def all_of(n: int, runs: int) -> Callable[[str], Awaitable[None]]:
        async def run(name: str) -> None:
            results[name]["call_all"][n] = await b.pair("native_call_all", "group_call_all", {"n": n}, runs)

        return run

    async def throughput(name: str) -> None:
        rounds = 1 if quick else 3
        await b.throughput("group_call_race", 10, 1)
        results[name]["call_throughput"] = {
            "native": await b.throughput("native_call_race", 50, rounds),
            "group": await b.throughput("group_call_race", 50, rounds),
        }

    async def counted(name: str) -> None:
        for key, (native, group, body) in COUNTED.items():
            for path, handler in (("native", native), ("group", group)):
                spent = await invocations(admin_url, functools.partial(b.call, handler, body))
                results[name]["invocations"].setdefault(key, {})[path] = spent

    scenarios: list[tuple[str, Callable[[str], Awaitable[None]]]] = [
        ("call race, 2 thin calls", race),
    ]
    for n, (q, full) in CALL_SIZES.items():
        runs = q if quick else full
        if runs:
            scenarios.append((f"call all, N={n}", all_of(n, runs)))
    scenarios.append(("50 concurrent call races", throughput))
    scenarios.append(("invocations per call scenario", counted))
    return scenarios


async def measure_v7(quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    """The call scenarios on a fresh restate-server with protocol v7, the default HTTP server."""
    stack = LocalStack()
    stack.add_server(env={**SERVER_ENV, **V7_ENV})
    stack.add_endpoint("v7", module="bench.app", args=(), server=SERVERS[0])
    results: dict[str, Any] = {"all": {}, "call_all": {}, "invocations": {}}
    with stack.start():
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(verify=tls(), timeout=600, limits=limits) as client:
            b = Bench(client, stack.ingress_url)
            progress("v7: floor: no-op invocation")
            samples = [await b.call("noop", {}) for _ in range(30 if quick else 200)]
            results["floor"] = {"median": statistics.median(samples), "p95": _p95(samples)}
            for what, run in call_scenarios(b, stack.admin_url, {"v7": results}, quick):
                progress(f"v7: {what}")
                await run("v7")
                await drain(stack.admin_url)
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

    def rate(name: str, tp: dict[str, float], key: str) -> None:
        ratios[key] = tp["group"] / tp["native"]
        rows.append([name, f"{tp['native']:.0f}/s", "", f"{tp['group']:.0f}/s", "", f"{ratios[key]:.2f}x"])

    if "race" in results:
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
    if "throughput" in results:
        rate("50 concurrent races (races/s)", results["throughput"], "concurrent_race_throughput_ratio")
    if "call_race" in results:
        add("call race, 2 thin calls", results["call_race"], "call_race_ratio")
    for n, pair in results["call_all"].items():
        add(f"call all, N={n}", pair, f"call_all_{n}_ratio")
    if "call_throughput" in results:
        rate("50 concurrent call races (races/s)", results["call_throughput"], "call_throughput_ratio")
    for key, paths in results["invocations"].items():
        ratios[f"invocations_per_{key}"] = sum(paths["group"].values())
        ratios[f"native_invocations_per_{key}"] = sum(paths["native"].values())
    ratios["floor_ms"] = floor["median"] * 1e3
    return rows, ratios


def invocation_rows(results: dict[str, Any]) -> list[list[str]]:
    """What each counted scenario's invocations are, native and group, from `sys_invocation`."""
    rows = [["scenario", "path", "invocations", "by service/handler"]]
    for key, paths in results["invocations"].items():
        for path in ("native", "group"):
            spent = paths[path]
            parts = ", ".join(f"{target} {n}" for target, n in spent.items())
            rows.append([key, path, str(sum(spent.values())), parts])
    return rows


def compare(results: dict[str, Any]) -> tuple[list[list[str]], dict[str, float]]:
    """Each other server against hypercorn, path by path, in the same run: its median ÷ hypercorn's
    (latency: lower is faster), and its races/s ÷ hypercorn's (throughput: higher is faster). The
    native path runs on the bench endpoint too, so it moves with the server as the group path does."""
    base = results["hypercorn"]
    rows = [["scenario", "server", "native ÷ hypercorn", "group ÷ hypercorn"]]
    out: dict[str, float] = {}
    for name in [s for s in results if s != "hypercorn"]:
        mine = results[name]
        scenarios = [("race, 2 arms", "race", mine["race"], base["race"])] if "race" in mine else []
        scenarios += [(f"all, N={n}", f"all_{n}", mine["all"][n], base["all"][n]) for n in mine["all"]]
        if "call_race" in mine:
            scenarios.append(("call race", "call_race", mine["call_race"], base["call_race"]))
        scenarios += [
            (f"call all, N={n}", f"call_all_{n}", mine["call_all"][n], base["call_all"][n])
            for n in mine["call_all"]
        ]
        for label, key, pair, theirs in scenarios:
            for path in ("native", "group"):
                out[f"{key}_{path}"] = statistics.median(pair[path]) / statistics.median(theirs[path])
            rows.append([label, name, f"{out[f'{key}_native']:.2f}x", f"{out[f'{key}_group']:.2f}x"])
        for label, key in (
            ("50 concurrent races (races/s)", "throughput"),
            ("50 concurrent call races (races/s)", "call_throughput"),
        ):
            if key not in mine:
                continue
            for path in ("native", "group"):
                out[f"{key}_{path}"] = mine[key][path] / base[key][path]
            rows.append([label, name, f"{out[f'{key}_native']:.2f}x", f"{out[f'{key}_group']:.2f}x"])
    return rows, out


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for server, measured in results.items():
        sizes = sorted(measured["all"])
        if not sizes:
            continue
        for path_name, label in (("native", "native restate.gather"), ("group", "durable group (all)")):
            per_child = [statistics.median(measured["all"][n][path_name]) * 1e3 / n for n in sizes]
            ax.plot(sizes, per_child, "o-" if path_name == "group" else "s--", label=f"{label}, {server}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("children (N)")
    ax.set_ylabel("median round trip per child (ms)")
    ax.set_title("all over N immediate children, one restate-server, same run")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a reduced run, a few minutes (N up to 1000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "bench-all.png")
    parser.add_argument(
        "--only",
        choices=("tools", "calls"),
        help="measure only the tool scenarios or only the call scenarios (default: both)",
    )
    parser.add_argument("--no-v7", action="store_true", help="skip the run on the protocol-v7 server")
    args = parser.parse_args(argv)
    families = {args.only} if args.only else {"tools", "calls"}

    def progress(text: str) -> None:
        print(f"bench: {text} …", file=sys.stderr, flush=True)

    servers = available_servers()
    if servers != list(SERVERS):
        missing = ", ".join(s for s in SERVERS if s not in servers)
        progress(f"not measuring {missing}: not installed (pip install -e '.[granian]')")
    results = asyncio.run(measure(args.quick, servers, progress, families=families))
    v7 = None if args.no_v7 or "calls" not in families else asyncio.run(measure_v7(args.quick, progress))
    summary: dict[str, Any] = {"quick": args.quick}
    measured = {**results, **({"v7": v7} if v7 is not None else {})}
    for name, result in measured.items():
        rows, ratios = summarise(result)
        served = f"served by {name}" if name != "v7" else "on a protocol-v7 restate-server (hypercorn)"
        print(f"{name}: group path vs native, both {served}")
        print_table(rows)
        if result["invocations"]:
            print()
            print_table(invocation_rows(result))
        print()
        summary[name] = {k: round(v, 3) for k, v in ratios.items()}
    if len(servers) > 1:
        rows, against = compare(results)
        print("the servers side by side: each path's median (or races/s) over hypercorn's, same run")
        print_table(rows)
        summary["vs_hypercorn"] = {k: round(v, 3) for k, v in against.items()}
    try:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    except ImportError:  # the plotting extra is optional; the numbers never depend on it
        print("plot: skipped (install the bench extra: pip install -e '.[bench]')", file=sys.stderr)
    except Exception as exc:  # nor on the plot being drawn: the JSON line still ends the run
        print(f"plot: failed: {exc!r}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
