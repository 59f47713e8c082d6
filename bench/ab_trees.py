"""`python -m bench.ab_trees --old DIR [--new DIR]`: A/B of two source trees on one restate-server.

Each variant is a whole checkout of the project (its own ``bench/app.py`` and its own
``src/lash_restate``), served as ``python -m bench.app --port P`` with
``PYTHONPATH=<tree>/src:<tree>`` and ``PYTHONSAFEPATH=1`` (so the working directory, which
``python -m`` would put first, cannot shadow the tree). Both endpoints run for the whole
measurement behind ONE restate-server. Rounds alternate (the order rotates, A B B A A B …):
before each variant's turn its endpoint is registered with ``force`` (the two trees may bind
different handler sets, and every service must point at this variant: checked), then one round
measures native and group interleaved for every scenario of ``make bench``, then the server is
drained (no invocation left unfinished) so the next variant inherits no background work.
The load average is recorded at each turn, since other suites may share the machine.

The table gives, per variant and scenario, the median across rounds of group ÷ native and the
absolute medians, then the rounds paired: NEW's ratio over OLD's in the same round, and in how
many rounds NEW's was higher (a sign test). ``--out`` keeps every round; ``--table`` reprints one.

A measurement script, not part of the library.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.__main__ import SERVER_ENV, Bench, invocations
from lash_restate._http import tls
from lash_restate.inspection import sql
from lash_restate.testing import Endpoint, LocalStack

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("Bench", "BenchChild", "Thin", "LashGroup", "LashChild", "LashPump")
# What `--scenarios` can name: the tool scenarios of `make bench` and its call scenarios (issue 22):
# (native handler, group handler, the `n` of an `all`, or None for a race).
PAIRS: dict[str, tuple[str, str, int | None]] = {
    "race": ("native_race", "group_race", None),
    "call_race": ("native_call_race", "group_call_race", None),
    **{f"all_{n}": ("native_all", "group_all", n) for n in (1, 10, 100, 1000)},
    **{f"call_all_{n}": ("native_call_all", "group_call_all", n) for n in (1, 10, 30, 100, 1000)},
}
BURSTS = {
    "throughput": ("native_race", "group_race"),
    "call_throughput": ("native_call_race", "group_call_race"),
}
SCENARIOS = ["race", "all_10", "all_100", "all_1000", "throughput"]
CALL_SCENARIOS = ["call_race", "call_all_10", "call_all_30", "call_all_100", "call_throughput", "race"]
# Pairs per round, by how wide the scenario is (a race counts as 1).
RUNS = {1: 30, 10: 15, 30: 10, 100: 5, 1000: 1}


def tree_env(tree: Path) -> dict[str, str]:
    return {"PYTHONPATH": f"{tree / 'src'}:{tree}", "PYTHONSAFEPATH": "1"}


def check_tree(tree: Path) -> dict[str, str]:
    """Import ``bench.app`` and ``lash_restate`` as the endpoint will, and check both come from ``tree``."""
    probe = "import bench.app, lash_restate; print(bench.app.__file__); print(lash_restate.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **tree_env(tree)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for path in out:
        if not Path(path).resolve().is_relative_to(tree.resolve()):
            raise SystemExit(f"{path} is not under {tree}: the endpoint would not run that tree's code")
    return {"bench_app": out[0], "lash_restate": out[1]}


def commit_of(tree: Path) -> str:
    answer = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return answer.stdout.strip() if answer.returncode == 0 else "?"


def service(admin_url: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{admin_url}/services/{name}", timeout=10, verify=tls()).json()
    return body


async def drain(admin_url: str, within: float = 180) -> float:
    """Wait until the server has no unfinished invocation; returns the seconds it took."""
    start = time.perf_counter()
    while True:
        rows = await asyncio.to_thread(
            sql, admin_url, "SELECT count(*) AS n FROM sys_invocation WHERE status != 'completed'"
        )
        if int(rows[0]["n"]) == 0:
            return time.perf_counter() - start
        if time.perf_counter() - start > within:
            raise RuntimeError(f"server not drained after {within} s: {rows}")
        await asyncio.sleep(0.25)


async def one_round(b: Bench, sizes: dict[str, int]) -> dict[str, Any]:
    """One variant's round: every scenario, native and group interleaved, as `make bench` does."""
    out: dict[str, Any] = {}
    for scenario, runs in sizes.items():
        if scenario == "bursts" or not runs:
            continue
        if scenario in BURSTS:
            native, group = BURSTS[scenario]
            await b.throughput(group, 10, 1)
            out[scenario] = {
                "native": await b.throughput(native, 50, sizes["bursts"]),
                "group": await b.throughput(group, 50, sizes["bursts"]),
            }
            continue
        native, group, n = PAIRS[scenario]
        body = {} if n is None else {"n": n}
        out[scenario] = await b.pair(native, group, body, runs, warm=(n or 1) < 1000)
    return out


async def counted(b: Bench, admin_url: str) -> dict[str, int]:
    """The invocations one call race and one call `all` over 30 cost in this variant (issue 22)."""
    out = {}
    for scenario, body in (("group_call_race", {}), ("group_call_all", {"n": 30})):
        spent = await invocations(admin_url, functools.partial(b.call, scenario, body))
        out[scenario] = sum(spent.values())
    return out


def ratios(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per scenario: native and group medians (s, or races/s for throughput) and group ÷ native."""
    out: dict[str, dict[str, float]] = {}
    for scenario, value in result.items():
        if scenario in BURSTS:
            native, group = value["native"], value["group"]
        else:
            native, group = statistics.median(value["native"]), statistics.median(value["group"])
        out[scenario] = {"native": native, "group": group, "ratio": group / native}
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    trees: dict[str, Path] = {"OLD": args.old.resolve(), "NEW": args.new.resolve()}
    labels = {
        "OLD": args.old_label or commit_of(trees["OLD"]),
        "NEW": args.new_label or commit_of(trees["NEW"]),
    }
    probes = {v: check_tree(tree) for v, tree in trees.items()}
    variants = list(trees)
    sizes = {"race": args.race, "all_10": args.all10, "all_100": args.all100, "all_1000": args.all1000}
    if args.scenarios:
        sizes = {}
        for scenario in args.scenarios.split(","):
            if scenario not in PAIRS and scenario not in BURSTS:
                raise SystemExit(f"unknown scenario {scenario!r}: one of {', '.join([*PAIRS, *BURSTS])}")
            n = PAIRS[scenario][2] if scenario in PAIRS else None
            sizes[scenario] = RUNS[n or 1] if scenario != "all_1000" else args.all1000
    elif args.bursts:
        sizes["throughput"] = 1
    sizes["bursts"] = args.bursts
    stack = LocalStack()
    server = stack.add_server(env=SERVER_ENV)
    extra = {"OLD": _env(args.old_env), "NEW": _env(args.new_env)}
    endpoints: dict[str, Endpoint] = {
        v: stack.add_endpoint(v, module="bench.app", args=(), env={**tree_env(tree), **extra[v]})
        for v, tree in trees.items()
    }
    rounds: list[dict[str, Any]] = []
    began = datetime.now(UTC)
    with stack.start(register=False):
        for v in variants:
            print(f"ab: {v} ({labels[v]}) endpoint pid {endpoints[v].pid}, {probes[v]}", file=sys.stderr)
        print(f"ab: restate-server pid {server.pid}, base {stack.base_dir}", file=sys.stderr, flush=True)
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        hot: dict[str, list[str]] = {}
        async with httpx.AsyncClient(verify=tls(), timeout=600, limits=limits) as client:
            b = Bench(client, server.ingress_url)
            for r in range(args.rounds):
                # Rotate the order so no variant always follows the same one (A B, B A, A B, …).
                order = variants[r % len(variants) :] + variants[: r % len(variants)]
                for position, v in enumerate(order):
                    answer = stack.register(endpoints[v], force=True)[0]
                    for name in SERVICES:
                        got = service(server.admin_url, name)["deployment_id"]
                        if got != answer["id"]:
                            raise RuntimeError(f"{name} points at {got}, not {v}'s {answer['id']}")
                    if v not in hot:
                        hot[v] = sorted(h["name"] for h in service(server.admin_url, "LashGroup")["handlers"])
                        print(f"ab: {v} LashGroup handlers: {hot[v]}", file=sys.stderr)
                    load_before = os.getloadavg()
                    started = time.perf_counter()
                    result = await one_round(b, sizes)
                    took = time.perf_counter() - started
                    drained = await drain(server.admin_url)
                    spent = await counted(b, server.admin_url) if args.count else {}
                    load_after = os.getloadavg()
                    summary = ratios(result)
                    rounds.append(
                        {
                            "round": r,
                            "position": position,
                            "variant": v,
                            "seconds": took,
                            "drain_s": drained,
                            "load_before": load_before,
                            "load_after": load_after,
                            "summary": summary,
                            "invocations": spent,
                            "raw": result,
                        }
                    )
                    line = "  ".join(f"{k} {s['ratio']:.2f}x" for k, s in summary.items())
                    line += "".join(f"  {k}: {n} invocations" for k, n in spent.items())
                    print(
                        f"ab: round {r} {v}: {line}  ({took:.0f} s, drain {drained:.1f} s,"
                        f" load {load_before[0]:.1f}→{load_after[0]:.1f})",
                        file=sys.stderr,
                        flush=True,
                    )
    return {
        "began": began.isoformat(timespec="seconds"),
        "ended": datetime.now(UTC).isoformat(timespec="seconds"),
        "labels": labels,
        "trees": {v: str(t) for v, t in trees.items()},
        "handlers": hot,
        "sizes": sizes,
        "variants": variants,
        "rounds": rounds,
    }


def _env(pairs: list[str] | None) -> dict[str, str]:
    """``NAME=VALUE`` pairs for one variant's endpoint (e.g. ``LASH_BATCH_FROM=1``)."""
    return dict(pair.split("=", 1) for pair in pairs or [])


def sign_p(k: int, n: int) -> float:
    """Two-sided sign-test p-value: k of n paired rounds went one way."""
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


def table(data: dict[str, Any]) -> list[str]:
    measured = [s for s in [*PAIRS, *BURSTS] if any(s in r["summary"] for r in data["rounds"])]
    lines = [
        "variant | scenario | rounds | median ratio | ratio range | native median | group median",
    ]
    for v in data["variants"]:
        mine = [r["summary"] for r in data["rounds"] if r["variant"] == v]
        for s in measured:
            got = [m[s] for m in mine if s in m]
            if not got:
                continue
            rs = [g["ratio"] for g in got]
            unit, scale = ("/s", 1.0) if s in BURSTS else (" ms", 1e3)
            native = statistics.median(g["native"] for g in got) * scale
            group = statistics.median(g["group"] for g in got) * scale
            lines.append(
                f"{v} ({data['labels'][v]}) | {s} | {len(got)} | {statistics.median(rs):.3f}x"
                f" | {min(rs):.2f}-{max(rs):.2f} | {native:.1f}{unit} | {group:.1f}{unit}"
            )
    # Paired by round (each round holds one turn of each variant, adjacent in time): the second
    # variant's ratio over the first's, and in how many rounds it was higher (a sign test).
    first, second = data["variants"]
    lines += [
        "",
        f"scenario | rounds | median {second}/{first} of the ratio | range | rounds {second} higher | sign p",
    ]
    for s in measured:
        by_round: dict[int, dict[str, float]] = {}
        for r in data["rounds"]:
            if s in r["summary"]:
                by_round.setdefault(r["round"], {})[r["variant"]] = r["summary"][s]["ratio"]
        quotients = [p[second] / p[first] for p in by_round.values() if len(p) == 2]
        if not quotients:
            continue
        higher = sum(q > 1 for q in quotients)
        lines.append(
            f"{s} | {len(quotients)} | {statistics.median(quotients):.3f}"
            f" | {min(quotients):.2f}-{max(quotients):.2f}"
            f" | {higher}/{len(quotients)} | {sign_p(higher, len(quotients)):.2f}"
        )
    for v in data["variants"]:
        counts: dict[str, list[int]] = {}
        for r in data["rounds"]:
            if r["variant"] == v:
                for k, n in r.get("invocations", {}).items():
                    counts.setdefault(k, []).append(n)
        if counts:
            told = ", ".join(f"{k} {min(n)}-{max(n)}" for k, n in counts.items())
            lines.append(f"invocations, {v} ({data['labels'][v]}): {told}")
    loads = [x for r in data["rounds"] for x in (r["load_before"][0], r["load_after"][0])]
    if loads:
        lines.append(
            f"load average (1 min) at turns: median {statistics.median(loads):.1f},"
            f" range {min(loads):.1f}-{max(loads):.1f}; {os.cpu_count()} cpus"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab_trees", description=__doc__)
    parser.add_argument("--old", type=Path, help="the OLD source tree (a checkout)")
    parser.add_argument("--new", type=Path, default=ROOT, help="the NEW source tree (default: this one)")
    parser.add_argument("--old-label", help="what to call OLD (default: its git HEAD)")
    parser.add_argument("--old-env", action="append", help="NAME=VALUE for OLD's endpoint (repeatable)")
    parser.add_argument("--new-env", action="append", help="NAME=VALUE for NEW's endpoint (repeatable)")
    parser.add_argument("--new-label", help="what to call NEW (default: its git HEAD)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds, each variant once per round")
    parser.add_argument("--race", type=int, default=30, help="race pairs per round")
    parser.add_argument("--all10", type=int, default=15, help="all N=10 pairs per round")
    parser.add_argument("--all100", type=int, default=5, help="all N=100 pairs per round")
    parser.add_argument("--all1000", type=int, default=1, help="all N=1000 pairs per round (0: none)")
    parser.add_argument("--bursts", type=int, default=2, help="50-race bursts per path per round (best kept)")
    parser.add_argument(
        "--scenarios",
        help="comma-separated scenarios instead of the tool set, e.g. " + ",".join(CALL_SCENARIOS),
    )
    parser.add_argument(
        "--count", action="store_true", help="count a call race's and a call all's invocations each turn"
    )
    parser.add_argument("--out", type=Path, help="write every round's numbers here as JSON")
    parser.add_argument("--table", type=Path, help="print the table of a saved --out file and exit")
    args = parser.parse_args(argv)
    if not args.table and not args.old:
        parser.error("--old is required (unless --table)")
    data = json.loads(args.table.read_text()) if args.table else asyncio.run(run(args))
    if args.out and not args.table:
        args.out.write_text(json.dumps(data))
    print(f"A/B {data['began']} → {data['ended']}: OLD {data['labels']['OLD']}, NEW {data['labels']['NEW']}")
    print("\n".join(table(data)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
