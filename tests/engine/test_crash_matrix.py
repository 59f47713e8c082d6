"""The crash matrix: real processes SIGKILLed at chosen points, every rank served identically after.

Hypothesis draws a combinator, its children (tools and Restate calls that settle on their own, some
slowly, events the test emits or rejects), how far a first turn consumes, where the crash lands, and
the order the remaining events arrive in. A crash lands between work (the endpoint while a resumed
turn is parked, the endpoint or the server between turns) or inside it: the endpoint or the server
SIGKILLed a drawn number of milliseconds into the first turn, wherever that finds the group's open,
a child's tool, a settle, the pump or the caller. Every run checks: the ranks served before the
crash are the ranks served after; no settlement lost or served twice; the verdict is the one
ECMA-262 gives for the observed rank order (so `all`'s first-consumed rejection is stable). Each
side effect ran exactly once, except where the crash landed inside work: a tool whose process dies
mid-call runs again on the retry (Restate's `ctx.run` is at-least-once until its result is
journaled), so there it ran at least once.

A wide case (`test_a_wide_group_keeps_its_ranks_across_an_endpoint_kill_mid_group`) SIGKILLs the
endpoint while a group of `WIDE` children, settling through several pumps (decision 35), is half
ranked.

CI runs a seeded sample; ``LASH_CRASH_RUNS=300`` runs the full matrix. Each run appends a line
to ``$LASH_CRASH_REPORT`` (if set) so the count of runs and divergences can be recorded.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from lash_restate._http import tls
from lash_restate.inspection import quote
from tests.conformance.builders import Scope, combine, event, fail, ok, tool
from tests.engine.conftest import Stack, private_stack
from tests.engine.test_engine import _poll, _wait_run_completed, has_waiter, waiters_query

RUNS = int(os.environ.get("LASH_CRASH_RUNS", "10"))
# The wide case's children: more than two pump slices of 256 (decision 35).
WIDE = int(os.environ.get("LASH_CRASH_WIDE", "600"))
KINDS = {"all": "all", "all_settled": "all", "race": "first", "any": "first_success"}

pytestmark = [pytest.mark.crash, pytest.mark.slow]


@pytest.fixture(scope="module")
def crash_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with private_stack(tmp_path_factory.mktemp("crash")) as stack:
        yield stack


@pytest.fixture(scope="module")
def crash_stack_v7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The same, on a server with the newest service protocol (`experimental-enable-protocol-v7`)."""
    v7 = {"RESTATE_EXPERIMENTAL_ENABLE_PROTOCOL_V7": "true"}
    with private_stack(tmp_path_factory.mktemp("crash-v7"), server_env=v7) as stack:
        yield stack


# Tools, Restate calls (decision 37: `DemoCalls/count` witnesses its side effect as the `count` tool
# does), and events the test emits or rejects.
child_spec = st.sampled_from(
    ["tool_ok", "tool_slow", "tool_fail", "call_ok", "call_fail", "event_ok", "event_reject"]
)
RUNS_ITSELF = ("tool", "call")  # children that settle on their own, without the test
BETWEEN = ["endpoint_parked", "endpoint_idle", "server_idle"]
INSIDE = ["endpoint_inflight", "server_inflight"]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    children = draw(st.lists(child_spec, min_size=2, max_size=5))
    events = [i for i, c in enumerate(children) if c.startswith("event")]
    return {
        "kind": draw(st.sampled_from(sorted(KINDS))),
        "children": children,
        "stop_after": draw(st.integers(min_value=0, max_value=len(children) - len(events))),
        "crash": draw(st.sampled_from(BETWEEN + INSIDE)),
        "kill_after_ms": draw(st.integers(min_value=0, max_value=80)),  # used by the in-flight crashes
        "emit_order": draw(st.permutations(events)),
    }


def expected_verdict(kind: str, specs: list[str], order: list[int]) -> tuple[str, Any]:
    """ECMA-262 over the observed rank order (the oracle)."""
    ok_at = [not specs[p].endswith(("fail", "reject")) for p in order]
    if kind == "all":
        for position, fine in zip(order, ok_at, strict=True):
            if not fine:
                return "rejected", position
        return "fulfilled", None
    if kind == "all_settled":
        return "fulfilled", None
    if kind == "race":
        return ("fulfilled" if ok_at[0] else "rejected"), order[0]
    for position, fine in zip(order, ok_at, strict=True):
        if fine:
            return "fulfilled", position
    return "rejected", None


async def run_scenario(stack: Stack, sc: dict[str, Any]) -> None:
    s = Scope()
    specs: list[str] = sc["children"]
    names = {i: f"{s.id}-t{i}" for i, c in enumerate(specs) if c in ("tool_ok", "tool_slow", "call_ok")}
    commands = []
    for i, spec in enumerate(specs):
        if spec == "tool_ok":
            commands.append(tool("count", {"name": names[i], "value": i}))
        elif spec == "tool_slow":  # still running when an early in-flight crash lands
            commands.append(tool("count", {"name": names[i], "value": i, "delay_ms": 40}))
        elif spec == "tool_fail":
            commands.append(fail(f"fail-{i}"))
        elif spec == "call_ok":
            commands.append(_call("count", {"name": names[i], "value": i}))
        elif spec == "call_fail":
            commands.append(_call("fail", {"message": f"fail-{i}", "status": 409}))
        else:
            commands.append(event(s.event(f"e{i}")))
    group = s.group(commands, wake=KINDS[sc["kind"]])

    first_turn = combine(sc["kind"], group, stop_after=sc["stop_after"])
    if sc["crash"] in INSIDE:
        before = await _crash_inside(stack, sc, first_turn, s.id)
    else:
        [first] = await stack.turn(first_turn)
        before = ok(first)
    for i, spec in enumerate(specs):
        if spec.startswith(RUNS_ITSELF):
            await _wait_run_completed(stack, f"{s.key()}/c{i}")

    async def deliver() -> None:
        for i in sc["emit_order"]:
            name = s.event(f"e{i}")
            if specs[i] == "event_ok":
                await stack.emit(name, f"v{i}")
            else:
                await stack.reject(name, f"rejected-{i}")

    after: dict[str, Any]
    if before["status"] != "suspended":
        after = before  # decided before any crash; the crash below must not disturb anything
        stack.restart_endpoint()
    elif sc["crash"] in INSIDE:
        await deliver()  # crashed already, inside the first turn
        [resumed] = await stack.turn(combine(sc["kind"], group, handle=before["handle"]))
        after = ok(resumed)
    elif sc["crash"] == "endpoint_parked" and sc["emit_order"]:
        async with asyncio.TaskGroup() as tasks:
            parked = tasks.create_task(stack.turn(combine(sc["kind"], group, handle=before["handle"])))
            # The resumed turn parks on its awakeable, unless a settled child already decides it.
            await _poll(stack, waiters_query(s.key()), lambda rows: has_waiter(rows) or parked.done())
            stack.restart_endpoint()  # SIGKILL while the resumed turn waits on its awakeable
            await deliver()
        [parked_result] = parked.result()
        after = ok(parked_result)
    else:
        if sc["crash"] == "server_idle":
            await asyncio.to_thread(stack.restart_server)
        else:
            stack.restart_endpoint()
        await deliver()
        [resumed] = await stack.turn(combine(sc["kind"], group, handle=before["handle"]))
        after = ok(resumed)

    order: list[int] = after["order"]
    assert order[: len(before["order"])] == before["order"], "a rank changed across the crash"
    assert len(order) == len(set(order)), "a settlement was served twice"
    status, witness = expected_verdict(sc["kind"], specs, order)
    assert after["status"] == status
    if sc["kind"] in ("all", "race") and status == "rejected":
        assert after["reason"]["position"] == witness  # the first consumed rejection is stable
    if status == "fulfilled" and sc["kind"] == "all_settled":
        assert len(after["value"]) == len(specs)
    await _poll(stack, "SELECT 1", lambda _: True)
    counts = stack.counts()
    for i, name in names.items():
        ran = counts.count(name)
        if sc["crash"] in INSIDE:
            assert ran >= (specs[i] != "tool_fail"), "a side effect was lost"  # at-least-once mid-call
        else:
            assert ran == (specs[i] != "tool_fail"), "a side effect was lost or ran twice"


def _call(handler: str, arg: dict[str, Any]) -> dict[str, Any]:
    return {"type": "call", "service": "DemoCalls", "handler": handler, "arg": arg}


async def _crash_inside(stack: Stack, sc: dict[str, Any], step: dict[str, Any], key: str) -> dict[str, Any]:
    """Run the first turn and SIGKILL the endpoint or the server ``kill_after_ms`` into it.

    The kill lands wherever the turn is: the group's open, a child's tool, a settle, the pump. The
    turn is an idempotent request (its key is the scenario's), so after a server crash the same
    request attaches to the same invocation and returns its result.
    """
    url = f"{stack.ingress_url}/LashTurn/run"
    body, headers = {"steps": [step]}, {"idempotency-key": f"first-{key}"}
    async with httpx.AsyncClient(verify=tls(), timeout=90) as client:
        first = asyncio.create_task(client.post(url, json=body, headers=headers))
        await asyncio.sleep(sc["kill_after_ms"] / 1000)  # the drawn crash moment, not a synchronization
        if sc["crash"] == "server_inflight":
            await asyncio.to_thread(stack.restart_server)
        else:
            await asyncio.to_thread(stack.restart_endpoint)
        return await _answer(client, first, url, body, headers)


async def _answer(
    client: httpx.AsyncClient,
    first: asyncio.Task[httpx.Response],
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
) -> dict[str, Any]:
    """The turn's one answer: from the request made before the crash, or, if the crash cut it off,
    by sending the same idempotent request again, which attaches to the same turn."""
    try:
        response = await first
    except httpx.TransportError:
        response = await client.post(url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    [answer] = response.json()
    result: dict[str, Any] = ok(answer)
    return result


def _report(line: dict[str, Any]) -> None:
    path = os.environ.get("LASH_CRASH_REPORT")
    if path:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def _matrix(runs: int) -> settings:
    return settings(
        max_examples=runs,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: a failing scenario is reported as drawn
    )


@pytest.mark.timeout(60 + 30 * RUNS)
@seed(20261130)
@_matrix(RUNS)
@given(sc=scenarios())
def test_crash_matrix(crash_stack: Stack, sc: dict[str, Any]) -> None:
    _run(crash_stack, sc)


V7_RUNS = max(1, RUNS // 2)


@pytest.mark.timeout(60 + 30 * V7_RUNS)
@seed(20261201)
@_matrix(V7_RUNS)
@given(sc=scenarios())
def test_crash_matrix_on_protocol_v7(crash_stack_v7: Stack, sc: dict[str, Any]) -> None:
    _run(crash_stack_v7, {**sc, "protocol": "v7"})


def _run(stack: Stack, sc: dict[str, Any]) -> None:
    try:
        asyncio.run(asyncio.wait_for(run_scenario(stack, sc), 120))
    except AssertionError as divergence:
        _report({"scenario": sc, "divergence": str(divergence)})
        raise
    _report({"scenario": sc, "divergence": None})


def _ranked(rows: list[dict[str, Any]]) -> list[int]:
    """The positions in rank order that the group's state records: in ``meta`` (4-byte little-endian
    each), or, for a group paged by decision 65, in its ``ranks:{j}`` pages and its ``ranked`` tail."""
    by_key = {row["key"]: row["value_utf8"] for row in rows if row["value_utf8"]}
    if "meta" not in by_key:
        return []
    order = base64.b64decode(json.loads(by_key["meta"]).get("order", ""))
    inline = [position for (position,) in struct.iter_unpack("<I", order)]
    if inline or "ranked" not in by_key:
        return inline
    tail: dict[str, Any] = json.loads(by_key["ranked"])
    pages: list[list[int]] = [json.loads(by_key[f"ranks:{j}"]) for j in range(tail.get("pages", 0))]
    last: list[int] = tail.get("tail", [])
    return [position for page in pages for position in page] + last


def _ranks_query(group_key: str) -> str:
    return (
        "SELECT key, value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(group_key)} "
        "AND (key = 'meta' OR key = 'ranked' OR starts_with(key, 'ranks:'))"
    )


async def run_wide(stack: Stack, ranked: int) -> dict[str, Any]:
    """An `all` over WIDE counting tools and one event, SIGKILLed once ``ranked`` ranks are recorded.

    The event holds the group open until after the kill, so the kill lands mid-group whatever the
    machine's speed: ranks recorded, others in flight or not yet run. The turn is an idempotent
    request, so the caller's retry after the kill attaches to the same invocation.
    """
    s = Scope()
    names = [f"{s.id}-w{i}" for i in range(WIDE)]
    commands = [tool("count", {"name": name, "value": i}) for i, name in enumerate(names)]
    group = s.group([*commands, event(s.event("gate"))], wake="all")
    url = f"{stack.ingress_url}/LashTurn/run"
    body, headers = {"steps": [combine("all", group)]}, {"idempotency-key": f"wide-{s.id}"}
    async with httpx.AsyncClient(verify=tls(), timeout=300) as client:
        first = asyncio.create_task(client.post(url, json=body, headers=headers))
        ranks = _ranks_query(s.key())
        rows = await _poll(stack, ranks, lambda rows: len(_ranked(rows)) >= ranked, within=240)
        await asyncio.to_thread(stack.restart_endpoint)  # SIGKILL mid-group
        before = _ranked(rows)
        await stack.emit(s.event("gate"), "opened")
        after = await _answer(client, first, url, body, headers)
    order: list[int] = after["order"]
    assert order[: len(before)] == before, "a rank changed across the crash"
    assert sorted(order) == list(range(WIDE + 1)), "a settlement was lost or served twice"
    assert after["status"] == "fulfilled"
    assert after["value"] == [*range(WIDE), "opened"]
    counts = stack.counts()
    missing = [name for name in names if name not in counts]
    assert not missing, f"a side effect was lost: {missing[:5]}"  # at-least-once: the kill was mid-call
    return {"children": WIDE + 1, "ranked_before_kill": len(before)}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("ranked", [1, WIDE // 2], ids=["first-rank", "half-ranked"])
def test_a_wide_group_keeps_its_ranks_across_an_endpoint_kill_mid_group(
    crash_stack: Stack, ranked: int
) -> None:
    try:
        line = asyncio.run(asyncio.wait_for(run_wide(crash_stack, ranked), 540))
    except AssertionError as divergence:
        _report({"scenario": {"wide": WIDE}, "divergence": str(divergence)})
        raise
    _report({"scenario": {"wide": WIDE, **line}, "divergence": None})
