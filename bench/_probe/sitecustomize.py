"""Loaded by the endpoint `bench.inflight` starts (its directory is put on the endpoint's PYTHONPATH):
with ``LASH_PROBE`` set, SIGUSR1 appends the endpoint's traced allocations by file to that path,
and ``LASH_PROBE_TRACE=1`` starts `tracemalloc` as the process starts. A measurement aid only."""

from __future__ import annotations

import os
import signal
import tracemalloc
from types import FrameType

if os.environ.get("LASH_PROBE"):
    if os.environ.get("LASH_PROBE_TRACE") == "1":
        tracemalloc.start(1)

    def _dump(signum: int, frame: FrameType | None) -> None:
        with open(os.environ["LASH_PROBE"], "a", encoding="utf-8") as out:
            if not tracemalloc.is_tracing():
                out.write("== not traced\n")
                return
            stats = tracemalloc.take_snapshot().statistics("filename")
            out.write("== snapshot\n")
            for stat in stats:
                out.write(f"{stat.size}\t{stat.count}\t{stat.traceback[0].filename}\n")

    signal.signal(signal.SIGUSR1, _dump)
