"""A three-node Restate cluster (deploy/cluster): SIGKILL one node mid-group, lose nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lash_restate.devstack import Endpoint, RestateServer, free_port, register_deployment
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
def cluster(tmp_path: Path) -> Iterator[tuple[list[RestateServer], Endpoint]]:
    ports = {kind: [free_port() for _ in range(3)] for kind in ("fabric", "admin", "ingress")}
    nodes = []
    for i in (1, 2, 3):
        base = tmp_path / f"n{i}"
        base.mkdir()
        nodes.append(
            RestateServer(
                base_dir=base,
                ingress_port=ports["ingress"][i - 1],
                admin_port=ports["admin"][i - 1],
                fabric_port=ports["fabric"][i - 1],
                config_file=_node_config(i, ports, tmp_path),
                node_name=f"n{i}",
            )
        )
    endpoint = Endpoint(
        log_path=tmp_path / "endpoint.log", env={"LASH_COUNT_FILE": str(tmp_path / "counts.txt")}
    )
    try:
        # The nodes need each other to form the metadata quorum, so start them together.
        threads = [threading.Thread(target=node.start, kwargs={"timeout": 120}) for node in nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(node.process is not None and node.process.poll() is None for node in nodes)
        endpoint.start()
        register_deployment(nodes[0].admin_url, endpoint.url)
        yield nodes, endpoint
    finally:
        endpoint.stop()
        for node in nodes:
            node.stop()


async def _turn(ingress: str, *steps: dict[str, Any]) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=120) as client:
        response = await client.post(f"{ingress}/LashTurn/run", json={"steps": list(steps)})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_a_node_killed_mid_group_loses_no_rank(cluster: tuple[list[RestateServer], Endpoint]) -> None:
    nodes, _ = cluster
    ingress = nodes[0].ingress_url
    s = Scope()
    gates = [s.event(f"g{i}") for i in range(3)]
    group = s.group([tool("count", {"name": f"{s.id}-t", "value": "t"}), *[event(g) for g in gates]])
    [_, first, saved] = await _turn(ingress, open_(group), next_(), save())
    nodes[2].kill()  # SIGKILL node 3 mid-group
    async with httpx.AsyncClient(timeout=120) as client:
        for g in gates:
            response = await client.post(f"{ingress}/LashSignal/{g}/emit", json=g)
            assert response.status_code == 200, response.text
    [_, *rest] = await _turn(ingress, use(ok(saved)), next_(), next_(), next_())
    zero = json.dumps({"group_key": s.key(), "child_count": 4, "consumed": 0})
    [_, *again] = await _turn(ingress, use(zero), *[next_() for _ in range(4)])
    assert [ok(r) for r in again] == [ok(first), *[ok(r) for r in rest]]
    assert sorted(ok(r)["position"] for r in again) == [0, 1, 2, 3]
    assert [ok(r)["rank"] for r in again] == [1, 2, 3, 4]
