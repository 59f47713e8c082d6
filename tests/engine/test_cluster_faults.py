"""Faults on one node of the three-node cluster (deploy/cluster, replication 2), each node in turn,
the ingress node included (issue 23; `tests/engine/faults.py` says what every run checks).

- paused: SIGSTOPped while the others take over its partitions, then SIGCONTed, when it may still
  believe it leads them;
- partitioned: cut off from the other two nodes and from the endpoint by the test's own network (a
  proxy in front of each node's node-to-node port and of the endpoint, `LoopbackNetwork`), then healed;
- wiped: killed, its partition store deleted, and started again, rebuilding from the replicated log.

The fault lands inside a drawn group's first turn, while a resumed turn is parked, or between turns;
the events that settle the group arrive through a node the fault spares while it lasts.

CI runs one chosen scenario per fault; ``LASH_FAULT_RUNS=100`` runs it and 100 drawn ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given, seed

from tests.engine.faults import FaultStack, proxied_cluster
from tests.engine.test_faults import drawn, matrix, run

RUNS = int(os.environ.get("LASH_FAULT_RUNS", "0"))  # CI: the explicit examples only

# One worker runs this module, so its one cluster serves every test (pytest-xdist, `make test`).
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster-faults")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    with proxied_cluster(tmp_path_factory.mktemp("cluster-faults")) as fs:
        yield fs


# CI's examples: the ingress node paused under an `any` whose held loser runs on; a node cut off
# while a first turn is in flight; a node wiped between turns under a Cancel race with a held call.
PAUSE = {
    "kind": "any",
    "children": ["call_fail", "tool_ok", "event_ok", "held_event"],
    "declared": "run_to_completion",
    "fail_fast": False,
    "stop_after": 0,
    "fault": "node_pause",
    "node": 0,
    "moment": "parked",
    "after_ms": 0,
    "emit_order": [2],
}
PARTITION = {
    "kind": "all_settled",
    "children": ["tool_ok", "call_ok", "event_reject", "event_ok"],
    "declared": "run_to_completion",
    "fail_fast": False,
    "stop_after": 2,
    "fault": "node_partition",
    "node": 1,
    "moment": "inflight",
    "after_ms": 30,
    "emit_order": [3, 2],
}
WIPE = {
    "kind": "race",
    "children": ["call_ok", "tool_slow", "held_call", "event_ok"],
    "declared": "cancel",
    "fail_fast": False,
    "stop_after": 0,
    "fault": "node_wipe",
    "node": 2,
    "moment": "between",
    "after_ms": 0,
    "emit_order": [3],
}


@pytest.mark.timeout(400 + 300 * RUNS)
@seed(20261204)
@matrix(RUNS)
@example(sc=PAUSE)
@given(sc=drawn(["node_pause"], nodes=3))
def test_a_paused_node_loses_nothing(cluster: FaultStack, sc: dict[str, Any]) -> None:
    run(cluster, sc)


@pytest.mark.timeout(400 + 300 * RUNS)
@seed(20261205)
@matrix(RUNS)
@example(sc=PARTITION)
@given(sc=drawn(["node_partition"], nodes=3))
def test_a_partitioned_node_loses_nothing(cluster: FaultStack, sc: dict[str, Any]) -> None:
    run(cluster, sc)


@pytest.mark.timeout(400 + 300 * RUNS)
@seed(20261206)
@matrix(RUNS)
@example(sc=WIPE)
@given(sc=drawn(["node_wipe"], nodes=3))
def test_a_wiped_node_loses_nothing(cluster: FaultStack, sc: dict[str, Any]) -> None:
    run(cluster, sc)
