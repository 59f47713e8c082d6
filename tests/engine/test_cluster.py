"""A three-node Restate cluster (deploy/cluster): SIGKILL one node mid-group, lose nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lash_restate.testing import LocalStack, free_port
from tests.conformance.builders import Scope, event, next_, ok, open_, save, tool, use

CLUSTER = Path(__file__).resolve().parents[2] / "deploy" / "cluster"

pytestmark = pytest.mark.cluster


def _node_config(i: int, ports: dict[str, list[int]], folder: Path) -> Path:
    """deploy/cluster/node{i}.toml with its fixed ports swapped for free ones."""
    text = (CLUSTER / f"node{i}.toml").read_text()
    for n in (1, 2, 3):
        text = text.replace(f"5{n}22", str(ports["fabric"][n - 1]))
        text = text.replace(f"9{n}70", str(ports["admin"][n - 1]))
        text = text.replace(f"8{n}80", str(ports["ingress"][n - 1]))
    path = folder / f"node{i}.toml"
    path.write_text(text)
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalStack]:
    ports = {kind: [free_port() for _ in range(3)] for kind in ("fabric", "admin", "ingress")}
    stack = LocalStack(tmp_path)
    for i in (1, 2, 3):
        stack.add_server(
            f"n{i}",
            ingress_port=ports["ingress"][i - 1],
            admin_port=ports["admin"][i - 1],
            fabric_port=ports["fabric"][i - 1],
            config_file=_node_config(i, ports, tmp_path),
            node_name=f"n{i}",
        )
    stack.add_endpoint()
    # The nodes start together (they need each other to form the metadata quorum); the endpoint
    # is registered with the first.
    with stack.start(server_timeout=120):
        assert all(node.process is not None and node.process.poll() is None for node in stack.servers)
        yield stack


# A hang guard only, the sum of this test's own bounds (the cluster's start, then five waits of 120 s),
# so a slow step on a busy machine reports itself instead of the suite's default guard (120 s, which
# the start alone may take there) cutting it short.
@pytest.mark.timeout(120 + 5 * 120 + 60)
async def test_a_node_killed_mid_group_loses_no_rank(cluster: LocalStack) -> None:
    s = Scope()
    gates = [s.event(f"g{i}") for i in range(3)]
    group = s.group([tool("count", {"name": f"{s.id}-t", "value": "t"}), *[event(g) for g in gates]])
    [_, first, saved] = await cluster.turn(open_(group), next_(), save(), within=120)
    cluster.servers[2].kill()  # SIGKILL node 3 mid-group
    for g in gates:
        await cluster.emit(g, g, within=120)
    [_, *rest] = await cluster.turn(use(ok(saved)), next_(), next_(), next_(), within=120)
    zero = json.dumps({"group_key": s.key(), "child_count": 4, "consumed": 0})
    [_, *again] = await cluster.turn(use(zero), *[next_() for _ in range(4)], within=120)
    assert [ok(r) for r in again] == [ok(first), *[ok(r) for r in rest]]
    assert sorted(ok(r)["position"] for r in again) == [0, 1, 2, 3]
    assert [ok(r)["rank"] for r in again] == [1, 2, 3, 4]
