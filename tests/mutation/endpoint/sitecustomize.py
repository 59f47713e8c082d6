"""Imported at start-up by every Python process a mutation run's tests start (an endpoint, say), from
the ``PYTHONPATH`` the test process gives them (`tests.mutation.hits.setup_environment`).

mutmut learns which tests reach a mutated function from the hits its trampolines record in the test
process; an endpoint's hits would stay in the endpoint. Under mutmut's ``stats`` run this appends
each function an endpoint reaches to ``$LASH_MUTMUT_HITS``, once per test (the test process touches
``$LASH_MUTMUT_EPOCH`` as each test starts), and the test process credits them to the test.
"""

from __future__ import annotations

import os
import time


def _forward_hits() -> None:
    hits, epoch = os.environ.get("LASH_MUTMUT_HITS"), os.environ.get("LASH_MUTMUT_EPOCH")
    if os.environ.get("MUTANT_UNDER_TEST") != "stats" or not hits or not epoch:
        return
    try:
        from mutmut.mutation import trampoline
    except ImportError:  # an interpreter without mutmut: nothing to forward
        return
    out = open(hits, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - open for the process's life
    seen: set[str] = set()
    last = {"checked": 0.0, "epoch": 0.0}

    def record(name: str, caller: str | None = None) -> None:
        now = time.monotonic()
        if now - last["checked"] > 0.05:  # a stat at most every 50 ms, not one per call
            last["checked"] = now
            try:
                started = os.stat(epoch).st_mtime
            except OSError:
                started = 0.0
            if started != last["epoch"]:
                last["epoch"] = started
                seen.clear()  # a new test: each function once more
        if name not in seen:
            seen.add(name)
            out.write(name + "\n")

    vars(trampoline)["record_trampoline_hit"] = record  # the name the trampolines call


_forward_hits()
