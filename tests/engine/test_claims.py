"""Restate-host proofs of ADR claims the shared conformance scenarios cannot reach.

Each test drives real handlers (the `LashTurn` driver) and reads what Restate itself records (its
`state` and `sys_invocation` tables through the admin API), and each fails if the code it names
is broken: a retry that reuses an executor, a refusal that strips membership or records a group, a
rank given twice to one child, a close that leaves state or a loser behind, or waits for a loser.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import httpx
import msgspec
import pytest

from lash_restate._http import tls
from lash_restate.engine import CHILD, GROUP, PUMP, SIGNAL, named
from lash_restate.engine.group._mode import PUMP_SLICE
from lash_restate.engine.group._mode_stores import slice_key
from lash_restate.engine.wire._errors import HANDLER_RETRY
from lash_restate.inspection import quote, show_group, sql
from lash_restate.testing import TURN, LocalStack, StackError
from tests.conformance.builders import (
    Scope,
    close,
    echo,
    err,
    event,
    next_,
    ok,
    open_,
    save,
    sleep,
    supports,
    tool,
    use,
)
from tests.engine.conftest import Stack
from tests.engine.test_engine import recorded_meta
from tests.engine.test_operator import group_events

# A group this wide settles through one pump (decision 20); narrower ones of tools settle child by
# child (a narrower one with a call child through a pump as well: decision 61).
PATHS = {"direct": 2, "batched": 3}


def _widened(s: Scope, children: list[dict[str, Any]], width: int) -> list[dict[str, Any]]:
    """``children`` padded with never-settling waits up to ``width`` (so to the wanted path)."""
    return children + [event(s.event(f"pad{i}")) for i in range(width - len(children))]


async def _sql(stack: LocalStack, query: str) -> list[dict[str, Any]]:
    return await asyncio.to_thread(sql, stack.admin_url, query)


async def _poll(stack: LocalStack, query: str, done: Any, within: float = 30) -> list[dict[str, Any]]:
    async with asyncio.timeout(within):
        while True:
            rows = await _sql(stack, query)
            if done(rows):
                return rows
            await asyncio.sleep(0.05)


def _group_state(group_key: str) -> str:
    return f"SELECT key FROM state WHERE service_name = 'LashGroup' AND service_key = {quote(group_key)}"


def _stores(group_key: str, replay_keys: list[str]) -> str:
    """Every outcome store a group's children could leave: their `LashChild` rows and the group's pump."""
    keys = ", ".join(quote(k) for k in replay_keys)
    return (
        "SELECT service_name, service_key, key FROM state WHERE "
        f"(service_name = 'LashChild' AND service_key IN ({keys})) OR "
        f"(service_name = 'LashPump' AND ends_with(service_key, {quote(':' + group_key)}))"
    )


# An invocation Restate has not started yet, so not pinned to a deployment.
UNSTARTED = ("pending", "scheduled", "ready")


def _unfinished(group_key: str, replay_keys: list[str]) -> str:
    """Invocations of the group, its children or its pump that have not completed."""
    keys = ", ".join(quote(k) for k in replay_keys)
    return (
        "SELECT target_service_name AS service, target_handler_name AS handler, status "
        "FROM sys_invocation WHERE status != 'completed' AND ("
        f"(target_service_name = 'LashGroup' AND target_service_key = {quote(group_key)}) OR "
        f"(target_service_name = 'LashChild' AND target_service_key IN ({keys})) OR "
        f"(target_service_name = 'LashPump' AND ends_with(target_service_key, {quote(':' + group_key)})))"
    )


def _runs(replay_key: str) -> str:
    return (
        "SELECT id, status, completion_result, completion_failure, pinned_deployment_id "
        "FROM sys_invocation WHERE target_service_name = 'LashChild' "
        "AND target_handler_name IN ('run', 'execute', 'execute2') "
        f"AND target_service_key = {quote(replay_key)}"
    )


def _flaky(name: str, failures: int, value: Any) -> dict[str, Any]:
    return tool("flaky", {"name": name, "failures": failures, "value": value})


# -- D5 / D9: a retry runs a freshly resolved executor ------------------------------------------


@pytest.mark.parametrize("path", PATHS)
async def test_a_transient_fault_is_retried_with_a_fresh_executor_each_attempt(
    restate_stack: LocalStack, path: str
) -> None:
    """ADR: each executor is single-execution and a retry resolves a fresh one through the resolver.

    The `flaky` tool fails twice, then succeeds: three attempts ran (the count file holds one line
    per attempt) and the child settles Ok. An executor reused across attempts would refuse to run
    again ("an executor runs once"), and the child would give up instead. A tool that keeps failing
    gives up after the bounded attempts, with each attempt run once.
    """
    stack, s = restate_stack, Scope()
    healed, broken = f"{s.id}-healed", f"{s.id}-broken"
    group = s.group(_widened(s, [_flaky(healed, 2, "third time"), _flaky(broken, 99, None)], PATHS[path]))
    [_, first, second] = await stack.turn(open_(group), next_(), next_())
    outcomes = {ok(r)["position"]: ok(r)["outcome"] for r in (first, second)}
    assert outcomes[0] == {"type": "ok", "value": "third time"}
    assert outcomes[1]["type"] == "err" and outcomes[1]["code"] == "retries_exhausted"
    # The whole message, worded by the contract as on the reference host (memory/test_host.py).
    assert outcomes[1]["message"] == "gave up after 3 attempts: RuntimeError: transient fault 3 of 99"
    assert stack.counts().count(healed) == 3
    assert stack.counts().count(broken) == 3


# -- C4, D1, D2: refusals on a Restate controller ----------------------------------------------


async def test_execute_effect_refuses_a_grouped_envelope_and_runs_an_ungrouped_one(
    restate_stack: LocalStack,
) -> None:
    """ADR: a grouped child reaching a path with no membership slot is a typed refusal, never a strip.

    The refused envelope does not run (its `count` side effect never happens) and nothing of its
    group is recorded; the same command without membership runs once, through the caller's journal.
    """
    stack, s = restate_stack, Scope()
    refused_name, ran_name = f"{s.id}-grouped", f"{s.id}-plain"
    membership = {"group_key": s.key(), "position": 0, "wake": "all", "disposition": "run_to_completion"}
    grouped = {
        "command": tool("count", {"name": refused_name, "value": 1}),
        "replay_key": f"{s.key()}/c0",
        "membership": membership,
    }
    plain = {"command": tool("count", {"name": ran_name, "value": 7}), "replay_key": f"{s.id}/plain"}
    [refusal, ran] = await stack.turn(
        {"type": "execute", "envelope": grouped}, {"type": "execute", "envelope": plain}
    )
    assert err(refusal) == {
        "code": "membership_unsupported",
        "message": "execute_effect has no slot for group membership; open a group instead",
        "group_key": s.key(),
        "position": 0,
        "replay_key": f"{s.key()}/c0",
    }
    assert ok(ran) == {"type": "ok", "value": 7}
    assert stack.counts().count(ran_name) == 1
    assert refused_name not in stack.counts()
    assert await _sql(stack, _group_state(s.key())) == []
    assert await _sql(stack, _runs(f"{s.key()}/c0")) == []


async def test_a_restate_controller_without_a_resolver_refuses_the_whole_surface(
    restate_stack: LocalStack,
) -> None:
    """ADR: `supports_effect_groups()` is "a resolver is registered"; a controller answering false
    refuses open, await and close alike with `EffectGroupUnsupported` and journals nothing.

    The same turn on a controller built with the endpoint's resolver answers true and runs.
    """
    stack, s = restate_stack, Scope()
    name = f"{s.id}-never"
    group = s.group([tool("count", {"name": name, "value": 1})])
    handle = json.dumps({"group_key": s.key(), "child_count": 1, "consumed": 0})
    steps = [supports(), open_(group), use(handle), next_(), close()]
    unwired = await stack.call(f"{TURN}/run", {"steps": steps, "groups": False})
    [answer, opened, _, awaited, closed] = unwired
    assert ok(answer) is False
    for refused in (opened, awaited, closed):
        assert err(refused)["code"] == "effect_group_unsupported"
        assert err(refused)["group_key"] == s.key()
    # Nothing was recorded or dispatched: no group row, no child invocation, no side effect.
    assert await _sql(stack, _group_state(s.key())) == []
    assert await _sql(stack, _runs(f"{s.key()}/c0")) == []
    assert name not in stack.counts()
    [wired, _, settled, _] = await stack.turn(supports(), open_(group), next_(), close())
    assert ok(wired) is True
    assert ok(settled)["outcome"] == {"type": "ok", "value": 1}


# -- S3 / F1: a child settling twice takes one rank ---------------------------------------------


@pytest.mark.parametrize("path", [*PATHS, "paged"])
async def test_a_settlement_delivered_twice_takes_one_rank(restate_stack: LocalStack, path: str) -> None:
    """ADR: settlement is idempotent on the child: one terminal, one rank, however often it is sent.

    Child 0 settles and takes rank 1; its settlement is then delivered to the group again from inside
    Restate (as a sender retrying it would: `LashTurn/resettle`), in the wire form its path uses: a
    group wider than one slice keeps its ranks in pages, and takes it as a pump's `report`. The
    next child to settle still takes rank 2, and no rank ever names child 0 twice.
    """
    stack, s = restate_stack, Scope()
    gate = s.event("gate")
    width = PUMP_SLICE + 1 if path == "paged" else PATHS[path]
    group = s.group(_widened(s, [echo("first"), event(gate)], width))
    [_, first, saved] = await stack.turn(open_(group), next_(), save())
    assert ok(first)["position"] == 0
    recorded = await recorded_meta(stack, s.key())
    assert recorded["mode"] == ("direct" if path == "direct" else "pumped")
    assert recorded["incarnation"].startswith("p-") == (path == "paged")
    again: dict[str, Any] = {
        "incarnation": recorded["incarnation"],
        "refs": [{"position": 0, "replay_key": f"{s.key()}/c0"}],
    }
    if path != "paged":
        again["mode"] = recorded["mode"]
    handler = "report" if path == "paged" else "settle"
    for _ in range(2):
        await stack.call(f"{TURN}/resettle", {"group_key": s.key(), "batch": again, "handler": handler})
    await stack.emit(gate, "second")
    [_, second, _] = await stack.turn(use(ok(saved)), next_(), close())
    assert (ok(second)["rank"], ok(second)["position"]) == (2, 1)
    assert ok(second)["outcome"] == {"type": "ok", "value": "second"}


# -- S3: a settlement naming no child of the group is refused, and ranks nothing -----------------


@pytest.mark.parametrize("path", [*PATHS, "paged"])
async def test_a_settlement_naming_no_child_is_refused_and_ranks_nothing(
    restate_stack: LocalStack, path: str
) -> None:
    """ADR: the single writer ranks its own group's children. A batch naming an unsettled child of the
    group and then the position just past its width reaches the group from inside Restate
    (`LashTurn/resettle`: to `settle`, or to `report` for a group wider than one slice, which keeps
    its ranks in pages, with an awakeable to listen on); the group refuses the whole batch with a
    terminal `invalid_settlement`, naming the group and the position, before it writes anything: the
    unsettled child is not ranked, the report's awakeable is not kept, and that child takes rank 2
    when it settles.
    """
    stack, s = restate_stack, Scope()
    gate = s.event("gate")
    width = PUMP_SLICE + 1 if path == "paged" else PATHS[path]
    group = s.group(_widened(s, [echo("first"), event(gate)], width))
    [_, first, saved] = await stack.turn(open_(group), next_(), save())
    assert (ok(first)["rank"], ok(first)["position"]) == (1, 0)
    recorded = await recorded_meta(stack, s.key())
    assert recorded["incarnation"].startswith("p-") == (path == "paged")
    refs = [
        {"position": 1, "replay_key": f"{s.key()}/c1"},  # the gate's child: not settled yet
        {"position": width, "replay_key": f"{s.key()}/c{width}"},
    ]
    batch: dict[str, Any] = {"incarnation": recorded["incarnation"], "refs": refs}
    if path == "paged":
        batch["listen"] = "not-an-awakeable"
    else:
        batch["mode"] = recorded["mode"]
    link = (
        "SELECT value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(s.key())} AND key = 'pump'"
    )
    before = await _sql(stack, link)
    assert len(before) == (0 if path == "direct" else 1)  # a pumped group's pump listens on it
    handler = "report" if path == "paged" else "settle"
    with pytest.raises(StackError, match="invalid_settlement") as refused:
        await stack.call(f"{TURN}/resettle", {"group_key": s.key(), "batch": batch, "handler": handler})
    answer = json.loads(str(refused.value).split(": ", 1)[1])["message"]
    wire = json.loads(answer.removeprefix("lash-error:"))
    assert (wire["group_key"], wire["position"]) == (s.key(), width)  # it names the group and the child
    assert await _sql(stack, link) == before  # a pumped group's link to its pump, untouched
    await stack.emit(gate, "second")
    [_, second, _] = await stack.turn(use(ok(saved)), next_(), close())
    assert (ok(second)["rank"], ok(second)["position"]) == (2, 1)


async def test_a_read_of_outcomes_that_a_close_overtook_is_refused_naming_the_group(
    restate_stack: LocalStack,
) -> None:
    """A caller's bulk read of a pumped group's outcomes that its close overtook (the pump released
    what it kept) is refused with `group_not_open` naming the group and the pump whose store holds
    nothing, which the caller raises typed.
    The race made deterministic: the read is asked of the pump, from inside Restate, once the close
    has released its store."""
    stack, s = restate_stack, Scope()
    group = s.group([echo("a"), echo("b"), echo("c")])  # three: pumped
    [_, *read, saved] = await stack.turn(open_(group), next_(), next_(), next_(), save())
    assert sorted(ok(r)["position"] for r in read) == [0, 1, 2]
    recorded = await recorded_meta(stack, s.key())
    pump = slice_key(s.key(), recorded["incarnation"], 0)
    ask = {"group_key": s.key(), "batch": [0], "handler": "outcomes", "pump_key": pump}
    wire = await _read_once_closed(stack, saved, ask, "LashPump", pump)
    assert wire["group_key"] == s.key()
    # Said as what it may also be: the store deleted outside lash (`restate state clear` of the pump).
    assert f"the outcome store of {pump} was deleted: child 0 has no stored outcome" in wire["message"]


# -- R7 / S5: close deletes the whole group, idempotently, and awaits no loser ------------------


@pytest.mark.parametrize("disposition", ["run_to_completion", "cancel"])
@pytest.mark.parametrize("path", PATHS)
async def test_close_deletes_every_state_key_of_the_group(
    restate_stack: LocalStack, path: str, disposition: str
) -> None:
    """ADR: close deletes the object's state; retirement is group-atomic.

    Not only the hot record: the fence and the recorded invocation ids go in the same step, so once
    inspection stops listing the group, no key of it is left.
    """
    stack, s = restate_stack, Scope()
    group = s.group(_widened(s, [echo("won")], PATHS[path]), wake="first", disposition=disposition)
    [_, won, _] = await stack.turn(open_(group), next_(), save())
    assert ok(won)["position"] == 0
    # The save is recorded under `savers` (decision 78), and how the turn ended under `opener_ends`
    # (decision 45; a Cancel group's own watch records it in `meta` instead).
    # What it dispatched is watched (`watches`: decision 74), and the wakes its open registered are
    # guarded (`guarded`: decision 83).
    keys = {"meta", "fence", "invocations", "watches", "guarded", "savers"} | (
        {"opener_ends"} if disposition != "cancel" else set()
    )
    if path == "batched":
        keys.add("pump")  # the awakeable its pump listens on for the close (decision 61)
    rows = await _poll(stack, _group_state(s.key()), lambda rows: len(rows) == len(keys))
    assert {r["key"] for r in rows} == keys  # what there is to delete
    [_, closed] = await stack.turn(open_(group), close())
    assert ok(closed) is None
    # The close is a message sent by its opener (decision 21): wait until the hot record is gone…
    await _poll(stack, _group_state(s.key()) + " AND key = 'meta'", lambda rows: rows == [])
    # … and it went with everything else of the group, in the same step.
    assert await _sql(stack, _group_state(s.key())) == []


@pytest.mark.parametrize("path", PATHS)
async def test_a_redriven_close_of_a_cancel_group_leaves_nothing_behind(
    restate_stack: LocalStack, path: str
) -> None:
    """ADR: "a redriven close re-issues the same idempotent cancels harmlessly".

    A `Cancel` group with unsettled children is closed, closed again in the same invocation, and
    closed once more by a fresh invocation restoring the saved handle (the crash-between-close-and-
    save case). Every close answers, and afterwards nothing of the group is left: no state row of
    the group, no outcome store of a child (or of the pump), no invocation of them still running.
    """
    stack, s = restate_stack, Scope()
    children = [echo("won"), sleep(600_000), event(s.event("never"))][: PATHS[path]]
    group = s.group(children, wake="first", disposition="cancel")
    replay_keys = [f"{s.key()}/c{i}" for i in range(len(children))]
    [opened, won, first, second] = await stack.turn(open_(group), next_(), close(), close())
    assert ok(won)["position"] == 0
    assert ok(first) is None and ok(second) is None
    [_, redriven] = await stack.turn(use(ok(opened)), close())
    assert ok(redriven) is None
    await _poll(stack, _unfinished(s.key(), replay_keys), lambda rows: rows == [])
    await _poll(stack, _stores(s.key(), replay_keys), lambda rows: rows == [])
    assert await _sql(stack, _group_state(s.key())) == []
    for key in replay_keys[1:]:  # the losers ended, cancelled: neither slept nor waited on
        [run] = await _sql(stack, _runs(key))
        assert run["completion_result"] == "success", run


async def test_close_cancel_does_not_await_the_losers_termination(stack: Stack) -> None:
    """ADR: `close_effect_group(Cancel)` returns once the cancels are issued and does not await the
    losers' termination, so a loser slow to wind down delays neither the close nor its caller.

    A loser that cannot wind down at all: its invocation runs on an endpoint that is then frozen
    (SIGSTOP), while a second deployment serves every new invocation. A fresh caller closes the
    group with `Cancel` (a call, so its turn returns only once the close has run): the close
    completes and deletes the group while the loser is still running. Once its endpoint is thawed
    the loser takes the cancel and ends, and its store is released.
    """
    s = Scope()
    loser = f"{s.key()}/c1"
    group = s.group([echo("won"), tool("count", {"name": f"{s.id}-slow", "delay_ms": 120_000})], wake="first")
    [_, won, saved] = await stack.turn(open_(group), next_(), save())
    assert ok(won)["position"] == 0
    [running] = await _poll(stack, _runs(loser), lambda rows: bool(rows) and rows[0]["status"] == "running")
    second = stack.add_endpoint("endpoint-b")
    second.start()
    stack.register(second)

    # Every invocation that starts from now on runs on the second deployment. Nothing of the group may
    # have started on the first, to be frozen, but the loser itself, the group's watch of it (shared:
    # it holds no lock) and guards of its caller's wakes not yet started: the close cancels those, but
    # a guard running there (exclusive, it is sent again with a delay) would hold the lock it needs.
    def others(rows: list[dict[str, Any]]) -> bool:
        return all(
            r["handler"] == "watch_runs" or (r["handler"] == "guard" and r["status"] in UNSTARTED)
            for r in rows
        )

    await _poll(stack, _unfinished(s.key(), [f"{s.key()}/c0"]), others)
    frozen = stack.endpoint.pid
    assert frozen is not None
    os.kill(frozen, signal.SIGSTOP)
    try:
        [_, closed] = await stack.turn(use(ok(saved)), close("cancel"), within=30)
        assert ok(closed) is None
        assert await _sql(stack, _group_state(s.key())) == []
        [closes] = await _sql(
            stack,
            "SELECT count(*) AS n FROM sys_invocation WHERE target_service_name = 'LashGroup' "
            f"AND target_service_key = {quote(s.key())} AND target_handler_name = 'close' "
            "AND status = 'completed'",
        )
        assert closes["n"] == 1
        [still] = await _sql(stack, _runs(loser))
        assert still["status"] != "completed"  # the caller is done; the loser is not
        assert still["pinned_deployment_id"] == running["pinned_deployment_id"]
    finally:
        os.kill(frozen, signal.SIGCONT)
    [ended] = await _poll(stack, _runs(loser), lambda rows: rows[0]["status"] == "completed", within=60)
    assert ended["completion_result"] == "success", ended  # it ended as a Cancelled child does
    await _poll(stack, _stores(s.key(), [loser]), lambda rows: rows == [])


# -- P3: the combinators' dispositions, as the engine records them ------------------------------


async def test_select_records_a_first_group_declaring_cancel(restate_stack: LocalStack) -> None:
    """ADR, Consequences: a signal/deadline select is a two-child `First` group with `Cancel`; the
    group object records exactly that while the select is parked."""
    stack, s = restate_stack, Scope()
    name = s.event("approved")
    step = {
        "type": "select",
        "key": s.key(),
        "event": name,
        "deadline_ms": 600_000,
        "replay_key_prefix": f"{s.key()}/sel",
    }
    parked = asyncio.create_task(stack.turn(step))
    async with asyncio.timeout(30):
        while (recorded := await asyncio.to_thread(show_group, stack.admin_url, s.key())) is None:
            assert not parked.done(), parked.result()
            await asyncio.sleep(0.05)
    assert (recorded.child_count, recorded.wake, recorded.disposition) == (2, "first", "cancel")
    await stack.emit(name, "yes")
    [selected] = await parked
    assert ok(selected) == {"winner": "event", "value": "yes"}


async def test_the_combine_handler_refuses_all_with_cancel_losers(restate_stack: LocalStack) -> None:
    """ADR: `all` and `allSettled` declare `RunToCompletion`; asked for `Cancel` losers, `LashTurn/combine`
    refuses typed and opens nothing, while `race` accepts them."""
    stack, s = restate_stack, Scope()
    children = [{"type": "tool_call", "tool": "echo", "args": {"value": 1}}]
    body = {"children": children, "scope": s.id, "batch": "b", "losers": "cancel"}
    for kind in ("all", "all_settled"):
        refused = await stack.call(f"{TURN}/combine", {**body, "kind": kind})
        assert refused["error"]["code"] == "disposition_drift", refused
        assert refused["error"]["message"] == (
            f"{kind} needs disposition run_to_completion, the group declares cancel"
        )
    assert await _sql(stack, _group_state(s.key())) == []
    raced = await stack.call(f"{TURN}/combine", {**body, "kind": "race"})
    assert raced["status"] == "fulfilled" and raced["value"] == 1


async def test_supports_effect_groups_is_the_answer_of_the_process_the_caller_runs_in(tmp_path: Any) -> None:
    """ADR: the answer is "a resolver is registered", a per-deployment fact established at wiring.

    On Restate a `RestateController(ctx)` answers true where its process bound lash's services with a
    validated resolver (the `LashTurn` endpoint: `supports` above), or declared that another
    deployment of the cluster serves them (`lash.use_prefix()`); a process that did neither answers
    false and refuses the open with `effect_group_unsupported`, though lash's services are served
    beside it. Both callers are real endpoints of one server, next to a lash deployment.
    """
    stack = LocalStack(tmp_path)
    stack.add_server()
    stack.add_endpoint()  # lash's services, with the demo tools
    unwired = stack.add_endpoint("unwired", module="tests.engine.caller_app", args=())
    declared = stack.add_endpoint("declared", module="tests.engine.caller_app", args=("--served-elsewhere",))
    stack.start(register=False)
    with stack:
        stack.register(stack.endpoint)
        stack.register(unwired)
        refused = await stack.call("Caller/race", "v")
        assert refused == {"supports": False, "refused": "effect_group_unsupported"}
        stack.register(declared)  # the next `Caller` invocations run here
        assert await stack.call("Caller/race", "v") == {"supports": True, "value": "v"}


# -- Formats: what a group in flight keeps is written as its format says -------------------------


def _all_state(key: str) -> str:
    """Every state row of group ``key``: the group's, its pumps' and its children's."""
    return (
        "SELECT service_name, key, value_utf8 FROM state WHERE "
        f"(service_name = 'LashGroup' AND service_key = {quote(key)}) "
        f"OR (service_name = 'LashPump' AND ends_with(service_key, {quote(':' + key)})) "
        f"OR (service_name = 'LashChild' AND starts_with(service_key, {quote(key + '/')}))"
    )


@pytest.mark.parametrize("path", [*PATHS, "paged"])
async def test_every_state_value_of_a_group_in_flight_is_its_formats_compact_json(
    restate_stack: LocalStack, path: str
) -> None:
    """Every record lash keeps is written by its format's serde (tests/formats: compact JSON, as
    msgspec writes it), never by the SDK's default (which spaces its separators): a record written
    otherwise is a format no golden fixture pins. Read from a group in flight on each layout, a
    rank served and a child held, its handle saved: the group's keys, its pump's and its children's."""
    stack, s = restate_stack, Scope()
    gate = s.event("gate")
    width = PUMP_SLICE + 1 if path == "paged" else PATHS[path]
    # Two ranks served where the layout allows, so the lists kept have separators to write.
    fast = [echo("first")] + ([echo("second")] if path != "direct" else [])
    group = s.group(_widened(s, [*fast, event(gate)], width))
    [_, *read, saved] = await stack.turn(open_(group), *[next_() for _ in fast], save())
    assert {ok(r)["position"] for r in read} == set(range(len(fast)))
    rows = await _poll(stack, _all_state(s.key()), lambda rows: "guarded" in {r["key"] for r in rows})
    assert {r["service_name"] for r in rows} >= {"LashGroup", "LashChild" if path == "direct" else "LashPump"}
    for row in rows:
        raw = row["value_utf8"]
        assert raw is not None, row
        assert msgspec.json.encode(msgspec.json.decode(raw)).decode() == raw, row
    await stack.emit(gate, "third")
    [_, _, closed] = await stack.turn(use(ok(saved)), next_(), close())
    assert ok(closed) is None


async def test_a_group_opened_in_parts_records_its_openers_save(restate_batched_stack: LocalStack) -> None:
    """A group opened in parts (every group is, on this stack) answers its opener with its
    incarnation, which tells the opener that the group records saves (decision 78): the save is
    recorded under `savers` as for a group opened in one message, so the group is never reclaimed
    while a continuation may hold its handle."""
    stack, s = restate_batched_stack, Scope()
    group = s.group([echo("won"), event(s.event("never"))], wake="first")
    [_, won, saved] = await stack.turn(open_(group), next_(), save())
    assert ok(won)["position"] == 0
    await _poll(stack, _group_state(s.key()) + " AND key = 'savers'", lambda rows: len(rows) == 1)
    [opened] = group_events(stack.base_dir, "group.opened", s.key())
    assert (opened["mode"], opened["parts"]) == ("pumped", 1)
    # A reopen stages its part again, and releases it (one part: one release of it).
    [reopened] = await stack.turn(open_(group))
    assert ok(reopened) is not None
    releases = (
        "SELECT target_service_key FROM sys_invocation WHERE target_service_name = 'LashPump' AND "
        f"target_handler_name = 'forget' AND ends_with(target_service_key, {quote(':' + s.key())})"
    )
    assert len(await _poll(stack, releases, lambda rows: len(rows) >= 1)) == 1
    [_, closed] = await stack.turn(use(ok(saved)), close())
    assert ok(closed) is None


async def test_a_read_of_a_direct_childs_outcome_that_a_close_overtook_is_refused_naming_its_store(
    restate_stack: LocalStack,
) -> None:
    """A caller's read of a direct child's stored outcome that its group's close overtook (the close
    released the child's store) is refused with `group_not_open`, saying the store may have been
    deleted and naming it (a `restate state clear` of the child reads the same). The race made
    deterministic as for a pump's bulk read."""
    stack, s = restate_stack, Scope()
    group = s.group([echo("a"), echo("b")])  # two tools: direct
    [_, first, second, saved] = await stack.turn(open_(group), next_(), next_(), save())
    assert sorted(ok(r)["position"] for r in (first, second)) == [0, 1]
    incarnation = (await recorded_meta(stack, s.key()))["incarnation"]
    child = f"{s.key()}/c0"
    ask = {"group_key": s.key(), "batch": incarnation, "handler": "outcome", "child_key": child}
    wire = await _read_once_closed(stack, saved, ask, "LashChild", child)
    assert wire["replay_key"] == child
    assert f"or the outcome store of {child} was deleted" in wire["message"], wire


async def _read_once_closed(
    stack: LocalStack, saved: dict[str, Any], ask: dict[str, Any], service: str, key: str
) -> dict[str, Any]:
    """Ask the read ``ask`` of the store at ``service``/``key`` while its group is open (answered),
    then again once the group's close (through the cursor ``saved``) released that store: the
    `group_not_open` refusal's wire form."""
    await stack.call(f"{TURN}/resettle", ask)  # while the group is open, the store answers the read
    [_, closed] = await stack.turn(use(ok(saved)), close())
    assert "error" not in closed
    kept = f"SELECT key FROM state WHERE service_name = {quote(service)} AND service_key = {quote(key)}"
    await _poll(stack, kept, lambda rows: rows == [])
    with pytest.raises(StackError, match="group_not_open") as refused:
        await stack.call(f"{TURN}/resettle", ask)
    answer = json.loads(str(refused.value).split(": ", 1)[1])["message"]
    wire: dict[str, Any] = json.loads(answer.removeprefix("lash-error:"))
    return wire


async def test_each_of_lashs_services_declares_the_retry_policy_that_pauses_a_failing_handler(
    restate_stack: LocalStack,
) -> None:
    """A fault in lash's own handler code (a plain exception) is retried, never for ever: Restate
    pauses the invocation once `HANDLER_RETRY`'s attempts ran out, where an operator sees it. Each of
    lash's four services is registered with that policy, as the admin API shows it."""
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        for role in (GROUP, CHILD, PUMP, SIGNAL):
            shown = (await client.get(f"{restate_stack.admin_url}/services/{named(role)}")).json()
            policy = shown["retry_policy"]
            assert policy["max_attempts"] == HANDLER_RETRY.max_attempts, (role, policy)
            assert policy["on_max_attempts"].lower() == HANDLER_RETRY.on_max_attempts, (role, policy)
            assert policy["exponentiation_factor"] == HANDLER_RETRY.exponentiation_factor, (role, policy)
            # Restate writes a duration as its largest whole unit: 50ms, 10s.
            for field in ("initial_interval", "max_interval"):
                interval = getattr(HANDLER_RETRY, field)
                assert interval is not None
                millis = int(interval.total_seconds() * 1000)
                said = f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"
                assert policy[field] == said, (role, field, policy)
