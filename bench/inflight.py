"""`python -m bench.inflight [N] [--trace]`: what one child in flight costs the endpoint's memory.

Starts its own restate-server and an endpoint (`--with-turn`, hypercorn), opens a `lash.all` of N
tool children (1000 by default), each held in its tool (the demo `blob` tool, delayed) so that all
N `LashChild/run` invocations run on the endpoint at once, and prints the endpoint's RSS idle and
with the N running, and the difference per child. With ``--trace`` the endpoint traces its Python
allocations (`tracemalloc`, which costs memory of its own: the RSS is then not comparable) and the
difference per child is split by where it was allocated: the Restate SDK, asyncio, the HTTP server,
lash's own code, the rest. The findings are in docs/performance.md. A measurement script, not part
of the library.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from collections import defaultdict
from pathlib import Path
from tempfile import TemporaryDirectory

from tests.conformance.builders import Scope, combine, tool

from lash_restate.testing import LocalStack

PROBE = Path(__file__).parent / "_probe"
HELD_MS = 300_000  # each child's tool waits this long: longer than the measure, which then ends it

# Where an allocation was made, by the path of its file.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "the caller's driver (lash's test handler, which opened the group)": ("/lash_restate/testing/",),
    "the Restate SDK": ("/restate/",),
    "asyncio": ("/asyncio/",),
    "the HTTP server (hypercorn, h2, hpack, priority)": ("/hypercorn/", "/h2/", "/hpack/", "/priority/"),
    "lash (its child's run, the group's records of the N children)": ("/lash_restate/",),
}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def snapshot(probe: Path, pid: int, count: int) -> dict[str, int]:
    """Bytes traced by file, from the endpoint's ``count``-th snapshot (asked for by SIGUSR1)."""
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 60
    while True:
        text = probe.read_text() if probe.exists() else ""
        parts = text.split("== snapshot\n")
        if len(parts) > count and (count < len(parts) - 1 or text.endswith("\n")):
            time.sleep(1)  # the write may still be under way: read it whole
            parts = probe.read_text().split("== snapshot\n")
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the endpoint wrote no snapshot to {probe}")
        time.sleep(0.2)
    sizes: dict[str, int] = {}
    for line in parts[count].splitlines():
        size, _, filename = line.split("\t")
        sizes[filename] = int(size)
    return sizes


def by_library(sizes: dict[str, int]) -> dict[str, int]:
    grouped: dict[str, int] = defaultdict(int)
    for filename, size in sizes.items():
        found = (name for name, marks in LIBRARIES.items() if any(m in filename for m in marks))
        grouped[next(found, "the rest")] += size
    return grouped


async def measure(n: int, trace: bool) -> None:
    with TemporaryDirectory(prefix="lash-inflight-") as tmp:
        probe = Path(tmp) / "probe.txt"
        env = {"PYTHONPATH": str(PROBE), "LASH_PROBE": str(probe), "LASH_PROBE_TRACE": "1" if trace else "0"}
        stack = LocalStack.single(Path(tmp) / "stack", endpoint_env=env)
        with stack.start():
            assert stack.endpoint.process is not None
            pid = stack.endpoint.process.pid
            idle = rss_kb(pid)
            before = snapshot(probe, pid, 1) if trace else {}
            s = Scope()
            group = s.group([tool("blob", {"size": 1, "delay_ms": HELD_MS}) for _ in range(n)])
            turn = asyncio.create_task(stack.turn(combine("all", group), within=HELD_MS / 1000 + 60))
            running = 0
            while running < n:
                await asyncio.sleep(1)
                rows = stack.sql(
                    "SELECT count(*) AS n FROM sys_invocation "
                    "WHERE target_service_name = 'LashChild' AND status = 'running'"
                )
                running = int(rows[0]["n"]) if rows else 0
                print(f"  {running} of {n} children running, endpoint RSS {rss_kb(pid) / 1024:.1f} MB")
            await asyncio.sleep(3)  # settled: what a child in flight holds, not what starting it did
            busy = rss_kb(pid)
            print(f"endpoint RSS idle {idle / 1024:.1f} MB, {n} children in flight {busy / 1024:.1f} MB:")
            print(f"  {(busy - idle) * 1024 / n / 1000:.1f} KB per child in flight")
            if trace:
                after = snapshot(probe, pid, 2)
                grew = {f: after.get(f, 0) - before.get(f, 0) for f in after}
                total = sum(grew.values())
                print(f"  Python allocations traced: {total / n / 1000:.1f} KB per child, of which")
                for name, size in sorted(by_library(grew).items(), key=lambda item: -item[1]):
                    print(f"    {name}: {size / n / 1000:.1f} KB")
            turn.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("n", nargs="?", type=int, default=1000, help="children in flight at once")
    parser.add_argument("--trace", action="store_true", help="split the cost by where it is allocated")
    args = parser.parse_args()
    asyncio.run(measure(args.n, args.trace))


if __name__ == "__main__":
    main()
