"""Pause faults on one server and one endpoint: either SIGSTOPped past Restate's inactivity and abort
timeouts while groups are in flight, then SIGCONTed (issue 23; `tests/engine/faults.py` says what
every run checks).

A drawn group (every combinator, both dispositions, tools and calls, a loser held past the close) meets
the pause inside its first turn (a drawn 0-80 ms into it), while a resumed turn is parked on its
awakeable, or between turns; the events that settle the group arrive while the process is stopped.
Restate abandons the paused attempts and retries them; the paused process, once it runs again, still
holds the old ones.

CI runs one chosen scenario per fault; ``LASH_FAULT_RUNS=100`` runs it and 100 drawn ones. Each run appends a
line to ``$LASH_CRASH_REPORT`` (if set), as the crash matrix does.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import Phase, example, given, seed, settings
from hypothesis import strategies as st

from tests.engine.faults import FaultStack, pause_stack, run_scenario, scenario
from tests.engine.test_crash_matrix import _matrix, _report

RUNS = int(os.environ.get("LASH_FAULT_RUNS", "0"))  # CI: the explicit examples only

pytestmark = pytest.mark.crash


@pytest.fixture(scope="module")
def paused(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    with pause_stack(tmp_path_factory.mktemp("pause")) as stack:
        yield FaultStack(stack)


def run(fs: FaultStack, sc: dict[str, Any]) -> None:
    try:
        line = asyncio.run(asyncio.wait_for(run_scenario(fs, sc), 300))
    except AssertionError as divergence:
        _report({"scenario": sc, "divergence": str(divergence)})
        raise
    _report({"scenario": sc, "divergence": None, **line})


def matrix(runs: int) -> settings:
    """The crash matrix's settings; with no runs asked for, only the explicit examples (CI's)."""
    return settings(_matrix(max(runs, 1)), phases=[Phase.explicit, Phase.generate][: 2 if runs else 1])


def drawn(faults: list[str], nodes: int = 1) -> st.SearchStrategy[dict[str, Any]]:
    return st.randoms(use_true_random=False).map(lambda rng: scenario(rng, faults, nodes))


# CI's examples: a Cancel race paused mid-open whose held call must be cancelled; a fail-fast `all`
# whose re-read is parked on an event rejected while the server is stopped, narrowing to Cancel.
ENDPOINT = {
    "kind": "race",
    "children": ["tool_slow", "call_ok", "held_call", "event_ok", "event_reject"],
    "declared": "cancel",
    "fail_fast": False,
    "stop_after": 0,
    "fault": "endpoint_pause",
    "node": 0,
    "moment": "inflight",
    "after_ms": 20,
    "emit_order": [4, 3],
}
SERVER = {
    "kind": "all",
    "children": ["call_ok", "tool_ok", "event_reject", "held_event", "tool_slow"],
    "declared": "run_to_completion",
    "fail_fast": True,
    "stop_after": 1,
    "fault": "server_pause",
    "node": 0,
    "moment": "parked",
    "after_ms": 0,
    "emit_order": [2],
}


@pytest.mark.timeout(400 + 300 * RUNS)
@seed(20261202)
@matrix(RUNS)
@example(sc=ENDPOINT)
@given(sc=drawn(["endpoint_pause"]))
def test_an_endpoint_paused_past_the_inactivity_timeout_loses_nothing(
    paused: FaultStack, sc: dict[str, Any]
) -> None:
    run(paused, sc)


@pytest.mark.timeout(400 + 300 * RUNS)
@seed(20261203)
@matrix(RUNS)
@example(sc=SERVER)
@given(sc=drawn(["server_pause"]))
def test_a_server_paused_past_the_inactivity_timeout_loses_nothing(
    paused: FaultStack, sc: dict[str, Any]
) -> None:
    run(paused, sc)
