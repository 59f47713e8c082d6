"""`python -m bench.wide N[,N…] [--paths group_all,native_all] [--k K] [--rounds R] [--spy DIR]
[--rss S]`: where a wide `all` spends; ``--paths group_bounded_all,native_bounded_all`` measures a
bounded one (at most K calls at once) against a hand-written native loop; ``--rss S`` prints, every
S seconds of each run, the endpoint's RSS and the invocations not completed, by service and status.

Starts its own restate-server and the bench endpoint, runs each path once per N (after a warm-up
at N=10), and prints per run: the round trip, ms per child, the endpoint's peak RSS, and from
Restate's own `sys_invocation` table the timeline of the group path's invocations (children,
pumps, settles, waits, outcome reads: when created, first running, median and last completion,
time queued and time running, in seconds from the caller's start). With ``--spy DIR`` it records
the endpoint with py-spy (not a dependency: ``pip install py-spy``) into ``DIR/{path}-{n}.txt``
(collapsed stacks) and prints the frames that hold the most samples. The table of the findings is
in docs/performance.md. A measurement script, not part of the library.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx

from lash_restate._http import tls
from lash_restate.inspection import sql
from lash_restate.testing import LocalStack

# The group path's invocations, by what they are, as `sys_invocation` filters.
PARTS = {
    "children": "target_service_name = 'LashChild'",
    "pumps": "target_service_name = 'LashPump' AND target_handler_name IN ('run', 'run2', 'run_parts')",
    "settles": "target_service_name = 'LashGroup' AND target_handler_name IN ('settle', 'report')",
    "stages": "target_service_name = 'LashPump' AND target_handler_name = 'stage'",
    "waits": "target_service_name = 'LashGroup' AND target_handler_name = 'wait'",
    "reads": "target_service_name = 'LashPump' AND target_handler_name = 'outcomes'",
}


# The largest state each kind of object held while a run went on, polled once a second.
STATE = (
    "SELECT service_name AS s, key AS k, count(*) AS n, sum(length(value)) AS bytes FROM state "
    "WHERE service_name IN ('LashGroup', 'LashPump') GROUP BY service_name, key"
)


async def _poll_state(admin: str, peak: dict[str, tuple[int, int]]) -> None:
    """Keep, per object kind and state key class, the largest (entries, bytes) seen so far."""
    while True:
        rows = await asyncio.to_thread(sql, admin, STATE)
        sizes: dict[str, tuple[int, int]] = {}
        for row in rows:
            key = row["k"]
            if row["s"] == "LashPump" and key.startswith("o"):
                key = "o*"
            elif ":" in key:  # a paged group's `ranks:{page}`, `settled:{slice}`, `keys:{slice}`
                key = key.split(":")[0] + ":*"
            kind = f"{row['s']}/{key}"
            n, size = sizes.get(kind, (0, 0))
            sizes[kind] = (n + row["n"], size + (row["bytes"] or 0))
        for kind, (n, size) in sizes.items():
            if size > peak.get(kind, (0, 0))[1]:
                peak[kind] = (n, size)
        await asyncio.sleep(1)


# What is in flight, by service and status, polled with the endpoint's RSS (``--rss``).
IN_FLIGHT = (
    "SELECT target_service_name AS s, status, count(*) AS n FROM sys_invocation "
    "WHERE status != 'completed' GROUP BY target_service_name, status"
)


async def _poll_rss(admin: str, pid: int, every: float, lines: list[str]) -> None:
    """Every ``every`` seconds, the endpoint's RSS and the invocations not completed, by kind."""
    start = time.perf_counter()
    while True:
        status = await asyncio.to_thread(Path(f"/proc/{pid}/status").read_text)
        rss = status.split("VmRSS:")[1].split("\n")[0].strip()
        rows = await asyncio.to_thread(sql, admin, IN_FLIGHT)
        flight = ", ".join(f"{r['s']}/{r['status']} {r['n']}" for r in sorted(rows, key=lambda r: -r["n"]))
        lines.append(f"  {time.perf_counter() - start:6.1f} s  RSS {rss:>12}  {flight}")
        await asyncio.sleep(every)


def _record(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy recording the endpoint into ``out`` until it gets SIGINT."""
    command = [shutil.which("py-spy") or "py-spy", "record", "--pid", str(pid), "--format", "raw"]
    return subprocess.Popen([*command, "-r", "50", "-o", str(out)], stderr=subprocess.DEVNULL)


def _peak_rss(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return status.split("VmHWM:")[1].split("\n")[0].strip()


def timeline(admin: str, caller: str) -> list[str]:
    """The group path's invocations since the latest ``caller`` handler started, by part."""
    [row] = sql(
        admin,
        "SELECT date_part('epoch', created_at) AS c, date_part('epoch', completed_at) AS d, "
        "journal_size AS j "
        f"FROM sys_invocation WHERE target_handler_name = '{caller}' ORDER BY created_at DESC LIMIT 1",
    )
    t0 = row["c"]
    lines = [f"  caller: done at {row['d'] - t0:.2f} s, journal {row['j']} entries"]
    for name, where in PARTS.items():
        [r] = sql(
            admin,
            f"SELECT count(*) AS n, min(date_part('epoch', created_at)) - {t0} AS c0, "
            f"max(date_part('epoch', created_at)) - {t0} AS c1, "
            f"min(date_part('epoch', running_at)) - {t0} AS r0, "
            f"approx_percentile_cont(date_part('epoch', completed_at) - {t0}, 0.5) AS dmed, "
            f"max(date_part('epoch', completed_at)) - {t0} AS d1, "
            "sum(date_part('epoch', running_at) - date_part('epoch', created_at)) AS queued, "
            "sum(date_part('epoch', completed_at) - date_part('epoch', running_at)) AS ran, "
            "max(journal_size) AS jmax "
            f"FROM sys_invocation WHERE {where} AND date_part('epoch', created_at) >= {t0}",
        )
        if not r["n"]:
            continue
        lines.append(
            f"  {name:8s} n={r['n']} created {r['c0']:.1f}..{r['c1']:.1f}, first running {r['r0']:.1f}, "
            f"completed median {r['dmed']:.1f} last {r['d1']:.1f}; queued {r['queued']:.1f} s, "
            f"running {r['ran']:.1f} s in all; longest journal {r['jmax']}"
        )
    return lines


def hottest(path: Path, top: int = 25) -> list[str]:
    """The frames present in the most samples of a py-spy raw (collapsed) profile."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for frame in {f.split(" (")[0] + " " + f.rsplit("/", 1)[-1] for f in stack.split(";")}:
            inclusive[frame] += int(count)
    return [f"  {100 * n / total:5.1f}% {frame}" for frame, n in inclusive.most_common(top)]


async def measure(
    sizes: list[int], paths: list[str], spy: Path | None, k: int, rounds: int, rss: float | None = None
) -> None:
    stack = LocalStack.single(
        server_env={"RESTATE_DEFAULT_NUM_PARTITIONS": "4", "RESTATE_LOG_FILTER": "warn"},
        module="bench.app",
        endpoint_args=(),
    )
    with stack.start():
        pid = stack.endpoint.pid
        assert pid is not None
        async with httpx.AsyncClient(verify=tls(), timeout=3600) as client:
            for path in paths:
                await client.post(f"{stack.ingress_url}/Bench/{path}", json={"n": 10, "k": 2})
            for n in sizes:
                for path in [p for _ in range(rounds) for p in paths]:  # alternating rounds
                    recorder: subprocess.Popen[bytes] | None = None
                    if spy is not None:
                        recorder = _record(pid, spy / f"{path}-{n}.txt")
                        await asyncio.sleep(1.5)  # py-spy attaches before the run starts
                    peak: dict[str, tuple[int, int]] = {}
                    poller = asyncio.create_task(_poll_state(stack.admin_url, peak))
                    rss_lines: list[str] = []
                    if rss is not None:
                        rss_poller = asyncio.create_task(_poll_rss(stack.admin_url, pid, rss, rss_lines))
                    start = time.perf_counter()
                    response = await client.post(f"{stack.ingress_url}/Bench/{path}", json={"n": n, "k": k})
                    elapsed = time.perf_counter() - start
                    poller.cancel()
                    if rss is not None:
                        rss_poller.cancel()
                    if response.status_code != 200:
                        raise RuntimeError(f"{path} failed: {response.text[:300]}")
                    print(
                        f"{path} N={n}: {elapsed:.2f} s, {elapsed / n * 1e3:.2f} ms/child, "
                        f"endpoint peak RSS {_peak_rss(pid)}",
                        flush=True,
                    )
                    if rss_lines:
                        print("\n".join(rss_lines), flush=True)
                    if recorder is not None:
                        recorder.send_signal(signal.SIGINT)
                        recorder.wait()
                    if path == "group_all":
                        print("\n".join(timeline(stack.admin_url, path)), flush=True)
                        for kind, (entries, size) in sorted(peak.items()):
                            print(f"  peak state {kind}: {entries} entries, {size} bytes", flush=True)
                    if spy is not None:
                        print("\n".join(hottest(spy / f"{path}-{n}.txt")), flush=True)
            await asyncio.sleep(2)  # the closes' releases are sent, not awaited
            print(f"state left after the closes: {sql(stack.admin_url, STATE)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wide", description=__doc__)
    parser.add_argument("sizes", help="comma-separated N, e.g. 1000,4000,10000")
    parser.add_argument("--paths", default="group_all,native_all", help="Bench handlers to run")
    parser.add_argument("--spy", type=Path, help="record the endpoint with py-spy into this directory")
    parser.add_argument("--k", type=int, default=50, help="max_in_flight of the bounded paths")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each path per N, alternating")
    parser.add_argument(
        "--rss", type=float, metavar="S", help="every S seconds: the endpoint's RSS and what is in flight"
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",")]
    if args.spy is not None:
        args.spy.mkdir(parents=True, exist_ok=True)
    asyncio.run(measure(sizes, args.paths.split(","), args.spy, args.k, args.rounds, args.rss))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
