"""Faults beyond SIGKILL, and the checks every fault is judged by (issue 23; docs/crash-matrix.md).

A fault is a process paused (SIGSTOP) past the server's inactivity and abort timeouts, then resumed;
a cluster node cut off from the other nodes and from the endpoint by the test's own network
(`lash_restate.testing.network`), then healed; a node whose partition store is deleted while it is
down (Restate's own Jepsen suite's "nuke partition state"), restarted to rebuild it from the
replicated log; and, for the soak, the SIGKILLs of the crash matrix. `FaultStack` lands them on a
`LocalStack`; `run_scenario` runs one drawn group across one and checks it.

What every scenario checks, whatever the fault:

- every rank served before the fault is served after it, and a fresh read from a cursor at 0 and the
  combinator resumed from its saved handle see the same child at every rank;
- every child that settles (a `RunToCompletion` loser included) takes exactly one rank;
- the verdict is ECMA-262's over the rank order (`test_crash_matrix.expected_verdict`);
- a loser still unsettled at the close (a "held" child, whose event comes only after it) is cancelled
  under an effective `Cancel`, and keeps running under `RunToCompletion` until its event comes;
- each side effect ran exactly once, or at least once where the fault landed inside work (a paused or
  killed process mid-call: Restate runs a `ctx.run` again when its attempt was abandoned), or once
  more per new leader a cluster's partition got while work ran (the new leader runs a `ctx.run` in
  flight again; a cluster's scenario starts once its nodes' logs show no such change for a few
  seconds, so only what lingers past that, an election or a node taking back what it led before a
  fault, can land there);
- once the group is closed and its losers have ended, nothing of it is left: no lash state and no
  unfinished invocation under its scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote as url_quote

import httpx

from lash_restate._http import tls
from lash_restate.inspection import InspectionError, quote, sql
from lash_restate.registration import register_deployment
from lash_restate.testing import LocalStack, RestateServer, free_port
from lash_restate.testing.network import LoopbackNetwork
from tests.conformance.builders import Scope, combine, event, fail, next_, ok, tool, use
from tests.engine.test_cluster import _node_config
from tests.engine.test_crash_matrix import KINDS, expected_verdict

# Restate gives up on a silent invocation after its inactivity timeout, asks it to suspend, and aborts
# it after the abort timeout; a pause outlasts both, so the paused attempt is abandoned and retried.
TIMEOUTS = {
    "RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT": "1s",
    "RESTATE_WORKER__INVOKER__ABORT_TIMEOUT": "1s",
}
PAUSE_S = 3.0  # a paused endpoint or single server: longer than both timeouts together
NODE_S = 6.0  # a paused or cut-off node: long enough for the others to take over its partitions

NODE_FAULTS = ["node_pause", "node_partition", "node_wipe", "node_kill"]  # node_kill: the soak's
MOMENTS = ["inflight", "parked", "between"]

CHILDREN = ["tool_ok", "tool_slow", "tool_fail", "call_ok", "call_fail", "event_ok", "event_reject"]
SUCCEEDS = ("tool_ok", "tool_slow", "call_ok", "event_ok")
REJECTS = ("tool_fail", "call_fail", "event_reject")
Rows = list[dict[str, Any]]
# A held loser's call sleeps this long: only a cancel ends it in time.
HELD_CALL_MS = 600_000


def scenario(rng: random.Random, faults: list[str], nodes: int = 1, *, wide: int = 0) -> dict[str, Any]:
    """A drawn group and the fault that lands on it (``rng`` is Hypothesis's under the matrix).

    A combinator over 2-5 children (tools and calls that settle on their own, events the test emits
    or rejects), its declared disposition (race and any: either; `all` may fail fast: narrow to
    `Cancel` at the close), maybe one held loser (an event emitted only after the close, or under an
    effective `Cancel` a call that sleeps ten minutes), how far the first turn consumes, the fault,
    where it lands and, for an in-flight fault, how many milliseconds into the first turn. With
    ``wide``, now and then an `all` or `allSettled` over that many tools instead.
    """
    kind = rng.choice(sorted(KINDS))
    if wide and rng.random() < 0.05:
        children = ["tool_ok"] * wide
        kind = rng.choice(["all", "all_settled"])
    else:
        children = [rng.choice(CHILDREN) for _ in range(rng.randint(2, 5))]
    declared = "cancel" if kind in ("race", "any") and rng.random() < 0.5 else "run_to_completion"
    fail_fast = kind == "all" and rng.random() < 0.5
    held = rng.choice([None, "held_event", "held_call"]) if not wide or len(children) < wide else None
    if held is not None:
        needed = {
            "race": False,
            "any": not any(c in SUCCEEDS for c in children),
            "all": not any(c in REJECTS for c in children),
            "all_settled": True,
        }[kind]
        cancels = declared == "cancel" or (fail_fast and not needed)
        if needed:
            held = "event_ok"  # the verdict needs it: an ordinary event, emitted with the others
        elif held == "held_call" and not cancels:
            held = "held_event"  # a ten-minute call must be cancelled to leave nothing behind
        children.insert(rng.randint(0, len(children)), held)
    events = [i for i, c in enumerate(children) if c.startswith("event")]
    settles_itself = len([c for c in children if c.startswith(("tool", "call"))])
    order = list(events)
    rng.shuffle(order)
    fault = rng.choice(faults) if faults else None
    return {
        "kind": kind,
        "children": children,
        "declared": declared,
        "fail_fast": fail_fast,
        "stop_after": rng.randint(0, settles_itself),
        "fault": fault,
        "node": rng.randrange(nodes) if fault in NODE_FAULTS else 0,
        "moment": rng.choice(MOMENTS),
        "after_ms": rng.randint(0, 80),
        "emit_order": order,
    }


@dataclass
class FaultStack:
    """A `LocalStack` with faults to land on it. A caller's turns go to the first node (the ingress
    node, faulted or not); events and the admin's queries to a node the current fault spares."""

    stack: LocalStack
    network: LoopbackNetwork | None = None
    pause_s: float = PAUSE_S
    node_s: float = NODE_S
    down: set[int] = field(default_factory=set)  # nodes under a fault now
    faults: list[dict[str, Any]] = field(default_factory=list)  # every fault landed, for the reports

    @property
    def nodes(self) -> list[RestateServer]:
        return self.stack.servers

    def spared(self) -> RestateServer:
        """A node no fault holds now (on one node, that node: its requests wait out the fault)."""
        return next((n for i, n in enumerate(self.nodes) if i not in self.down), self.nodes[0])

    async def post(
        self,
        path: str,
        body: Any,
        *,
        at: RestateServer | None = None,
        key: str | None = None,
        within: float = 300,
    ) -> Any:
        """POST to the ingress of ``at`` (default: the first node) and return its JSON answer.

        With an idempotency ``key``, an answer cut off by a fault is asked for again, of the node the
        fault spares: the same key attaches to the same invocation.
        """
        headers = {"idempotency-key": key} if key else {}
        async with asyncio.timeout(within), httpx.AsyncClient(verify=tls(), timeout=within) as client:
            node = at or self.nodes[0]
            while True:
                try:
                    response = await client.post(f"{node.ingress_url}/{path}", json=body, headers=headers)
                except httpx.TransportError:
                    if key is None:
                        raise
                else:
                    if response.status_code in (200, 202):  # 202: a send, accepted
                        return response.json() if response.content else None
                    if key is None or response.status_code < 500:
                        raise AssertionError(f"POST /{path} answered {response.status_code}: {response.text}")
                await asyncio.sleep(0.2)
                node = self.spared()

    async def turn(self, *steps: dict[str, Any], key: str, within: float = 300) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = await self.post("LashTurn/run", {"steps": list(steps)}, key=key)
        return results

    async def signal(self, name: str, handler: str, body: Any = None, *, send: bool = False) -> None:
        """`LashSignal/{name}/{handler}`, through a node the current fault spares; with ``send``, only
        until the server has accepted it (it runs when the endpoint can run it)."""
        path = f"LashSignal/{url_quote(name, safe='')}/{handler}" + ("/send" if send else "")
        await self.post(path, body, at=self.spared(), key=f"{handler}-{name}-{time.monotonic_ns()}")

    async def sql(self, query: str, within: float = 120) -> Rows:
        """The admin API's answer, from a node the current fault spares (asked again while a
        takeover leaves a partition without a leader for a moment)."""
        async with asyncio.timeout(within):
            while True:
                try:
                    return await asyncio.to_thread(sql, self.spared().admin_url, query, timeout=30)
                except InspectionError:
                    await asyncio.sleep(0.2)

    async def poll(self, query: str, done: Callable[[Rows], bool], within: float = 120) -> Rows:
        async with asyncio.timeout(within):
            while True:
                rows = await self.sql(query)
                if done(rows):
                    return rows
                await asyncio.sleep(0.1)

    @contextlib.asynccontextmanager
    async def fault(self, kind: str | None, node: int = 0) -> AsyncIterator[None]:
        """Land ``kind`` on the stack (``node`` of a cluster) for the block, and end it after: a pause
        or a cut lasts at least its duration, a restart until the node or server answers again."""
        began = time.monotonic()
        server = self.nodes[node]
        restart: asyncio.Task[Any] | None = None
        duration = 0.0
        landed: dict[str, Any] = {"kind": kind, "node": node, "at": time.time()}
        if kind is not None:
            self.faults.append(landed)
        held = self.network.held if self.network is not None else 0
        if kind == "endpoint_pause":
            self.stack.endpoint.pause()
            duration = self.pause_s
        elif kind in ("server_pause", "node_pause"):
            self.down.add(node)
            server.pause()
            duration = self.pause_s if kind == "server_pause" else self.node_s
        elif kind == "node_partition":
            assert self.network is not None, "a partition needs the stack's own network"
            self.down.add(node)
            self.network.isolate(node_name(node))
            duration = self.node_s
        elif kind in ("node_wipe", "node_kill", "server_kill"):
            self.down.add(node)
            server.kill()
            if kind == "node_wipe":
                wipe_partition_store(server)
            restart = asyncio.create_task(asyncio.to_thread(server.start, 120))
        elif kind is not None:
            raise AssertionError(f"no such fault: {kind}")
        try:
            yield
        finally:
            await asyncio.sleep(max(0.0, began + duration - time.monotonic()))
            if kind == "endpoint_pause":
                self.stack.endpoint.resume()
            elif kind in ("server_pause", "node_pause"):
                server.resume()
            elif kind == "node_partition" and self.network is not None:
                self.network.heal()
                landed["held"] = self.network.held - held  # what the cut stopped
            if restart is not None:
                await restart
            self.down.discard(node)


def node_name(index: int) -> str:
    return f"n{index + 1}"


def wipe_partition_store(server: RestateServer) -> None:
    """Delete the node's partition store (``<base>/<node>/db``): every partition it ran is rebuilt
    from the replicated log when it starts again. The log server's and the metadata server's data stay:
    a node that lost those is refused by Restate itself until an operator steps in (decision 60)."""
    store = server.base_dir / server.node_name / "db"
    assert store.is_dir(), f"no partition store at {store}"
    shutil.rmtree(store)


def pause_stack(tmp: Path) -> LocalStack:
    """One server (with short inactivity and abort timeouts) and one endpoint, started."""
    return LocalStack.single(tmp, server_env=TIMEOUTS).start()


@contextlib.contextmanager
def proxied_cluster(tmp: Path) -> Iterator[FaultStack]:
    """deploy/cluster's three nodes (replication 2) behind the test's own network, and one endpoint.

    Each node advertises its proxy, so every node reaches every other through the network, and the
    endpoint is registered by its proxy's URL, so every node's invoker reaches it through the network
    too; the test itself talks to the nodes' ingress and admin ports directly.
    """
    stack = LocalStack(tmp)

    def owners() -> dict[int, str]:
        named = [(node_name(i), s) for i, s in enumerate(stack.servers)] + [("endpoint", stack.endpoint)]
        return {p.pid: name for name, p in named if p.pid is not None}

    with LoopbackNetwork(owners) as network:
        fabric = [free_port() for _ in range(3)]

        def fabric_of(i: int) -> Callable[[], int]:
            return lambda: stack.servers[i].fabric_port

        advertised = [network.proxy(node_name(i), fabric_of(i)) for i in range(3)]
        ports = {
            "fabric": advertised,
            "admin": [free_port() for _ in range(3)],
            "ingress": [free_port() for _ in range(3)],
        }
        for i in range(3):
            stack.add_server(
                node_name(i),
                ingress_port=ports["ingress"][i],
                admin_port=ports["admin"][i],
                fabric_port=fabric[i],  # where it listens; its peers reach it at its proxy's port
                config_file=_node_config(i + 1, ports, tmp),
                node_name=node_name(i),
                env={**TIMEOUTS, "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{advertised[i]}/"},
            )
        endpoint = stack.add_endpoint()
        reach = network.proxy("endpoint", lambda: endpoint.port)
        with stack.start(register=False, server_timeout=120):
            register_deployment(stack.admin_url, f"http://127.0.0.1:{reach}", force=True)
            # Every node reaches the others through the network, and it knows who each one is.
            links = network.links
            assert all(node_name(i) in {s for s, t in links if t != s} for i in range(3)), links
            assert None not in {source for source, _ in links}, links
            assert any(target == "endpoint" for _, target in links), links  # the registration's discovery
            try:
                yield FaultStack(stack, network, node_s=NODE_S)
            finally:
                for server in stack.servers:
                    server.kill()  # its data goes with the stack: a graceful stop would only take longer


def _call(handler: str, arg: dict[str, Any]) -> dict[str, Any]:
    return {"type": "call", "service": "DemoCalls", "handler": handler, "arg": arg}


def _handle(key: str, count: int, consumed: int) -> str:
    return json.dumps({"group_key": key, "child_count": count, "consumed": consumed})


def _commands(s: Scope, specs: list[str]) -> tuple[list[dict[str, Any]], dict[int, str]]:
    names = {i: f"{s.id}-t{i}" for i, c in enumerate(specs) if c in ("tool_ok", "tool_slow", "call_ok")}
    commands = []
    for i, spec in enumerate(specs):
        if spec == "tool_ok":
            commands.append(tool("count", {"name": names[i], "value": i}))
        elif spec == "tool_slow":  # still running when an in-flight fault lands early
            commands.append(tool("count", {"name": names[i], "value": i, "delay_ms": 40}))
        elif spec == "tool_fail":
            commands.append(fail(f"fail-{i}"))
        elif spec == "call_ok":
            commands.append(_call("count", {"name": names[i], "value": i}))
        elif spec == "call_fail":
            commands.append(_call("fail", {"message": f"fail-{i}", "status": 409}))
        elif spec == "held_call":
            commands.append(_call("echo", {"value": i, "delay_ms": HELD_CALL_MS}))
        else:
            commands.append(event(s.event(f"e{i}")))
    return commands, names


def _child_runs(key: str, position: int) -> str:
    """A child's own invocations: its `LashChild` run, or the callee of a call lash makes itself, which
    carries the idempotency key `{replay key}@{incarnation}` (`engine/child/_calls.py` `callee_key`)."""
    replay_key = f"{key}/c{position}"
    return (
        "SELECT id, status FROM sys_invocation WHERE (target_service_name = 'LashChild' "
        "AND target_handler_name IN ('run', 'execute', 'execute2') "
        f"AND target_service_key = {quote(replay_key)}) "
        f"OR starts_with(idempotency_key, {quote(replay_key + '@')})"
    )


def _suspended(idempotency_key: str) -> str:
    return (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashTurn' AND status = 'suspended' "
        f"AND idempotency_key = {quote(idempotency_key)}"
    )


# A node's log line saying it became a partition's leader (so that partition's leader changed).
_NEW_LEADER = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})\d*Z.*Processor became Leader")
LEADERSHIP_QUIET_S = 4.0  # a cluster's scenario starts once no partition changed leader for this long


def leader_changes(fs: FaultStack) -> list[datetime]:
    """When a partition of ``fs``'s cluster got a new leader, by its nodes' logs (none on one server,
    whose leadership moves only with the faults that restart it)."""
    if len(fs.nodes) < 2:
        return []
    found = []
    for node in fs.nodes:
        if node.log_path is not None and node.log_path.exists():
            for line in node.log_path.read_bytes().splitlines():
                if (match := _NEW_LEADER.search(line)) is not None:
                    found.append(datetime.fromisoformat(match.group(1).decode()).replace(tzinfo=UTC))
    return found


def leader_changes_between(fs: FaultStack, since: datetime, until: datetime) -> int:
    return sum(since <= at <= until for at in leader_changes(fs))


async def leadership_quiet(fs: FaultStack, within: float = 30) -> bool:
    """Until no partition of the cluster has changed leader for `LEADERSHIP_QUIET_S` (elections at its
    start, a node taking back what it led before the last fault): whether it got so within ``within``
    seconds. A scenario's own work then rarely meets a change of leader it did not cause."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        latest = max(leader_changes(fs), default=None)
        if latest is None or (datetime.now(UTC) - latest).total_seconds() >= LEADERSHIP_QUIET_S:
            return True
        await asyncio.sleep(0.5)  # log lines another process writes: there is nothing to await
    return False


def _done(rows: list[dict[str, Any]]) -> bool:
    return bool(rows) and all(r["status"] == "completed" for r in rows)


async def run_scenario(fs: FaultStack, sc: dict[str, Any], *, alone: bool = True) -> dict[str, Any]:
    """Run ``sc`` on ``fs`` and check it (the module's list); what happened, for the report.

    ``alone``: nothing else runs on the stack, so any unfinished `DemoCalls` invocation is this
    scenario's, and a side effect runs more than once only where this scenario's own fault landed
    inside work. The soak runs many at once, with faults of its own that may land anywhere: it checks
    for leftovers once, after its drain, and side effects at least once. A scenario's ``park_s``
    leaves its group parked that long between the first turn and the resume.
    """
    s = Scope()
    quiet = await leadership_quiet(fs) if alone else True
    # From `began` to `work_ended` (the fault, if it lands between work) counted side effects may run.
    began = datetime.now(UTC)
    work_ended: datetime | None = None
    specs: list[str] = sc["children"]
    kind, fault, moment = sc["kind"], sc["fault"], sc["moment"]
    commands, names = _commands(s, specs)
    n = len(specs)
    group = s.group(commands, wake=KINDS[kind], disposition=sc["declared"])
    on_reject = "cancel" if sc["fail_fast"] else None
    held = [i for i, c in enumerate(specs) if c.startswith("held")]
    ranked = [i for i in range(n) if i not in held]  # the children that settle before the close

    async def deliver() -> None:
        # Sent, in the drawn order: accepted by the server even while the endpoint is stopped.
        for i in sc["emit_order"]:
            if specs[i] == "event_ok":
                await fs.signal(s.event(f"e{i}"), "emit", f"v{i}", send=True)
            else:
                await fs.signal(s.event(f"e{i}"), "reject", f"rejected-{i}", send=True)

    async def settled_itself() -> None:
        for i, spec in enumerate(specs):
            if spec.startswith(("tool", "call")):
                await fs.poll(_child_runs(s.key(), i), _done)

    first_step = combine(kind, group, stop_after=sc["stop_after"], on_reject=on_reject)
    first_key = f"first-{s.id}"
    delivered = False
    if moment == "inflight" and fault is not None:
        opening = asyncio.create_task(fs.turn(first_step, key=first_key))
        await asyncio.sleep(sc["after_ms"] / 1000)  # the drawn moment of the fault, not a synchronization
        async with fs.fault(fault, sc["node"]):
            pass
        [first] = await opening
    else:
        [first] = await fs.turn(first_step, key=first_key)
    before = ok(first)
    await asyncio.sleep(sc.get("park_s", 0))  # a continuation that resumes later, not a synchronization

    final_turn: list[dict[str, Any]] = []
    parked: asyncio.Task[list[dict[str, Any]]] | None = None
    if before["status"] == "suspended":
        # A re-read of every rank from a cursor saved at 0, then the combinator resumed from its handle.
        final = [
            use(_handle(s.key(), n, 0)),
            *[next_() for _ in ranked],
            combine(kind, group, handle=before["handle"], on_reject=on_reject),
        ]
        if moment == "inflight" or fault is None:
            await deliver()
            delivered = True
            final_turn = await fs.turn(*final, key=f"final-{s.id}")
        else:
            await settled_itself()  # the fault lands between work: no side effect is running
            work_ended = datetime.now(UTC)
            if moment == "parked" and sc["emit_order"]:
                parked = asyncio.create_task(fs.turn(*final, key=f"final-{s.id}"))
                # The re-read parks at the first rank not yet settled, and Restate suspends it there.
                await fs.poll(_suspended(f"final-{s.id}"), lambda rows: bool(rows) or parked.done())
            async with fs.fault(fault, sc["node"]):
                # While the fault lasts, through a node it spares (a lone server's answer waits it out).
                delivery = asyncio.create_task(deliver())
            await delivery
            delivered = True
            final_turn = await (parked or fs.turn(*final, key=f"final-{s.id}"))
    elif fault is not None and moment != "inflight":
        # Decided before the fault; the fault and the events that come during it must change nothing.
        # Between work here too: a loser the close is cancelling may still be inside its tool, and a
        # fault there makes its side effect at-least-once, as a kill mid-call does.
        await settled_itself()
        work_ended = datetime.now(UTC)
        async with fs.fault(fault, sc["node"]):
            delivery = asyncio.create_task(deliver())
        await delivery
        delivered = True
    if not delivered and not final_turn:
        await deliver()
    if fault == "node_partition":
        assert fs.faults[-1]["held"], "the partition cut no traffic"  # the harness, not lash

    if final_turn:
        [_, *read, last] = final_turn
        reads = [ok(r) for r in read]
        after = ok(last)
        order = [r["position"] for r in reads]
        assert [r["rank"] for r in reads] == list(range(1, len(ranked) + 1)), "a rank was skipped"
        assert order[: len(before["order"])] == before["order"], "a rank changed across the fault"
        assert sorted(order) == ranked, "a child settled more or less than once"  # losers included
        assert after["order"] == order[: len(after["order"])], "the resume and the re-read disagree"
        outcomes = {r["position"]: r["outcome"] for r in reads}
    else:
        after, outcomes = before, {}
    order = after["order"]
    assert len(order) == len(set(order)), "a settlement was served twice"
    status, witness = expected_verdict(kind, specs, order)
    assert after["status"] == status, f"ECMA-262 says {status} over {order}"
    if kind in ("all", "race") and status == "rejected":
        assert after["reason"]["position"] == witness, "the first consumed rejection moved"
    if kind == "all_settled" and outcomes:
        assert after["value"] == [outcomes[p] for p in range(n)], "allSettled's outcomes are not the ranks'"
    elif kind == "all" and status == "fulfilled" and outcomes:
        assert after["value"] == [outcomes[p]["value"] for p in range(n)]

    # The losers still unsettled at the close: cancelled under an effective Cancel, running otherwise.
    cancels = sc["declared"] == "cancel" or (sc["fail_fast"] and status == "rejected")
    for i in held:
        runs = _child_runs(s.key(), i)
        if cancels:
            try:
                await fs.poll(runs, _done, within=60)  # it ended without its event: the close cancelled it
            except TimeoutError:
                raise AssertionError(f"the Cancel loser {i} was not cancelled") from None
            if specs[i] == "held_call":
                await _assert_call_cancelled(fs, s.key(), i)
        else:
            assert not _done(await fs.sql(runs)), "a RunToCompletion loser was stopped"
    for i in held:
        await fs.signal(s.event(f"e{i}"), "emit", f"late-{i}")
    for i in held:
        await fs.poll(_child_runs(s.key(), i), _done)

    await settled_itself()
    counts = fs.stack.counts()
    # A partition's new leader runs a `ctx.run` in flight again: once more per change of leader.
    changes = leader_changes_between(fs, began, work_ended or datetime.now(UTC))
    inside = not alone or (fault is not None and moment == "inflight")
    for i, name in names.items():
        ran = counts.count(name)
        if cancels and not final_turn and i not in order:
            # Maybe cancelled before it ran.
            assert ran <= 1 + changes or inside, f"the side effect of child {i} ran {ran} times"
        elif inside:
            assert ran >= 1, f"the side effect of child {i} was lost"  # at-least-once mid-call
        else:
            assert 1 <= ran <= 1 + changes, f"child {i}'s side effect ran {ran} times, {changes} new leaders"
    for i, spec in enumerate(specs):
        if spec.startswith(("event", "held")):
            await fs.signal(s.event(f"e{i}"), "clear")
    left = await _left(fs, s.id, alone)
    assert not left, f"left after the close: {left}"
    return {
        "order": order,
        "status": status,
        "decided_first": before["status"] != "suspended",  # the first turn decided the combinator
        "parked": parked is not None,  # the fault found a resumed turn parked
        "leader_changes": changes,  # new partition leaders while counted side effects could run
        "leadership_quiet": quiet,  # the scenario started with the cluster's leadership settled
        "fault": fs.faults[-1] if fault else None,
    }


async def _assert_call_cancelled(fs: FaultStack, group_key: str, position: int) -> None:
    """The held call's own invocation ended cancelled (its child's cancellation reached it)."""
    replay_key = f"{group_key}/c{position}"
    query = (
        "SELECT c.status AS status, c.completion_failure AS failure FROM sys_invocation c "
        "LEFT JOIN sys_invocation p ON c.invoked_by_id = p.id WHERE c.target_service_name = 'DemoCalls' "
        # The callee lash calls itself, by its idempotency key; or one a `LashChild` called.
        f"AND (starts_with(c.idempotency_key, {quote(replay_key + '@')}) "
        f"OR p.target_service_key = {quote(replay_key)})"
    )
    # None at all: a `LashChild` cancelled before it made its call.
    rows = await fs.poll(query, lambda rows: all(r["status"] == "completed" for r in rows))
    assert all("cancel" in str(r["failure"]).lower() for r in rows), rows


async def _left(fs: FaultStack, scope: str, alone: bool, within: float = 120) -> list[dict[str, Any]]:
    """What is left of ``scope`` once its releases (one-way sends) have run: state and invocations."""
    like = quote(f"%{scope}%")
    state = (
        "SELECT service_name, service_key, key FROM state WHERE service_name IN "
        f"('LashGroup', 'LashChild', 'LashPump', 'LashSignal') AND service_key LIKE {like}"
    )
    running = (
        "SELECT target, status FROM sys_invocation WHERE status != 'completed' AND "
        f"(target_service_key LIKE {like} OR idempotency_key LIKE {like}"
        + (" OR target_service_name = 'DemoCalls')" if alone else ")")
    )
    rows: list[dict[str, Any]] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while True:
                rows = await fs.sql(state) + await fs.sql(running)
                if not rows:
                    break
                await asyncio.sleep(0.2)
    return rows
