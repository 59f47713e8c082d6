"""Restate's own CLI on lash's invocations: an operator's tool never strands a group.

An operator of a shared cluster uses `restate invocations pause|resume|…` (the pinned
`@restatedev/restate` CLI that `make setup` installs), not lash's. These tests run that CLI against a
real restate-server on the invocations a group is made of, and check that the group's caller still
gets the right answer: every rank, each child's real outcome, its side effect once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import msgspec
import pytest

from lash_restate.engine import GROUP_OPERATOR_RESEND, GroupMeta, OperatorResend
from lash_restate.engine.caller._open_parts import PARTS_FROM_ENV
from lash_restate.engine.group._mode import PUMP_SLICE
from lash_restate.inspection import (
    GroupView,
    InspectionError,
    OpenGroup,
    StrandedWakes,
    look_again,
    quote,
    show_group,
    sql,
)
from lash_restate.inspection._operator import operator_call
from lash_restate.inspection._sql import admin_api
from lash_restate.testing import Endpoint, LocalStack
from tests.conformance.builders import (
    Scope,
    call,
    close,
    combine,
    count,
    echo,
    err,
    event,
    next_,
    ok,
    open_,
    save,
    tool,
    use,
)
from tests.conftest import check_group_events
from tests.engine.test_engine import _poll, wait_tool_started
from tests.engine.test_guard import _guarded, _status
from tests.engine.test_operator import (
    _missed,
    _nothing_left,
    group_events,
    lash,
    listed,
    parked_group,
    settled,
    staged_query,
    state_rows,
    stores_left,
    turn_id,
    turn_in_background,
    unfinished,
    until,
)
from tests.engine.test_wide import DEEP

# `make setup` installs it beside the server: the nearest node_modules above this checkout (a copy
# of the tests, as the engine's mutation run makes inside it, finds the checkout's).
CLI = next(
    (
        path
        for folder in Path(__file__).resolve().parents
        if (path := folder / "node_modules" / ".bin" / "restate").exists()
    ),
    Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "restate",
)


def restate(stack: LocalStack, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Restate's CLI against ``stack``'s admin API, with a configuration of its own (none of the user's)."""
    env = {**os.environ, "RESTATE_ADMIN_URL": stack.server.admin_url, "RESTATE_CLI_CONFIG_HOME": str(tmp)}
    return subprocess.run([str(CLI), *args, "--yes"], capture_output=True, text=True, timeout=60, env=env)


def _invocation(service: str, key_clause: str, handler: str) -> str:
    return (
        f"SELECT id, status FROM sys_invocation WHERE target_service_name = {quote(service)} "
        f"AND {key_clause} AND target_handler_name = {quote(handler)}"
    )


@contextlib.contextmanager
def unanswered(
    stack: LocalStack,
    name: str = "endpoint-b",
    *,
    service: str | None = None,
    paused: bool = True,
    hold: str | None = None,
) -> Iterator[Endpoint]:
    """A second deployment, registered (what is sent from here on runs there) and paused, so it holds
    what it is sent until the block ends; with ``service``, it serves that one of lash's services
    alone (`one_service_app`), and the rest still runs on the first. Not ``paused``, the block
    pauses it (`Endpoint.pause`) when it has run what it should; or, with ``hold``, only that handler
    of ``service`` holds what it is sent, for ever."""
    args = ("--service", str(service), *(("--hold", hold) if hold else ()))
    held = (
        stack.add_endpoint(name, module="tests.engine.one_service_app", args=args)
        if service
        else stack.add_endpoint(name)
    )
    held.start()
    stack.register(held, take_over=service is not None)  # a partial deployment shares the prefix
    if paused:
        held.pause()
    try:
        yield held
    finally:
        held.resume()  # a cancel reaches what it holds once it runs it (Restate's is cooperative)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    """A stack of the test's own, for a test that registers a deployment or restarts the endpoint."""
    with LocalStack.single(tmp_path / "stack").start() as s:
        yield s


# The tests that change no deployment and restart nothing share one stack, on one worker.
SHARED = pytest.mark.xdist_group("restate-cli")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack.single(tmp_path_factory.mktemp("restate-cli")).start() as s:
        yield s


async def _pump_holding(stack: LocalStack, key: str) -> GroupView | None:
    """`groups show`'s view of ``key`` once one of its pumps holds a finished child unreported."""
    view = await asyncio.to_thread(show_group, stack.admin_url, key)
    return view if view is not None and any(p.unreported for p in view.pumps) else None


def test_the_pinned_cli_is_the_servers_release() -> None:
    assert CLI.exists(), "run `make setup`: it installs Restate's CLI with the server"
    out = subprocess.run([str(CLI), "--version"], capture_output=True, text=True, timeout=30)
    assert "1.7.12" in out.stdout, out.stdout


@SHARED
@pytest.mark.parametrize("which", ["pump", "child"])
async def test_pausing_and_resuming_a_groups_invocation_with_restates_cli_changes_no_answer(
    shared: LocalStack, tmp_path: Path, which: str
) -> None:
    """`restate invocations pause` then `resume` of the group's pump, or of the `LashChild/execute`
    of its slow child, while that child runs: the caller then reads every rank, the slow child's
    real outcome among them, and its side effect happened once."""
    s = Scope()
    name = f"{s.id}-slow"
    gate = tmp_path / "gate"  # the slow child runs until the pause is asked for
    slow = tool("count", {"name": name, "value": "slow", "after": str(gate)})
    group = s.group([echo("a"), slow, echo("b")])  # three: pumped
    [opened, first, second] = await shared.turn(open_(group), next_(), next_())
    assert {ok(first)["position"], ok(second)["position"]} == {0, 2}
    if which.endswith("pump"):
        handler = "run_parts" if which.startswith("parts") else "run2"
        ends = f".1:{s.key()}" if which.endswith("slice-pump") else f":{s.key()}"  # the second slice's pump
        query = _invocation("LashPump", f"ends_with(target_service_key, {quote(ends)})", handler)
    else:
        query = _invocation("LashChild", f"target_service_key = {quote(s.key() + '/c1')}", "execute2")
    [row] = await _poll(shared, query, lambda rows: len(rows) == 1)
    paused = restate(shared, tmp_path, "invocations", "pause", row["id"])
    assert paused.returncode == 0, paused.stderr
    gate.touch()  # a running child's pause lands once its attempt yields, here when its tool answers
    await _poll(shared, query, lambda rows: rows[0]["status"] == "paused")
    # lash's own tools say so: the listing counts it on the group's path, and `show` names the pump.
    listing = await listed(shared, s.key())
    assert listing is not None and listing.paused == 1, listing
    shown = lash(shared, "groups", "show", s.key())
    assert shown.returncode == 0, shown.stderr
    if which == "pump":
        assert f"{row['id']} (run2, paused" in shown.stdout and "is paused" in shown.stdout, shown.stdout
        # The slow child finished, and its pump, paused, has not reported it: `show` says so, and that
        # a kill of the pump would settle it as killed (an operator's trial killed 233 such children).
        held = await until(lambda: _pump_holding(shared, s.key()))
        assert [(p.invocation_id, p.unreported) for p in held.pumps] == [(row["id"], 1)]
        shown = lash(shared, "groups", "show", s.key())
        assert f"{row['id']} (run2, paused, 1 of its children finished and not reported yet)" in shown.stdout
        assert "Resume it (restate invocations resume ID) rather than kill it" in shown.stdout, shown.stdout
    else:  # paused by hand: no retries ran out, and no failure is recorded
        said = f"/c1/execute2 ({row['id']}), which is paused, with no failure recorded (an operator's"
        assert said in shown.stdout and "retries ran out" not in shown.stdout, shown.stdout
    resumed = restate(shared, tmp_path, "invocations", "resume", row["id"])
    assert resumed.returncode == 0, resumed.stderr
    [_, again, _, third, closed] = await shared.turn(use(ok(opened)), next_(), next_(), next_(), close())
    assert ok(again) == ok(first)  # the ranks read before are served the same
    assert "error" not in closed
    assert ok(third)["outcome"] == {"type": "ok", "value": "slow"}
    assert shared.counts().count(name) == 1


@SHARED
async def test_a_caller_paused_with_restates_cli_while_it_waits_is_shown_paused_and_resumes(
    shared: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations pause` of a caller waiting on its group's next rank: `groups show` says
    its opener is paused, not running, with the way back; resumed, it reads its ranks and closes."""
    s = Scope()
    gate = tmp_path / "gate"  # its second child answers once the caller is paused
    group = s.group([echo("a"), tool("count", {"name": f"{s.id}-late", "value": "b", "after": str(gate)})])
    caller = turn_in_background(shared, s, open_(group), next_(), next_(), close())
    invocation = await turn_id(shared, s)
    await until(lambda: settled(shared, s.key(), 1))  # it waits on rank 2
    paused = restate(shared, tmp_path, "invocations", "pause", invocation)
    assert paused.returncode == 0, paused.stderr
    turns = f"SELECT status FROM sys_invocation WHERE id = {quote(invocation)}"
    await _poll(shared, turns, lambda rows: rows[0]["status"] == "paused")
    shown = lash(shared, "groups", "show", s.key())
    assert f"{invocation} (paused: `restate invocations resume` it)" in shown.stdout, shown.stdout
    assert f"its opener {invocation} is paused" in shown.stdout, shown.stdout  # the group's state, why
    gate.touch()
    resumed = restate(shared, tmp_path, "invocations", "resume", invocation)
    assert resumed.returncode == 0, resumed.stderr
    answer = await caller
    assert answer.status_code == 200, answer.text
    [_, _, second, closed] = answer.json()
    assert ok(second)["outcome"] == {"type": "ok", "value": "b"} and "error" not in closed


@SHARED
async def test_restart_as_new_of_a_finished_caller_runs_it_again_with_a_group_of_its_own(
    shared: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations restart-as-new` of a caller that ran an `all` to its end: the new
    invocation runs the same handler on the same input, opens the group again (the first closed it),
    and ends with the same answer; each child's side effect ran once per run."""
    s = Scope()
    name = f"{s.id}-once"
    group = s.group([echo("a"), count(name, "b")])
    [first] = await shared.turn(combine("all", group))
    assert ok(first)["value"] == ["a", "b"]
    turns = _invocation("LashTurn", "true", "run") + " ORDER BY created_at"
    [row] = (await _poll(shared, turns, lambda rows: bool(rows)))[-1:]
    restarted = restate(shared, tmp_path, "invocations", "restart-as-new", row["id"])
    assert restarted.returncode == 0, restarted.stderr
    rows = await _poll(
        shared,
        "SELECT id, status, completion_result, completion_failure FROM sys_invocation "
        f"WHERE restarted_from = {quote(row['id'])}",  # the stack is shared: only the restart's own
        lambda rows: any(r["status"] == "completed" for r in rows),
    )
    [again] = [r for r in rows if r["status"] == "completed"]
    assert again["completion_result"] == "success", again
    assert shared.counts().count(name) == 2  # the restarted caller's group ran its children again


async def test_a_closed_group_opened_again_by_a_restart_of_its_open_is_listed_as_nobodys(
    shared: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations restart-as-new` of a closed group's completed first `LashGroup/open`
    opens the group again, its opener long gone. Nothing of lash can refuse it (the open cannot
    tell a restart from the first), so the operator's tools say what it is: orphaned, opened again
    without its opener, whose last message to the key closed an earlier incarnation; and a plain
    `groups close` (no `--force`) ends it. A cursor saved from the closed group reads none of the
    new one's ranks (decision 124)."""
    s = Scope()
    group = s.group([echo("a"), count(f"{s.id}-again", "b")])
    [_, _, saved, _, closed] = await shared.turn(open_(group), next_(), save(), next_(), close())
    assert "error" not in closed
    opens = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "open")
    [opened] = await _poll(shared, opens, lambda rows: [r["status"] for r in rows] == ["completed"])
    restarted = restate(shared, tmp_path, "invocations", "restart-as-new", opened["id"])
    assert restarted.returncode == 0, restarted.stderr

    async def shown_as_nobodys() -> GroupView | None:
        # Once its open has recorded its opener too, a moment after it answered.
        view = await asyncio.to_thread(show_group, shared.server.admin_url, s.key())
        return view if view is not None and view.openers else None

    view = await until(shown_as_nobodys)
    assert view.state == "orphaned", view.reason
    assert "earlier incarnation" in view.reason and "restart-as-new" in view.reason, view.reason
    assert await listed(shared, s.key(), "orphaned")  # the listing says so too
    [_, stale] = await shared.turn(use(ok(saved)), next_())
    assert err(stale)["code"] == "group_not_open" and "opened again" in err(stale)["message"], stale
    result = lash(shared, "groups", "close", s.key(), "--cancel")
    assert result.returncode == 0, result.stderr
    await until(lambda: _nothing_left(shared, s.key()))


async def test_a_parked_group_resumes_on_a_new_deployment_after_restates_cli_removed_the_old_one(
    stack: LocalStack, tmp_path: Path
) -> None:
    """`restate deployments remove` of the deployment a parked group's children ran on (drained: its
    invocations have ended), a new deployment registered, the old endpoint gone: a continuation holding
    the saved handle resumes the group on the new one, reads the rank it had not read, and closes;
    nothing of the group is left."""
    s = Scope()
    group = s.group([echo("a"), echo("b", kind="calls")])  # a pumped group: a call child
    [_, first, saved] = await stack.turn(open_(group), next_(), save())
    assert ok(first)["outcome"]["type"] == "ok"
    [old] = await asyncio.to_thread(sql, stack.server.admin_url, "SELECT id FROM sys_deployment")
    second = stack.add_endpoint("endpoint-b")
    second.start()
    stack.register(second)
    pinned = (
        "SELECT id FROM sys_invocation WHERE status != 'completed' "
        f"AND pinned_deployment_id = {quote(old['id'])}"
    )
    await _poll(stack, pinned, lambda rows: rows == [])  # drained: what ran there has ended
    removed = await asyncio.to_thread(restate, stack, tmp_path, "deployments", "remove", old["id"])
    assert removed.returncode == 0, removed.stderr
    stack.endpoint.kill()
    [_, second_rank, closed] = await stack.turn(use(ok(saved)), next_(), close())
    assert {ok(first)["outcome"]["value"], ok(second_rank)["outcome"]["value"]} == {"a", "b"}
    assert ok(second_rank)["rank"] == 2
    assert "error" not in closed
    await until(functools.partial(_nothing_left, stack, s.key()))


KILLED = {"type": "err", "code": "409", "message": "killed"}  # what a killed callee answers its caller


# The kill tests share two stacks (one opening every group in parts), on a worker of their own: each
# kill reaches only its own group's invocations, and each check reads its own group's key.
KILLS = pytest.mark.xdist_group("restate-cli-kills")


@pytest.fixture(scope="module")
def killing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[bool, LocalStack]]:
    """By whether it opens every group in parts: a stack logging every group event."""
    with contextlib.ExitStack() as stacks:
        yield {
            parts: stacks.enter_context(
                LocalStack.single(
                    tmp_path_factory.mktemp("kills-parts" if parts else "kills"),
                    endpoint_env={"LASH_VERBOSE": "1", **({PARTS_FROM_ENV: "1"} if parts else {})},
                ).start()
            )
            for parts in (False, True)
        }


@pytest.mark.slow
@KILLS
@pytest.mark.parametrize(
    ("which", "width"),
    [
        ("pump", 3),
        ("parts-pump", 3),
        ("slice-pump", PUMP_SLICE + 1),
        ("parts-slice-pump", PUMP_SLICE + 1),
        ("child", 3),
        ("child", 2),
    ],
    ids=["pump", "parts-pump", "slice-pump", "parts-slice-pump", "pumped-child", "direct-child"],
)
async def test_killing_a_groups_pump_or_child_with_restates_cli_settles_its_unsettled_children_as_killed(
    killing: dict[bool, LocalStack], tmp_path: Path, which: str, width: int
) -> None:
    """`restate invocations kill` of the group's pump (opened in one message, or in parts), of a wide
    group's pump of its second slice (either way), of the `LashChild/execute` a pump awaits, or of a
    narrow group's `LashChild/run`, while a caller that resumed (and so reopened) the group waits on
    the slow child: as a killed callee answers its caller, the slow child settles as killed (409) and
    takes its rank, never run again by the reopen, so the waiting caller ends; the ranks read before
    are served the same, and the close finds nothing left running."""
    stack = killing[which.startswith("parts")]
    key = await _kill_and_read(stack, tmp_path, which, width)
    # The group's watch settled only the child that held no rank (the others' ranks stand); a pump
    # settles a killed `execute` of its own.
    reported = [] if which == "child" and width >= 3 else [1]
    assert [e["children"] for e in group_events(stack.base_dir, "group.run_ended", key)] == reported
    if which.endswith("slice-pump"):  # its parent pump says why it reported the slice, in its words
        lines = (stack.base_dir / "endpoint.log").read_text().splitlines()
        said = [json.loads(line)["msg"] for line in lines if "a slice's pump of group" in line]
        assert f"a slice's pump of group {key} failed: killed" in said, said


@pytest.mark.slow
@KILLS
async def test_a_restart_as_new_of_a_completed_pump_runs_none_of_its_children_again(
    killing: dict[bool, LocalStack], tmp_path: Path
) -> None:
    """`restate invocations restart-as-new` of a parked group's pump (`LashPump/run2`, or
    `run_parts` for a group opened in parts), completed once every child settled and it stopped
    listening: the pump made again finds its slice run and runs none of its tools (decision 125),
    saying so in a warning; it ran every tool again, and replaced the outcomes the group serves at
    ranks already read. A pump of call children calls them again, and Restate answers each from its
    first run by its idempotency key, as it answers a native caller made again. Either way the ranks
    read again from a cursor at 0 are those read before, and each child ran once. The three cases
    run at once: each waits seconds for its pump to stop listening."""
    cases = {"pump": (False, False), "parts-pump": (True, False), "calls-pump": (False, True)}
    async with asyncio.TaskGroup() as tasks:
        for parts, calls in cases.values():
            tasks.create_task(_restart_a_completed_pump(killing[parts], tmp_path, parts, calls))


@KILLS
async def test_a_restart_as_new_of_a_closed_groups_open_in_parts_records_nothing(
    killing: dict[bool, LocalStack], tmp_path: Path
) -> None:
    """`restate invocations restart-as-new` of a closed group's completed `LashGroup/open_parts`
    (a group opened in parts): the close released the children its opener staged, so the open made
    again records nothing (decision 126). It recorded the group again under the incarnation its
    opener chose, which no cursor's fence tells from the first, and which never settled: a cursor
    saved from the closed group waited on it for ever."""
    stack = killing[True]  # every group opened in parts
    s = Scope()
    group = s.group([echo("a"), echo("b")])
    [_, _, saved, _, closed] = await stack.turn(open_(group), next_(), save(), next_(), close())
    assert "error" not in closed
    opens = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "open_parts")
    [opened] = await _poll(stack, opens, lambda rows: [r["status"] for r in rows] == ["completed"])
    await until(lambda: _nothing_left(stack, s.key()))  # the close released every part
    restarted = await asyncio.to_thread(
        restate, stack, tmp_path, "invocations", "restart-as-new", opened["id"]
    )
    assert restarted.returncode == 0, restarted.stderr
    await _poll(stack, opens, lambda rows: [r["status"] for r in rows] == ["completed"] * 2)
    assert await asyncio.to_thread(show_group, stack.server.admin_url, s.key()) is None
    [_, stale] = await stack.turn(use(ok(saved)), next_())
    assert err(stale)["code"] == "group_not_open" and "no such group" in err(stale)["message"], stale
    await until(lambda: _nothing_left(stack, s.key()))


async def _restart_a_completed_pump(stack: LocalStack, tmp_path: Path, parts: bool, calls: bool) -> None:
    s = Scope()
    names = [f"{s.id}-t{i}" for i in range(3)]
    if calls:
        children = [call("DemoCalls", "count", {"name": name, "value": name}) for name in names]
    else:
        children = [count(name, name) for name in names]  # three tools: pumped
    group = s.group(children)
    [_, *read, saved] = await stack.turn(open_(group), *[next_() for _ in names], save())
    handler = "run_parts" if parts else "run2"
    pumps = _invocation("LashPump", f"ends_with(target_service_key, {quote(':' + s.key())})", handler)
    # Completed once it stopped listening for the close, some seconds after the last child.
    [ran] = await _poll(stack, pumps, lambda rows: [r["status"] for r in rows] == ["completed"])
    restarted = await asyncio.to_thread(restate, stack, tmp_path, "invocations", "restart-as-new", ran["id"])
    assert restarted.returncode == 0, restarted.stderr
    await _poll(stack, pumps, lambda rows: [r["status"] for r in rows] == ["completed"] * 2)
    at_zero = json.dumps({**json.loads(ok(saved)), "consumed": 0})
    [_, *again, closed] = await stack.turn(use(at_zero), *[next_() for _ in names], close())
    assert [ok(r) for r in again] == [ok(r) for r in read] and "error" not in closed
    assert sorted(n for n in stack.counts() if n.startswith(s.id)) == names  # each child ran once
    lines = (stack.base_dir / "endpoint.log").read_text().splitlines()
    said = [json.loads(line)["msg"] for line in lines if '"pump.run_again"' in line]
    assert bool([m for m in said if s.key() in m]) is not calls, said


async def _kill_and_read(stack: LocalStack, tmp_path: Path, which: str, width: int) -> str:
    s = Scope()
    name = f"{s.id}-slow"
    fast = [echo(f"fast {i}") for i in range(width - 1)]
    group = s.group([*fast, count(name, "slow", delay_ms=120_000)])
    # Two ranks read before the kill at most (the wide case has 256): enough to see them served again.
    [opened, *read] = await stack.turn(open_(group), *[next_() for _ in fast[:2]])

    await until(lambda: settled(stack, s.key(), len(fast)))  # every fast child ranked before the kill
    slow = f"{s.key()}/c{width - 1}"
    if which.endswith("pump"):
        handler = "run_parts" if which.startswith("parts") else "run2"
        ends = f".1:{s.key()}" if which.endswith("slice-pump") else f":{s.key()}"  # the second slice's pump
        query = _invocation("LashPump", f"ends_with(target_service_key, {quote(ends)})", handler)
    else:
        handler = "execute2" if width >= 3 else "run"
        query = _invocation("LashChild", f"target_service_key = {quote(slow)}", handler)
    [row] = await _poll(stack, query, lambda rows: len(rows) == 1 and rows[0]["status"] != "completed")
    # A caller resumes the handle and reads every rank in order through `all_settled` (its reads
    # batched, where a `next` per rank is a round trip each), waiting on the slow child's, then closes.
    # The resume reopens the group before the kill: a reopen must not run the killed child again.
    resumed = combine("all_settled", group, handle=ok(opened))
    opens = (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashGroup' AND "
        f"target_service_key = {quote(s.key())} AND target_handler_name IN ('open', 'open_parts') "
        "AND status = 'completed'"
    )
    async with asyncio.TaskGroup() as tasks:
        waiting = tasks.create_task(stack.turn(resumed))
        await _poll(stack, opens, lambda rows: len(rows) == 2)  # the first open, and the resume's
        killed = await asyncio.to_thread(restate, stack, tmp_path, "invocations", "kill", row["id"])
    assert killed.returncode == 0, killed.stderr
    [answer] = waiting.result()
    order = ok(answer)["order"]  # the position at each rank
    assert order[: len(read)] == [ok(r)["position"] for r in read]  # served the same again
    assert (len(order), order[-1], ok(answer)["value"][-1]) == (width, width - 1, KILLED)
    # The close released what a killed pump kept, though nobody listened for it any more.
    await until(functools.partial(_nothing_left, stack, s.key()))
    return s.key()


_STARTED = (["running"], ["suspended"])  # neither scheduled nor ended


async def _watching(stack: LocalStack, query: str, attaches: int) -> dict[str, Any]:
    """The newest invocation ``query`` names, once Restate's journal of it holds ``attaches`` attaches:
    from then on Restate tells it how what it watches ends, where one merely running may not have
    asked yet (and a queued invocation killed or cancelled before it asks is not kept at all)."""
    [watch] = await _poll(stack, f"{query} ORDER BY created_at DESC LIMIT 1", lambda rows: len(rows) == 1)
    journal = (
        f"SELECT index FROM sys_journal WHERE id = {quote(watch['id'])} "
        "AND entry_type = 'Command: AttachInvocation'"
    )
    await _poll(stack, journal, lambda rows: len(rows) >= attaches)
    return watch


@pytest.mark.parametrize(
    ("width", "slice_", "held"),
    [(PUMP_SLICE + 1, 1, 1), (DEEP, 1, 2), (DEEP, 0, 6)],
    ids=["leaf", "subtree", "root"],
)
async def test_cancelling_a_further_slices_pump_before_it_called_its_children_settles_them_as_cancelled(
    tmp_path: Path, width: int, slice_: int, held: int
) -> None:
    """`restate invocations cancel` of a wide group's pump of its second slice before that pump has
    called anything (`held_slices_app` holds it in a durable sleep there, where a pump's own work
    before its first call is a moment): Restate ends it cancelled, having settled nothing, and its
    parent pump reports its children to the group, which settles each as `Cancelled`, so the
    caller waiting on them reads every rank (before, the parent took a cancelled slice for one that
    had settled its children as cancelled itself, as a `Cancel` close's cancel leaves it, and the
    caller waited for ever). In a group of six slices that pump would have called the pump of slice
    2 too (`subtree`): those children settle the same way, and the close releases what the repair
    stored for them there, though that pump never ran. The same for the group's own pump cancelled
    before it called anything (`root`): every child settles `Cancelled`, through the store of its
    slice's pump, none of which ran, and the close releases them all (it released the root's alone,
    which had recorded no further pump). The child just past the held subtree (`subtree`: slice 3's
    first) waits on an event emitted only once the group has settled the subtree: it is none of
    the subtree's, and settles with its own value."""
    base = tmp_path / "stack"
    env = {"LASH_VERBOSE": "1", "HELD_SLICE": str(slice_)}
    held_app = LocalStack.single(
        base, module="tests.engine.held_slices_app", endpoint_args=("--with-turn",), endpoint_env=env
    )
    with held_app.start() as stack:
        s = Scope()
        past = (slice_ + held) * PUMP_SLICE  # the first position past the held pump's subtree
        late = s.event("late")
        group = s.group([event(late) if i == past else echo(i) for i in range(width)])
        caller = turn_in_background(stack, s, combine("all_settled", group))
        # The held pump, asleep before its first call: the second slice's, or the group's own.
        clause = f"ends_with(target_service_key, {quote(f'.1:{s.key()}' if slice_ else f':{s.key()}')})"
        query = _invocation("LashPump", clause, "run2")
        [row] = await _poll(stack, query, lambda rows: [r["status"] for r in rows] in _STARTED)
        _operator(stack, tmp_path, "cancel", row["id"])
        if past < width:
            await until(lambda: asyncio.to_thread(group_events, base, "group.run_ended", s.key()))
            await stack.emit(late, "late")
        answered = await asyncio.wait_for(caller, 120)
        assert answered.status_code == 200, answered.text
        [read] = answered.json()
        # What the held pump's subtree runs.
        cut = range(slice_ * PUMP_SLICE, min(width, past))
        assert ok(read)["value"] == [  # in input order
            {"type": "cancelled"} if p in cut else {"type": "ok", "value": "late" if p == past else p}
            for p in range(width)
        ]
        assert [e["children"] for e in group_events(base, "group.run_ended", s.key())] == [len(cut)]
        await until(functools.partial(_nothing_left, stack, s.key()))


@pytest.mark.parametrize("action", ["kill", "cancel"])
async def test_killing_or_cancelling_a_direct_childs_settle_with_restates_cli_still_ranks_the_child(
    stack: LocalStack, tmp_path: Path, action: str
) -> None:
    """`restate invocations kill` (or `cancel`) of the `LashGroup/settle` a direct child's run sent,
    before it ran (here it is held by a deployment that does not answer; on a busy cluster, behind
    the group's other work): the run itself ended normally. The group's watch of that run watches the
    settle the run answered, so the child settles again from its store, with its real outcome, and
    the caller waiting on it goes on."""
    s = Scope()
    gate = tmp_path / "gate"
    group = s.group([tool("blob", {"size": 3, "after": str(gate)}), event(s.event("never"))], wake="first")
    caller = turn_in_background(stack, s, open_(group), next_(), close())
    key = f"target_service_key = {quote(s.key())}"
    # The caller's wake is registered and the group's watch of its runs attached (a second after the
    # open), both on the first deployment.
    wait = _invocation("LashGroup", key, "wait")
    await _poll(stack, wait, lambda rows: [r["status"] for r in rows] == ["completed"])
    watch = _invocation("LashGroup", key, "watch_runs")
    await _poll(stack, watch, lambda rows: [r["status"] for r in rows] in _STARTED)
    settles = (
        "SELECT id, status, completion_failure FROM sys_invocation WHERE target_service_name = "
        f"'LashGroup' AND {key} AND target_handler_name = 'settle' ORDER BY created_at"
    )
    with unanswered(stack):
        gate.touch()  # the child's tool answers; the settle its run sends waits on the stopped endpoint
        [settle] = await _poll(stack, settles, lambda rows: len(rows) == 1)
        run = _invocation("LashChild", f"target_service_key = {quote(s.key() + '/c0')}", "run")
        await _poll(stack, run, lambda rows: [r["status"] for r in rows] == ["completed"])
        _operator(stack, tmp_path, action, settle["id"])
    [ended, *_] = await _poll(stack, settles, lambda rows: rows[0]["status"] == "completed")
    assert ("killed" if action == "kill" else "cancel") in ended["completion_failure"].lower(), ended
    answered = await asyncio.wait_for(caller, 60)
    assert answered.status_code == 200, answered.text
    [_, first, closed] = answered.json()
    assert (ok(first)["rank"], ok(first)["position"]) == (1, 0)
    assert ok(first)["outcome"] == {"type": "ok", "value": "xxx"}
    assert "error" not in closed
    # It was ranked by a second settle, which the child's store sent when the group heard of the first.
    [_, again] = await _poll(stack, settles, lambda rows: len(rows) == 2 and rows[1]["status"] == "completed")
    assert again.get("completion_failure") is None, again


async def test_killing_a_direct_childs_settle_while_it_is_queued_with_restates_cli_still_ranks_the_child(
    stack: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations kill` of the `LashGroup/settle` a direct child's run sent, while it is
    still queued behind the group's other work (here: a second reader's `wait`, held by a deployment
    of `LashGroup` alone that does not answer). Restate keeps nothing of a queued invocation it
    killed, so the group's watch (held there too) finds no settle where the run said it sent one:
    the child settles again from its store, with its real outcome, and the caller waiting on it
    reads it."""
    s, reader, second = Scope(), Scope(), Scope()
    gate = tmp_path / "gate"
    group = s.group([tool("blob", {"size": 3, "after": str(gate)}), event(s.event("never"))], wake="first")
    key = f"target_service_key = {quote(s.key())}"
    waits = _invocation("LashGroup", key, "wait") + " ORDER BY created_at"
    settles = _invocation("LashGroup", key, "settle")
    with unanswered(stack, "groups", service="LashGroup", paused=False) as held:
        [opened, _] = await stack.turn(open_(group), save())
        caller = turn_in_background(stack, reader, use(ok(opened)), next_(), close())
        # The caller's wake is registered (on the held deployment, still answering); then it stops
        # answering, holding the group's watch of its runs too (it starts a second after the open).
        await _poll(stack, waits, lambda rows: [r["status"] for r in rows] == ["completed"])
        held.pause()
        holder = turn_in_background(stack, second, use(ok(opened)), next_())  # its wait holds the key
        # Started on the held deployment, or queued behind the group's watch of its runs, which
        # started there first (a second after the open: on a slow run, before the pause): either way
        # what holds the group's key is held, and the settle queues behind it.
        await _poll(stack, waits, lambda rows: [r["status"] for r in rows][1:] in [*_STARTED, ["pending"]])
        gate.touch()  # the child's tool answers; the settle its run sends queues behind the wait
        [settle] = await _poll(stack, settles, lambda rows: [r["status"] for r in rows] == ["pending"])
        _operator(stack, tmp_path, "kill", settle["id"])
        await _poll(stack, settles, lambda rows: all(r["id"] != settle["id"] for r in rows))  # forgotten
    for reading in (caller, holder):
        answered = await asyncio.wait_for(reading, 60)
        assert answered.status_code == 200, answered.text
        [_, first, *closed] = answered.json()
        assert (ok(first)["rank"], ok(first)["position"]) == (1, 0)
        assert ok(first)["outcome"] == {"type": "ok", "value": "xxx"}
        assert all("error" not in c for c in closed)


async def test_a_caller_whose_open_restates_cli_killed_is_listed_and_answered_by_a_resend(
    stack: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations kill` of a caller's `LashGroup/open` (a reopen) while it is queued behind
    another caller's, held by a deployment of `LashGroup` alone that does not answer, and of a
    first open held there. Nothing else would answer either caller: `groups stranded` finds each
    open in its caller's journal, and `--resend` sends it again as a reopen: the reopening caller
    reads its ranks and closes; the first open, never recorded, is refused, and its caller ends with
    `group_not_open`. A caller answered is not listed, though it still waits (on its second rank)
    and Restate knows nothing of the open it sent first."""
    s, first, second, fresh = Scope(), Scope(), Scope(), Scope()
    later = s.event("later")
    group = s.group([echo("won"), event(later)], wake="first")
    [opened, _] = await stack.turn(open_(group), save())
    assert ok(opened)
    opens = "SELECT id, status FROM sys_invocation WHERE target_service_name = 'LashGroup' AND "
    opens += "target_handler_name = 'open' AND target_service_key = {} ORDER BY created_at"
    with unanswered(stack, "groups", service="LashGroup"):
        holder = turn_in_background(stack, first, open_(group), next_())  # its reopen holds the key
        await _poll(stack, opens.format(quote(s.key())), lambda rows: len(rows) == 2)
        reader = turn_in_background(stack, second, open_(group), next_(), next_(), close())
        [*_, queued] = await _poll(stack, opens.format(quote(s.key())), lambda rows: len(rows) == 3)
        _operator(stack, tmp_path, "kill", queued["id"])
        await _poll(
            stack, opens.format(quote(s.key())), lambda rows: queued["id"] not in {r["id"] for r in rows}
        )
        starter = turn_in_background(stack, fresh, open_(fresh.group([echo("never")])), next_())
        [held] = await _poll(stack, opens.format(quote(fresh.key())), lambda rows: len(rows) == 1)
        _operator(stack, tmp_path, "kill", held["id"])
        await _poll(stack, opens.format(quote(fresh.key())), lambda rows: rows[0]["status"] == "completed")
    assert ok((await asyncio.wait_for(holder, 60)).json()[1])["position"] == 0
    callers = {
        await turn_id(stack, second): (s.key(), queued["id"]),
        await turn_id(stack, fresh): (fresh.key(), held["id"]),
    }
    # The reopen killed while queued is known to Restate no more: as an open sent a moment ago and
    # not yet at its group, it is listed only once its caller sent it long enough ago.
    recent = lash(stack, "groups", "stranded", "--json", "--sent-before", "3600")
    assert recent.returncode == 0, recent.stderr
    assert [o["caller"] for o in json.loads(recent.stdout)] == [await turn_id(stack, fresh)]
    found = lash(stack, "groups", "stranded", "--json", "--sent-before", "0")
    assert found.returncode == 0, found.stderr
    listed_ = {o["caller"]: (o["group_key"], o["sent"]) for o in json.loads(found.stdout)}
    assert listed_ == callers and not reader.done() and not starter.done()
    resent = lash(stack, "groups", "stranded", "--resend", "--sent-before", "0")
    assert resent.returncode == 0 and resent.stdout.count("sent again as inv_") == 2, resent
    refused = (await asyncio.wait_for(starter, 60)).json()
    assert err(refused[0])["code"] == "group_not_open", refused
    await until(lambda: _none_stranded(stack))
    await stack.emit(later, 1)
    answered = await asyncio.wait_for(reader, 60)
    assert answered.status_code == 200, answered.text
    [_, one, two, closed] = answered.json()
    assert [ok(r)["position"] for r in (one, two)] == [0, 1] and "error" not in closed
    # The group object sends nothing but an open request again, and refuses the rest at once.
    api, ingress = admin_api(stack.server.admin_url), stack.server.ingress_url
    for handler, request, why in (
        ("close", b"{}", "only an open"),
        ("open", b"[1]", "not a .open. request"),
    ):
        with pytest.raises(InspectionError, match=why):
            operator_call(
                api, ingress, s.key(), GROUP_OPERATOR_RESEND, OperatorResend(handler=handler, request=request)
            )


async def test_a_caller_whose_open_in_parts_restates_cli_killed_is_answered_by_a_resend(
    tmp_path: Path,
) -> None:
    """The same for an open in parts: `restate invocations kill` of a first `LashGroup/open_parts`,
    held by a deployment of `LashGroup` alone that does not answer once its caller has staged the
    children with their pumps. `groups stranded` lists it, and `--resend` sends it again as a
    reopen: never recorded, the group refuses it, its caller ends with `group_not_open`, and the
    parts it staged are released."""
    fresh = Scope()
    opens = "SELECT id, status FROM sys_invocation WHERE target_service_name = 'LashGroup' AND "
    opens += f"target_handler_name = 'open_parts' AND target_service_key = {quote(fresh.key())}"
    staged = staged_query(fresh.key())
    with LocalStack.single(tmp_path / "stack", endpoint_env={PARTS_FROM_ENV: "1"}).start() as stack:
        with unanswered(stack, "groups", service="LashGroup"):
            starter = turn_in_background(stack, fresh, open_(fresh.group([echo("never")])), next_())
            [held] = await _poll(stack, opens, lambda rows: len(rows) == 1)
            _operator(stack, tmp_path, "kill", held["id"])
            await _poll(stack, opens, lambda rows: rows[0]["status"] == "completed")
        assert await _poll(stack, staged, lambda rows: len(rows) == 1)  # its one part, staged
        found = lash(stack, "groups", "stranded", "--json")
        assert found.returncode == 0, found.stderr
        assert [(o["group_key"], o["sent"]) for o in json.loads(found.stdout)] == [(fresh.key(), held["id"])]
        resent = lash(stack, "groups", "stranded", "--resend")
        assert resent.returncode == 0 and resent.stdout.count("sent again as inv_") == 1, resent
        refused = (await asyncio.wait_for(starter, 60)).json()
        assert err(refused[0])["code"] == "group_not_open", refused
        await _poll(stack, staged, lambda rows: not rows)


@pytest.mark.parametrize("parts", [False, True], ids=["one-message", "in-parts"])
async def test_a_caller_whose_running_open_restates_cli_killed_ends_with_a_typed_error(
    tmp_path: Path, parts: bool
) -> None:
    """`restate invocations kill` of a group's first `LashGroup/open` (`open_parts`) while it runs,
    once it has answered its caller and sent what runs the children, held there by a deployment of
    `LashGroup` alone before it records what it sent. Restate's kill also kills each invocation the
    open sent (a child's own run, or the group's pump and what it runs), so no child will ever
    settle. The caller, answered and waiting on its first rank, hears of the kill from the open's end
    and ends with `group_not_open` naming the group, where it waited for ever: narrow, pumped (a
    bounded group) and opened in parts."""
    narrow, pumped = Scope(), Scope()
    # Events nobody emits: children that end only as the kill ends them. (A call child's target the
    # deployment of `LashGroup` alone could not route: it would refuse the open.)
    never = [event(pumped.event("never")), event(pumped.event("nor"))]
    # Opened in parts, a group is pumped, and a bounded one opens in one message.
    groups = [(pumped, pumped.group(never, max_in_flight=None if parts else 1))]
    if not parts:
        groups.insert(0, (narrow, narrow.group([event(narrow.event("never"))])))
    env = {PARTS_FROM_ENV: "1"} if parts else {}
    with (
        LocalStack.single(tmp_path / "stack", endpoint_env=env).start() as stack,
        unanswered(stack, "groups", service="LashGroup", paused=False, hold="open-answered"),
    ):
        for s, group in groups:
            key = f"target_service_key = {quote(s.key())}"
            caller = turn_in_background(stack, s, open_(group), next_())
            # Answered: the caller asks for its first rank, which waits behind the open held.
            await _poll(stack, _invocation("LashGroup", key, "wait"), lambda rows: len(rows) == 1)
            opens = _invocation("LashGroup", key, "open_parts" if parts else "open")
            [held] = await _poll(stack, opens, lambda rows: len(rows) == 1)
            sent = (
                "SELECT id, completion_failure FROM sys_invocation WHERE status = 'completed' AND "
                f"invoked_by_id = {quote(held['id'])} "
                "AND target_handler_name IN ('run', 'run2', 'run_parts')"
            )
            _operator(stack, tmp_path, "kill", held["id"])
            [opened, read] = (await asyncio.wait_for(caller, 60)).json()
            assert ok(opened), opened
            assert err(read)["code"] == "group_not_open", read
            assert "open was killed" in err(read)["message"] and s.key() in str(read), read
            # What the open sent was killed with it: the children's run, or the group's pump.
            ran = await _poll(stack, sent, lambda rows: bool(rows))
            assert all("killed" in row.get("completion_failure", "") for row in ran), ran


async def test_a_caller_whose_running_open_restates_cli_cancelled_reads_on_and_is_shown_holding_it(
    stack: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations cancel` of a group's first `LashGroup/open` while it runs, held as above:
    Restate's cancel reaches only what the open awaits, so the open ends cancelled before it records
    its opener, and the children it sent run on. The caller reads every rank and closes. Meanwhile
    `groups list` shows the group open, held by its caller (found in the caller's journal), where it
    listed it orphaned and `groups close` without `--force` would have ended that caller."""
    s = Scope()
    first, second = s.event("first"), s.event("second")
    key = f"target_service_key = {quote(s.key())}"
    opens = _invocation("LashGroup", key, "open")
    with unanswered(stack, "groups", service="LashGroup", paused=False, hold="open-answered"):
        caller = turn_in_background(stack, s, open_(s.group([event(first), event(second)])), next_(), next_())
        await _poll(stack, _invocation("LashGroup", key, "wait"), lambda rows: len(rows) == 1)
        [held] = await _poll(stack, opens, lambda rows: len(rows) == 1)
        _operator(stack, tmp_path, "cancel", held["id"])
        await _poll(stack, opens, lambda rows: rows[0]["status"] == "completed")
        listed = lash(stack, "groups", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [g["state"] for g in json.loads(listed.stdout) if g["group_key"] == s.key()] == ["open"]
        shown = await asyncio.to_thread(show_group, stack.admin_url, s.key())
        assert shown is not None and await turn_id(stack, s) in shown.reason, shown
        refused = lash(stack, "groups", "close", s.key())
        assert refused.returncode == 4 and "it is open" in refused.stderr, refused
        await stack.emit(first, 1)
        await stack.emit(second, 2)
        [opened, one, two] = (await asyncio.wait_for(caller, 60)).json()
    assert ok(opened) and sorted(ok(r)["position"] for r in (one, two)) == [0, 1], (one, two)


async def test_a_caller_cancelled_while_it_stages_an_open_in_parts_leaves_nothing_staged(
    tmp_path: Path,
) -> None:
    """`restate invocations cancel` of a caller while the pumps it stages its children with are held
    (a deployment of `LashPump` alone that does not answer): no open follows, and the part it staged
    is released once the pump runs, where it was kept for ever (nothing names it but the pump's
    own state)."""
    s = Scope()
    staged = staged_query(s.key())
    stages = "SELECT id FROM sys_invocation WHERE target_service_name = 'LashPump' "
    stages += "AND target_handler_name = 'stage'"
    turns = _invocation("LashTurn", "true", "run")
    with LocalStack.single(tmp_path / "stack", endpoint_env={PARTS_FROM_ENV: "1"}).start() as stack:
        with unanswered(stack, "pumps", service="LashPump"):
            caller = turn_in_background(stack, s, open_(s.group([echo("never")])), next_())
            await _poll(stack, stages, lambda rows: len(rows) == 1)
            [turn] = await _poll(stack, turns, lambda rows: len(rows) == 1)
            _operator(stack, tmp_path, "cancel", turn["id"])
        answered = await asyncio.wait_for(caller, 60)
        assert answered.status_code != 200, answered.text  # cancelled
        await _poll(stack, stages + " AND status = 'completed'", lambda rows: len(rows) == 1)
        await _poll(stack, staged, lambda rows: not rows)


async def test_a_second_resend_while_the_open_sent_again_is_on_its_way_sends_nothing(
    stack: LocalStack, tmp_path: Path
) -> None:
    """`groups stranded --resend` run again while the open the first run sent again is still on its way
    (held by a deployment whose `open` runs nothing): its caller is listed no more and nothing is
    sent a second time. Once Restate ends that open too, unanswered, the caller is listed again."""
    fresh = Scope()
    opens = "SELECT id, status FROM sys_invocation WHERE target_service_name = 'LashGroup' AND "
    opens += f"target_handler_name = 'open' AND target_service_key = {quote(fresh.key())} ORDER BY created_at"
    with unanswered(stack, "groups", service="LashGroup", paused=False, hold="open"):
        starter = turn_in_background(stack, fresh, open_(fresh.group([echo("never")])), next_())
        try:
            [held] = await _poll(stack, opens, lambda rows: len(rows) == 1)
            _operator(stack, tmp_path, "kill", held["id"])
            await _poll(stack, opens, lambda rows: rows[0]["status"] == "completed")
            first = lash(stack, "groups", "stranded", "--resend", "--sent-before", "0")
            assert first.returncode == 0 and first.stdout.count("sent again as inv_") == 1, first
            [_, resent] = await _poll(stack, opens, lambda rows: len(rows) == 2)
            second = lash(stack, "groups", "stranded", "--resend", "--sent-before", "0")
            assert second.returncode == 0, second.stderr
            assert (
                second.stdout.strip()
                == "no caller waits for an open that ended unanswered, nor on a group whose record is gone, "
                "nor on an event that lost its subscription"
            ), second.stdout
            _operator(stack, tmp_path, "kill", resent["id"])
            await _poll(stack, opens, lambda rows: rows[1]["status"] == "completed")
            again = lash(stack, "groups", "stranded", "--json", "--sent-before", "0")
            assert [o["caller"] for o in json.loads(again.stdout)] == [await turn_id(stack, fresh)]
        finally:
            starter.cancel()  # its caller waits for an answer this deployment never gives


async def _none_stranded(stack: LocalStack) -> bool:
    found = await asyncio.to_thread(lash, stack, "groups", "stranded", "--json", "--sent-before", "0")
    return found.returncode == 0 and json.loads(found.stdout) == []


async def test_killing_the_report_of_a_killed_run_while_it_is_queued_with_restates_cli_still_ranks_it(
    stack: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations kill` of a child's `LashChild/run`, then of the `LashGroup/run_ended` the
    group's watch sent to settle that child as killed, while the report is queued behind the group's
    other work (here: a second reader's `wait`, held by a deployment of `LashGroup` alone that does
    not answer). The watch waits until the group has heard, and reports again: the child settles as
    killed and takes its rank, and the caller waiting on it goes on."""
    s, reader, second = Scope(), Scope(), Scope()
    name = f"{s.id}-slow"
    group = s.group([count(name, "slow", delay_ms=120_000), echo("fast")])  # two: a direct group
    [opened, _] = await stack.turn(open_(group), save())
    key = f"target_service_key = {quote(s.key())}"
    watch = _invocation("LashGroup", key, "watch_runs")
    await _poll(stack, watch, lambda rows: [r["status"] for r in rows] in _STARTED)  # on this deployment
    caller = turn_in_background(stack, reader, use(ok(opened)), next_(), next_(), close())
    waits = _invocation("LashGroup", key, "wait") + " ORDER BY created_at"
    await _poll(stack, waits, lambda rows: [r["status"] for r in rows] == ["completed"] * 2)  # rank 2's wake
    reports = _invocation("LashGroup", key, "run_ended")
    with unanswered(stack, "groups", service="LashGroup"):
        holder = turn_in_background(stack, second, use(ok(opened)), next_())  # its wait holds the key
        await _poll(stack, waits, lambda rows: [r["status"] for r in rows][2:] in _STARTED)
        run = _invocation("LashChild", f"target_service_key = {quote(s.key() + '/c0')}", "run")
        [row] = await _poll(stack, run, lambda rows: len(rows) == 1)
        _operator(stack, tmp_path, "kill", row["id"])
        [report] = await _poll(stack, reports, lambda rows: [r["status"] for r in rows] == ["pending"])
        _operator(stack, tmp_path, "kill", report["id"])
        # The watch hears its report killed, and reports again, queued behind the wait as well.
        await _poll(stack, reports, lambda rows: any(r["id"] != report["id"] for r in rows))
    answered = await asyncio.wait_for(caller, 60)
    assert answered.status_code == 200, answered.text
    [_, fast, slow, closed] = answered.json()
    assert (ok(fast)["rank"], ok(fast)["outcome"]) == (1, {"type": "ok", "value": "fast"})
    assert (ok(slow)["rank"], ok(slow)["position"], ok(slow)["outcome"]) == (2, 0, KILLED)
    assert "error" not in closed
    assert ok((await asyncio.wait_for(holder, 60)).json()[1])["rank"] == 1


@SHARED
@pytest.mark.parametrize("action", ["kill", "cancel"])
async def test_killing_or_cancelling_a_groups_own_watches_with_restates_cli_changes_no_answer(
    shared: LocalStack, tmp_path: Path, action: str
) -> None:
    """`restate invocations kill` (or `cancel`) of what a group runs beside its children while its
    caller waits: its watch of what it dispatched and of its opener (`watch_runs`), its hold of a
    caller that saved its handle (`hold`), a `Cancel` group's watch of its opener (`watch`). Each
    only reports to the group; killed or cancelled, it reports nothing (a watch tells its own cancel
    from its opener's end), and the caller still reads every rank, closes, and leaves nothing
    behind. A cancelled `watch` reported its opener failed, and the group cancelled its children."""
    cases = {"watch_runs": ("run_to_completion", False), "hold": ("run_to_completion", True)}
    cases["watch"] = ("cancel", False)
    callers = {}
    for handler, (disposition, saves) in cases.items():
        s = Scope()
        group = s.group([echo("won"), event(s.event("later"))], wake="first", disposition=disposition)
        steps = [open_(group), next_(), *([save()] if saves else []), next_(), close()]
        callers[handler] = (s, turn_in_background(shared, s, *steps))
    for handler, (s, _) in callers.items():
        query = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", handler)
        [row] = await _poll(shared, query, lambda rows: [r["status"] for r in rows] in _STARTED)
        _operator(shared, tmp_path, action, row["id"])
        await _poll(shared, query, lambda rows: [r["status"] for r in rows] == ["completed"])
    for handler, (s, caller) in callers.items():
        await shared.emit(s.event("later"), handler)
        answered = await caller
        assert answered.status_code == 200, answered.text
        *_, last, closed = answered.json()
        assert (ok(last)["rank"], ok(last)["outcome"]) == (2, {"type": "ok", "value": handler})
        assert "error" not in closed
        await until(functools.partial(_nothing_left, shared, s.key()))


@pytest.fixture
def reclaiming(tmp_path: Path) -> Iterator[LocalStack]:
    """A stack whose endpoint reclaims a group nobody can resume two seconds after it was orphaned,
    and looks every second for a waiting caller's group whose record is gone."""
    # Verbose: the groups' events, logged. Every pumped group paged, so the reclaim's count of ranks
    # is read from the pages too.
    env = {"LASH_ORPHAN_RETENTION": "2s", "LASH_WAITER_CHECK": "1s", "LASH_VERBOSE": "1"}
    env["LASH_PAGE_FROM"] = "1"
    with LocalStack.single(tmp_path / "stack", endpoint_env=env).start() as s:
        yield s
    check_group_events(tmp_path / "stack" / "endpoint.log")  # each event names its group, and more


async def test_a_group_whose_opener_was_killed_or_cancelled_is_reclaimed_and_a_saved_one_is_kept(
    reclaiming: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations kill` (or `cancel`) of a caller waiting on its group, with no handle saved:
    nobody can resume the group. `groups list` says when it will be reclaimed; once the retention has
    passed and its children have settled (a `RunToCompletion` loser ran to its end; a `Cancel`
    group's were cancelled), it is closed and nothing of it is left. A group whose caller saved its
    handle, then was killed, is never due (whoever holds the handle may resume it); nor is a parked one."""
    stack = reclaiming
    parked = await parked_group(stack, event(Scope().event("never")))
    savers = []
    kept = {"run_to_completion": Scope(), "cancel": Scope()}
    for disposition, scope in kept.items():
        group = scope.group([echo("won"), event(scope.event("never"))], wake="first", disposition=disposition)
        savers.append(turn_in_background(stack, scope, open_(group), next_(), save(), next_()))
        # Saved: the group holds the saver (it watches a Cancel group's openers anyway) and records it.
        await until(
            functools.partial(_saved, stack, scope.key(), "hold" if disposition != "cancel" else None)
        )
        _operator(stack, tmp_path, "kill", await turn_id(stack, scope))

    killed, cancelled, paged = Scope(), Scope(), Scope()
    name = f"{killed.id}-slow"
    loser = killed.group([echo("won"), count(name, "slow", delay_ms=6000)], wake="first")
    gone = cancelled.group([echo("won"), event(cancelled.event("never"))], wake="first", disposition="cancel")
    calls = paged.group([echo("won", kind="calls"), echo("late", delay_ms=6000, kind="calls")], wake="first")
    openers = []
    ended_at: dict[str, float] = {}
    # Each opener is killed (or cancelled) while its slow child still runs: started just before.
    for scope, group, action in (
        (killed, loser, "kill"),
        (cancelled, gone, "cancel"),
        (paged, calls, "kill"),
    ):
        openers.append(turn_in_background(stack, scope, open_(group), next_(), next_()))  # paged: pumped
        await until(functools.partial(listed, stack, scope.key(), "open"))
        ended_at[scope.key()] = time.time()
        _operator(stack, tmp_path, action, await turn_id(stack, scope))
    for opener in [*savers, *openers]:
        assert (await opener).status_code != 200

    row = await until(lambda: _due(stack, killed.key()))
    assert row.reclaim_at is not None and row.reclaim_at.endswith("Z")
    # Due a retention (2 s) after the group heard of the kill, shown to the second: not before it.
    due = datetime.fromisoformat(row.reclaim_at.replace("Z", "+00:00")).timestamp()
    assert due >= ended_at[killed.key()] + 1, (row.reclaim_at, ended_at)
    table = lash(stack, "groups", "list")
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[-1] == "RECLAIM", table.stdout
    [line] = [line for line in table.stdout.splitlines() if line.startswith(killed.key())]
    assert line.split()[-2] == "in" or line.split()[-1] == "due", line
    for scope in (killed, cancelled, paged):
        await until(functools.partial(_nothing_left, stack, scope.key()))
    assert stack.counts().count(name) == 1  # the loser ran to its end
    for scope in (killed, cancelled, paged):  # and its group was closed once every child had settled
        [closed] = group_events(tmp_path / "stack", "group.closed", scope.key())
        assert closed["settled"] == 2 and group_events(tmp_path / "stack", "group.reclaimed", scope.key())

    for scope in kept.values():
        await until(functools.partial(_opener_ended, stack, scope.key()))  # the group heard of the kill
        assert not await asyncio.to_thread(sql, stack.server.admin_url, _reclaims(scope.key()))
        still = await listed(stack, scope.key(), "orphaned")
        assert still is not None and still.reclaim_at is None
        # What its opener saved may be held: an operator's close without --force refuses it, as a parked one.
        refused = lash(stack, "groups", "close", scope.key())
        assert refused.returncode == 4 and "an opener saved its handle" in refused.stderr, refused
        assert await listed(stack, scope.key(), "orphaned")
    assert await listed(stack, parked.key(), "parked")


@pytest.mark.parametrize(
    ("kind", "resumed"),
    [("tools", False), ("calls", False), ("tools", True)],
    ids=["direct", "pumped-paged", "resumed"],
)
async def test_clearing_a_groups_state_with_restates_cli_ends_its_waiting_caller_with_a_typed_error(
    reclaiming: LocalStack, tmp_path: Path, kind: Literal["tools", "calls"], resumed: bool
) -> None:
    """`restate state clear LashGroup/KEY` under a caller waiting on a rank deletes the group's record
    outside lash, the caller's registered wake among it (registered by the open, or by a resumer's
    read). The caller ends, typed (`group_not_open`, naming the group), as a close under it would end
    it: never a hang, never another group's rank. The child that settles later finds nothing to rank
    into, and nothing of the group is left but what a narrow group's child had stored before the clear,
    which `groups staged` lists and releases."""
    stack = reclaiming
    s = Scope()
    group = s.group([echo("a", kind=kind), event(s.event("later"))])
    if resumed:  # its opener read rank 1 and saved its handle; a continuation waits on rank 2
        [_, first, saved] = await stack.turn(open_(group), next_(), save())
        caller = turn_in_background(stack, s, use(ok(saved)), next_(), close())
    else:
        caller = turn_in_background(stack, s, open_(group), next_(), next_(), close())
    # Each `next` asks the group first; once the second has had its answer, the caller awaits the wake
    # for rank 2 that the open registered, with nothing left to send.
    asked = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "wait")
    await _poll(stack, asked, lambda rows: [r["status"] for r in rows] == ["completed"] * 2)
    # And once its guard has looked at them and found them waiting (so it looks again).
    guards = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "guard")
    rows = await _poll(stack, guards, lambda rows: "completed" in [r["status"] for r in rows])
    # Its next look is kept with the group's watches, so a close cancels it (decision 83): read again
    # until no look runs, as one may start between the two reads on a busy machine.
    looked = {r["id"] for r in rows if r["status"] == "completed"}

    async def next_look_kept() -> bool:
        kept = await _guarded(stack, s.key())
        scheduled = [await _status(stack, guard) == "scheduled" for guard in kept]
        return bool(kept) and looked.isdisjoint(kept) and all(scheduled)

    await until(next_look_kept)
    # `--force`: without it Restate applies the clear only if the state is still the version the CLI
    # read, and drops it (the CLI still succeeds) if a guard's look rewrote it in between.
    clear = ("state", "clear", f"LashGroup/{s.key()}", "--force")
    cleared = await asyncio.to_thread(restate, stack, tmp_path, *clear)
    assert cleared.returncode == 0, cleared.stderr
    await until(lambda: _no_record(stack, s.key()))
    async with asyncio.timeout(60):
        answered = await caller
    assert answered.status_code == 200, answered.text
    if resumed:
        [_, waited, closed] = answered.json()
    else:
        [_, first, waited, closed] = answered.json()
    assert ok(first)["outcome"] == {"type": "ok", "value": "a"}
    assert waited["error"]["code"] == "group_not_open", waited
    assert "deleted while awaiting" in waited["error"]["message"], waited  # its wake ended, not a read
    assert s.key() in json.dumps(waited["error"]), waited
    assert "error" not in closed  # a close of a group that is not recorded is a no-op
    # The operator's log says so, naming the group (one line per look that found the record gone).
    gone = group_events(tmp_path / "stack", "group.record_gone", s.key())
    assert gone and all(event["waiters"] >= 1 for event in gone), gone
    await stack.emit(s.event("later"), "late")  # the child settles into nothing, and releases its store

    async def only_the_first_childs_store() -> bool:
        # A clear outside lash tells nobody to release what the children that had settled keep: a
        # direct child's stored outcome stays (the operator's guide says so); nothing else does.
        left = {row["service_key"] for row in await stores_left(stack, s.key())}
        return (
            not await state_rows(stack, s.key())
            and not await unfinished(stack, s.key())
            and (left <= {f"{s.key()}/c0"})
        )

    await until(only_the_first_childs_store)
    if kind == "tools":  # a narrow group's child keeps its own: `groups staged` lists and releases it
        listed_ = lash(stack, "groups", "staged", "--json", "--key", s.key())  # this group's alone
        assert listed_.returncode == 0, listed_.stderr
        [left] = json.loads(listed_.stdout)
        assert left.get("child_key") == f"{s.key()}/c0", left
        assert left["holds"] == "child-outcome" and len(left["incarnations"]) == 1, left
        released = lash(stack, "groups", "staged", "--release")
        assert released.returncode == 0 and f"released the child {s.key()}/c0's outcome" in released.stdout

        async def nothing_left() -> bool:
            return not {row["service_key"] for row in await stores_left(stack, s.key())}

        await until(nothing_left)


@SHARED
@pytest.mark.parametrize("registered_by", ["open", "wait"])
async def test_a_caller_whose_groups_record_was_cleared_after_its_guard_was_killed_is_listed_and_ended(
    shared: LocalStack, tmp_path: Path, registered_by: str
) -> None:
    """`restate invocations kill` of a group's pending `LashGroup/guard`, then `restate state clear
    LashGroup/KEY` under a caller waiting on a rank: nothing is left to end the wake it waits on.
    `groups stranded` finds it in the caller's journal (the wake its open registered, or the one a
    later caller's `wait` did, after a reopen and waits that registered none: each answered with
    ranks), and `--resend` has the group look at it again: the caller ends with `group_not_open`,
    as the guard would have ended it. Under a key another group was opened under since, the same,
    and that group is left as it was."""
    stack, s = shared, Scope()
    group = s.group([echo("a"), echo("b"), event(s.event("later"))])
    if registered_by == "wait":  # its opener read rank 1 and returned; another caller opens it again
        [_, first] = await stack.turn(open_(group), next_())
        assert ok(first)
        caller = turn_in_background(stack, s, open_(group), next_(), next_(), next_(), close())
    else:
        caller = turn_in_background(stack, s, open_(group), next_(), next_(), next_(), close())
    # Each `next` asks the group first; once the last has had its answer, the caller awaits the wake
    # for rank 3, registered by its open or (once ranks 1 and 2 were served) by that last `wait`.
    asked = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "wait")
    waits = 4 if registered_by == "wait" else 3
    await _poll(stack, asked, lambda rows: [r["status"] for r in rows] == ["completed"] * waits)
    guards = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "guard")
    pending = await _poll(
        stack, guards, lambda rows: bool(rows) and all(r["status"] == "scheduled" for r in rows)
    )
    waiting = await turn_id(stack, s)
    assert waiting not in {o["caller"] for o in _stranded(stack)}  # its group holds its wakes
    # A look at wakes the group recorded now holds is refused: its ranks and its own guard serve them.
    [meta] = await asyncio.to_thread(sql, stack.server.admin_url, _record_of(s.key()))
    record = msgspec.json.decode(meta["value_utf8"], type=GroupMeta)
    held = StrandedWakes(
        waiting, s.key(), "open", "-", "-", record.incarnation, (record.waiters[-1].awakeable,)
    )
    with pytest.raises(InspectionError, match="the group that registered these wakes is recorded"):
        look_again(stack.server.admin_url, held, ingress=stack.server.ingress_url)
    cleared = await asyncio.to_thread(
        restate, stack, tmp_path, "state", "clear", f"LashGroup/{s.key()}", "--force"
    )
    assert cleared.returncode == 0, cleared.stderr
    await until(lambda: _no_record(stack, s.key()))
    if registered_by == "open":  # a clear alone: listed, its guard named, which ends it minutes later
        [found] = [o for o in _stranded(stack) if o["caller"] == waiting]
        assert found["guards_pending"] == sorted(g["id"] for g in pending), found
        assert "guards of the key are still pending" in found["ended"], found
    for guard in pending:
        _operator(stack, tmp_path, "kill", guard["id"])
    # Every guard of the key has ended (killed: Restate keeps nothing of a scheduled invocation it
    # killed), and none was sent for the look refused (it would be scheduled, minutes ahead).
    await _poll(stack, guards, lambda rows: all(r["status"] == "completed" for r in rows))
    assert not caller.done()
    if registered_by == "wait":  # another group opened under the key since: its record holds none of them
        [reopened, _] = await stack.turn(open_(s.group([event(s.event("again"))])), save())
        assert ok(reopened)
    [found] = [o for o in _stranded(stack) if o["caller"] == waiting]
    assert (found["group_key"], found["waits_on"], found["handler"]) == (s.key(), "wakes", registered_by)
    # Its wake for rank 3 alone: the others fired, or were never registered.
    assert found["wakes"] == 1 and "record is gone (its state was cleared)" in found["ended"], found
    assert ("another group was opened" in found["ended"]) == (registered_by == "wait"), found
    if registered_by == "open":
        assert found["guards_pending"] == [] and "no guard of the key is pending" in found["ended"], found
    else:  # another group is recorded under the key: its own guards are not looked for
        assert found["guards_pending"] is None, found
    # Other tests on this stack may leave callers of their own listed: only this one is sent again.
    resent = lash(stack, "groups", "stranded", "--resend", "--caller", waiting, "--sent-before", "3600")
    [line] = resent.stdout.splitlines()
    assert line.startswith(f"{waiting} waits on 1 wake") and "looked at again by inv_" in line, resent
    async with asyncio.timeout(60):
        answered = await caller
    assert answered.status_code == 200, answered.text
    [*_, waited, closed] = answered.json()
    assert waited["error"]["code"] == "group_not_open", waited
    assert "deleted while awaiting" in waited["error"]["message"] and s.key() in json.dumps(waited), waited
    assert "error" not in closed
    assert waiting not in {o["caller"] for o in _stranded(stack)}
    if registered_by == "wait":
        assert await listed(stack, s.key(), "parked")  # the group opened since is left as it was
        assert lash(stack, "groups", "close", s.key(), "--force", "--cancel").returncode == 0
    await stack.emit(s.event("later"), "late")


@SHARED
@pytest.mark.parametrize("width", [2, 3], ids=["direct", "pumped"])
async def test_an_event_child_whose_subscription_restates_cli_cleared_is_listed_and_subscribed_again(
    shared: LocalStack, tmp_path: Path, width: int
) -> None:
    """`restate state clear LashSignal/{event}` under a waiting event child deletes its subscription:
    the event's next emit answers nobody, and the child, its rank and the caller waiting on that rank
    would wait for ever. `groups stranded` finds the subscription in the child's journal, and
    `--resend` has the event send it to itself again: answered at once with the payload the event
    kept, the child settles and the caller reads its rank. The child runs by itself (`LashChild/run`,
    a narrow group of tools and events) or is called by its group's pump (`execute2`, three wide)."""
    stack, s = shared, Scope()
    later = s.event("later")
    tools = [echo(chr(ord("a") + i)) for i in range(width - 1)]
    reads = [next_() for _ in range(width)]
    caller = turn_in_background(stack, s, open_(s.group([*tools, event(later)])), *reads, close())
    child_key = f"{s.key()}/c{width - 1}"
    child = (
        "SELECT id, status FROM sys_invocation WHERE target_service_name = 'LashChild' "
        f"AND target_service_key = {quote(child_key)}"
    )
    [run] = await _poll(stack, child, lambda rows: len(rows) == 1)
    # Its subscription has run: the event holds it.
    subscribed = _invocation("LashSignal", f"target_service_key = {quote(later)}", "subscribe")
    await _poll(stack, subscribed, _completed)
    assert await asyncio.to_thread(stack.waiters, later) == 1
    assert run["id"] not in {o["caller"] for o in _stranded(stack)}  # its event holds it
    cleared = await asyncio.to_thread(
        restate, stack, tmp_path, "state", "clear", f"LashSignal/{later}", "--force"
    )
    assert cleared.returncode == 0, cleared.stderr
    await until(lambda: asyncio.to_thread(lambda: stack.waiters(later) == 0))
    await stack.emit(later, "late")  # kept by the event, and answering nobody
    emitted = (
        "SELECT key FROM state WHERE service_name = 'LashSignal' "
        f"AND service_key = {quote(later)} AND key = 'payload'"
    )
    await _poll(stack, emitted, lambda rows: len(rows) == 1)
    [found] = [o for o in _stranded(stack) if o["caller"] == run["id"]]
    assert (found["waits_on"], found["event"], found["child"]) == ("event", later, child_key), found
    assert "no longer holds its subscription" in found["ended"], found
    assert not caller.done() and (await _status(stack, run["id"])) != "completed"
    resent = lash(stack, "groups", "stranded", "--resend", "--key", later, "--sent-before", "3600")
    [line] = resent.stdout.splitlines()
    assert line.startswith(run["id"]) and "subscribed again as inv_" in line, resent
    async with asyncio.timeout(60):
        answered = await caller
    assert answered.status_code == 200, answered.text
    [_, *read, closed] = answered.json()
    [*first, last] = [ok(r)["outcome"]["value"] for r in read]  # the tools' ranks, in either order
    assert (sorted(first), last) == ([chr(ord("a") + i) for i in range(width - 1)], "late")
    assert "error" not in closed
    assert run["id"] not in {o["caller"] for o in _stranded(stack)}


def _record_of(key: str) -> str:
    return (
        "SELECT value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(key)} AND key = 'meta'"
    )


def _completed(rows: list[dict[str, Any]]) -> bool:
    return [r["status"] for r in rows] == ["completed"]


def _stranded(stack: LocalStack) -> list[dict[str, Any]]:
    found = lash(stack, "groups", "stranded", "--json", "--sent-before", "3600")
    assert found.returncode == 0, found.stderr
    rows: list[dict[str, Any]] = json.loads(found.stdout)
    return rows


async def _no_record(stack: LocalStack, key: str) -> bool:
    query = (
        "SELECT key FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(key)} AND key = 'meta'"
    )
    return not await asyncio.to_thread(sql, stack.server.admin_url, query)


def _operator(stack: LocalStack, tmp: Path, action: str, invocation: str) -> None:
    done = restate(stack, tmp, "invocations", action, invocation)
    assert done.returncode == 0, done.stderr


async def _due(stack: LocalStack, key: str) -> OpenGroup | None:
    row = await listed(stack, key, "orphaned")
    return row if row is not None and row.reclaim_at is not None else None


async def _saved(stack: LocalStack, key: str, handler: str | None) -> bool:
    """Whether the group has an invocation of ``handler`` (when one is named), or else whether it
    recorded that a caller saved its handle (its `savers` key)."""
    if handler is not None:
        query = _invocation("LashGroup", f"target_service_key = {quote(key)}", handler)
    else:
        query = (
            "SELECT key FROM state WHERE service_name = 'LashGroup' "
            f"AND service_key = {quote(key)} AND key = 'savers'"
        )
    return bool(await asyncio.to_thread(sql, stack.server.admin_url, query))


async def _opener_ended(stack: LocalStack, key: str) -> bool:
    """Whether the group's own record says its opener ended (what its watch of the opener reports)."""
    query = (
        "SELECT value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(key)} AND key = 'meta'"
    )
    rows = await asyncio.to_thread(sql, stack.server.admin_url, query)
    return bool(rows) and all(
        o.ended for o in msgspec.json.decode(rows[0]["value_utf8"], type=GroupMeta).openers
    )


def _reclaims(key: str) -> str:
    return _invocation("LashGroup", f"target_service_key = {quote(key)}", "reclaim")


@pytest.mark.parametrize(
    ("width", "action"), [(2, "kill"), (3, "kill"), (2, "cancel")], ids=["direct", "pumped", "cancel"]
)
async def test_killing_a_childs_subscription_to_its_event_with_restates_cli_settles_it_as_killed(
    stack: LocalStack, tmp_path: Path, width: int, action: str
) -> None:
    """`restate invocations kill` of the `LashSignal/{event}/subscribe` an event child (run by
    itself, or by its group's pump) sent, while it is queued behind the event's other work (here: a
    `clear` of the event held by a deployment of `LashSignal` that does not answer): the child
    watches its subscription too, so it settles as a killed callee answers its caller and takes its
    rank; the caller waiting on it goes on and closes. A cancel of it settles the child with that
    failure too."""
    s = Scope()
    name = s.event("later")
    # LashSignal's latest deployment; the rest stays where it was.
    with unanswered(stack, "signals", service="LashSignal"):
        async with httpx.AsyncClient() as client:  # a one-way `clear`, which holds the event's key there
            sent = await client.post(f"{stack.ingress_url}/LashSignal/{name}/clear/send", timeout=30)
        assert sent.status_code == 202, sent.text
        group = s.group([*[echo("won")] * (width - 1), event(name)])
        steps = [open_(group), *[next_() for _ in range(width)], close()]
        caller = turn_in_background(stack, s, *steps)
        query = _invocation("LashSignal", f"target_service_key = {quote(name)}", "subscribe")
        [row] = await _poll(stack, query, lambda rows: [r["status"] for r in rows] == ["pending"])  # queued
        await until(functools.partial(settled, stack, s.key(), width - 1))  # the echoes ranked first
        _operator(stack, tmp_path, action, row["id"])
    answered = await asyncio.wait_for(caller, 60)
    assert answered.status_code == 200, answered.text
    [_, first, *_, last, closed] = answered.json()
    assert ok(first)["outcome"] == {"type": "ok", "value": "won"}
    # Restate's own word for a queued invocation it cancelled.
    failed = KILLED if action == "kill" else {"type": "err", "code": "409", "message": "canceled"}
    assert (ok(last)["rank"], ok(last)["position"], ok(last)["outcome"]) == (width, width - 1, failed)
    assert "error" not in closed
    await until(functools.partial(_nothing_left, stack, s.key()))


@pytest.mark.parametrize("action", ["kill", "cancel"])
async def test_killing_or_cancelling_a_childs_report_of_its_miss_with_restates_cli_settles_it_as_failed(
    stack: LocalStack, tmp_path: Path, action: str
) -> None:
    """`restate invocations kill` (or `cancel`) of the `LashGroup/missed` a child sent when its runner
    went missing (its endpoint restarted without the tool), while the report waits behind the group's
    other work (here: on a deployment that does not answer). The child waits for its group to have
    the report, so it ends as the report did and is ranked so: 409, `killed` (or its report
    `cancelled`, never read as the child's own cancellation). The caller waiting on it goes on."""
    s = Scope()
    name = f"{s.id}-slow"
    group = s.group([count(name, "slow", delay_ms=60_000, slow_once=True), echo("fast")])
    caller = turn_in_background(stack, s, open_(group), next_(), next_(), close())
    await wait_tool_started(stack, name)
    await until(functools.partial(settled, stack, s.key(), 1))  # the fast child ranked first
    watch = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "watch_runs")
    await _poll(stack, watch, lambda rows: [r["status"] for r in rows] in _STARTED)
    with unanswered(stack):
        # The child's run, on the first endpoint, runs again there without the tool: a miss.
        await asyncio.to_thread(stack.restart_endpoint, LASH_DEMO_TOOLS_OFF="count")
        query = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "missed")
        [report] = await _poll(stack, query, lambda rows: len(rows) == 1)
        _operator(stack, tmp_path, action, report["id"])
    answered = await asyncio.wait_for(caller, 60)
    assert answered.status_code == 200, answered.text
    [_, fast, slow, closed] = answered.json()
    assert ok(fast)["outcome"] == {"type": "ok", "value": "fast"}
    assert (ok(slow)["rank"], ok(slow)["position"]) == (2, 0)
    message = "killed" if action == "kill" else "the report of this child's miss was cancelled"
    assert ok(slow)["outcome"] == {"type": "err", "code": "409", "message": message}
    assert "error" not in closed


async def test_a_pumped_childs_report_of_its_miss_killed_while_queued_settles_it_killed(
    stack: LocalStack, tmp_path: Path
) -> None:
    """As above, in a pumped group (three children: its pump reads how the child ended), the report
    killed while it is queued behind the group's other work on its key (the pump's report of two
    events' children, held on a deployment of `LashGroup` that does not answer). The child, attached
    to its report before the kill, hears 409 `killed` (not a 404 of an invocation Restate does not
    know, which its pump would read as a miss the group keeps), ends so, and is ranked so."""
    s = Scope()
    name = f"{s.id}-slow"
    children = [
        count(name, "slow", delay_ms=60_000, slow_once=True),
        event(s.event("a")),
        event(s.event("b")),
    ]
    caller = turn_in_background(stack, s, open_(s.group(children)), next_(), next_(), next_(), close())
    await wait_tool_started(stack, name)
    with unanswered(stack, service="LashGroup"):
        for each in "ab":
            await stack.emit(s.event(each), each)
        reports = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "report")
        await _poll(stack, reports, lambda rows: len(rows) >= 1)  # the pump's report of the events, held
        await asyncio.to_thread(stack.restart_endpoint, LASH_DEMO_TOOLS_OFF="count")
        query = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "missed")
        [report] = await _poll(stack, query, lambda rows: len(rows) == 1)
        _operator(stack, tmp_path, "kill", report["id"])
    answered = await asyncio.wait_for(caller, 60)
    assert answered.status_code == 200, answered.text
    [_, *read, closed] = answered.json()
    assert sorted(ok(r)["position"] for r in read) == [0, 1, 2]
    [slow] = [ok(r) for r in read if ok(r)["position"] == 0]
    assert slow["outcome"] == KILLED, slow
    assert "error" not in closed


async def test_a_run_killed_after_another_child_missed_its_runner_still_settles_as_killed(
    stack: LocalStack, tmp_path: Path
) -> None:
    """The group's watch of its runs goes on past a run that ended with a miss: `restate invocations
    kill` of the second child's `LashChild/run`, after the first child's run missed its tool (the
    endpoint restarted without it) and the group kept it, settles the second as killed, so the
    caller waiting on rank 1 reads it there; the missed child stays unranked. The watch is paused
    (`restate invocations pause`) while both runs end, and hears of them once resumed."""
    s = Scope()
    name = f"{s.id}-slow"
    gate = tmp_path / "gate"  # never opened: the second child runs until it is killed
    group = s.group(
        [count(name, "slow", delay_ms=60_000, slow_once=True), tool("blob", {"size": 3, "after": str(gate)})]
    )
    caller = turn_in_background(stack, s, open_(group), next_(), close())
    await wait_tool_started(stack, name)
    watch = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "watch_runs")
    [watching] = await _poll(stack, watch, lambda rows: [r["status"] for r in rows] in _STARTED)
    await asyncio.to_thread(_operator, stack, tmp_path, "pause", watching["id"])
    await _poll(stack, watch, lambda rows: rows[0]["status"] == "paused")
    await asyncio.to_thread(stack.restart_endpoint, LASH_DEMO_TOOLS_OFF="count")  # the first child misses
    await until(functools.partial(_missed, stack, s.key()))
    run = _invocation("LashChild", f"target_service_key = {quote(s.key() + '/c1')}", "run")
    [row] = await _poll(stack, run, lambda rows: [r["status"] for r in rows] in _STARTED)
    killed = await asyncio.to_thread(restate, stack, tmp_path, "invocations", "kill", row["id"])
    assert killed.returncode == 0, killed.stderr
    await _poll(stack, run, lambda rows: rows[0]["status"] == "completed")
    await asyncio.to_thread(_operator, stack, tmp_path, "resume", watching["id"])
    answered = await asyncio.wait_for(caller, 60)
    assert answered.status_code == 200, answered.text
    [_, first, closed] = answered.json()
    assert (ok(first)["rank"], ok(first)["position"], ok(first)["outcome"]) == (1, 1, KILLED)
    assert "error" not in closed


@pytest.mark.parametrize(
    ("target", "action"),
    [("report", "kill"), ("report", "cancel"), ("pump", "kill")],
    ids=["kill", "cancel", "pump"],
)
async def test_killing_or_cancelling_a_pumps_report_with_restates_cli_changes_no_answer(
    stack: LocalStack, tmp_path: Path, target: str, action: str
) -> None:
    """`restate invocations kill` (or `cancel`) of the `LashGroup/report` a pump called, while it
    waits behind the group's other work (here: on a deployment that does not answer), in a group
    that runs one child at a time: the pump reports again, and goes on starting the children it had
    not started, as it would have. The caller reads each child's real outcome at its rank. A kill of
    the pump itself then (`pump`), its first child's outcome stored and not yet reported: that child
    settles with its outcome, the two not yet started as killed."""
    s = Scope()
    gate = tmp_path / "gate"
    slow = tool("blob", {"size": 3, "after": str(gate)})
    group = s.group([slow, echo("b"), echo("c")], max_in_flight=1)
    caller = turn_in_background(stack, s, open_(group), next_(), next_(), next_(), close())
    run = _invocation("LashChild", f"target_service_key = {quote(s.key() + '/c0')}", "execute2")
    await _poll(stack, run, lambda rows: [r["status"] for r in rows] in _STARTED)
    with unanswered(stack):
        gate.touch()  # the first child answers its pump, which reports it to the group: held
        query = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "report")
        [report] = await _poll(stack, query, lambda rows: len(rows) == 1)
        if target == "pump":
            pumps = _invocation("LashPump", f"ends_with(target_service_key, {quote(':' + s.key())})", "run2")
            [report] = await _poll(stack, pumps, lambda rows: len(rows) == 1)
        _operator(stack, tmp_path, action, report["id"])
    answered = await asyncio.wait_for(caller, 60)
    assert answered.status_code == 200, answered.text
    [_, *ranks, closed] = answered.json()
    b, c = ({"type": "ok", "value": v} for v in "bc")
    assert [(ok(r)["rank"], ok(r)["position"], ok(r)["outcome"]) for r in ranks] == [
        (1, 0, {"type": "ok", "value": "xxx"}),
        (2, 1, b if target == "report" else KILLED),
        (3, 2, c if target == "report" else KILLED),
    ]
    assert "error" not in closed


@dataclasses.dataclass
class _Queued:
    """A group of two children whose second's `LashChild/run` waits behind another group's run of
    the same replay key (a namesake child held on ``gate``), and its caller reading both ranks."""

    gate: Path
    scope: Scope
    common: str  # the replay key both groups' runs queue on
    group: dict[str, Any]
    held: asyncio.Task[Any]  # the namesake group's caller
    caller: asyncio.Task[Any]
    run: dict[str, Any]  # the queued run's `sys_invocation` row

    async def answered(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Once the gate is open: the caller's second rank and its close (its first rank checked),
        and the namesake's caller ended."""
        answered = await asyncio.wait_for(self.caller, 60)
        assert answered.status_code == 200, answered.text
        [_, won, late, closed] = answered.json()
        assert ok(won)["outcome"] == {"type": "ok", "value": "won"}
        assert (await asyncio.wait_for(self.held, 60)).status_code == 200
        return late, closed


async def _queued_behind_a_namesake(
    shared: LocalStack, tmp_path: Path, *, disposition: str = "run_to_completion", closes: bool = True
) -> _Queued:
    gate = tmp_path / "gate"
    holder, s = Scope(), Scope()
    common = f"{s.key()}/shared"  # one replay key, two groups: their runs of it queue on one object
    blocking = holder.group([tool("blob", {"size": 3, "after": str(gate)})], replay_keys=[common])
    held = turn_in_background(shared, holder, open_(blocking), next_(), close())
    try:
        runs = _invocation("LashChild", f"target_service_key = {quote(common)}", "run")
        await _poll(shared, runs, lambda rows: [r["status"] for r in rows] in _STARTED)
        children = [echo("won"), echo("late")]
        group = s.group(children, replay_keys=[f"{s.key()}/c0", common], disposition=disposition)
        caller = turn_in_background(shared, s, open_(group), next_(), next_(), *([close()] if closes else []))
        [queued] = await _poll(shared, runs + " AND status = 'pending'", lambda rows: len(rows) == 1)
    except BaseException:
        gate.touch()  # the namesake's run ends: nothing of this test is left waiting
        raise
    return _Queued(gate, s, common, group, held, caller, queued)


@SHARED
async def test_cancelling_a_childs_run_while_it_is_queued_with_restates_cli_settles_it_as_cancelled(
    shared: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations cancel` of a child's `LashChild/run` while it waits behind another group's
    run of the same replay key (a namesake child waiting on a gate), once the group watches it:
    Restate ends it cancelled without running it, so it settles nothing; the watch hears it end so
    and settles the child as the run would have, `Cancelled`, once the key is free. The caller
    waiting on it goes on (before, the watch passed over it as a close's cancel, and the caller
    waited for ever)."""
    q = await _queued_behind_a_namesake(shared, tmp_path)
    s, common, queued = q.scope, q.common, q.run
    try:
        # Once the group watches its run: cancelled before that, Restate keeps nothing of a queued
        # invocation, and the watch settles the child as a run gone (decision 89).
        watches = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "watch_runs")
        await _watching(shared, watches, 2)  # both runs (the opener, if watched, is attached after)
        _operator(shared, tmp_path, "cancel", queued["id"])
        # The group's repair of it waits behind the namesake's run, as the run did.
        fails = _invocation("LashChild", f"target_service_key = {quote(common)}", "fail")
        await _poll(shared, fails + " AND status = 'pending'", lambda rows: len(rows) == 1)
    finally:
        q.gate.touch()
    late, closed = await q.answered()
    assert (ok(late)["rank"], ok(late)["position"], ok(late)["outcome"]) == (2, 1, {"type": "cancelled"})
    assert "error" not in closed


@SHARED
async def test_a_cancel_groups_run_queued_when_restates_cli_killed_its_caller_settles_as_cancelled(
    shared: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations kill` of the caller of a `Cancel` group while its second child's
    `LashChild/run` waits behind another group's run of the same replay key (a namesake child
    waiting on a gate): nobody can resume the group, so it cancels what still runs, the queued run
    among them, which Restate ends without running it. A resumer then reopens the group at once
    (once the group has heard its opener end: before, the resumer is its opener and nothing is cancelled).
    Killed within the group's first second, as here on an idle machine, the cancel lands before the
    group's watch attaches, and Restate then keeps nothing of the run: the watch reports it gone,
    after the resumer's reopen; later, it reports it cancelled. Either way the group settles the
    child as it cancelled it, `Cancelled`, once the key is free, and the resumer reads every rank
    (before, a run gone settled as "killed before it ran", and reopened, it still did)."""
    q = await _queued_behind_a_namesake(shared, tmp_path, disposition="cancel", closes=False)
    s, common = q.scope, q.common
    try:
        # The caller has read the first rank and waits on the second: killed, it ends in failure.
        await until(functools.partial(settled, shared, s.key(), 1))
        _operator(shared, tmp_path, "kill", await turn_id(shared, s))
        assert (await asyncio.wait_for(q.caller, 60)).status_code != 200
        # Once the group has heard its opener end: a reopen that reaches it first makes the resumer
        # its opener, nobody is gone, and the loser runs on (`ok`), as it should; a loaded machine
        # once ran that order.
        ended = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "caller_ended")
        await _poll(shared, ended + " AND status = 'completed'", lambda rows: len(rows) == 1)
        # A resumer reopens the group (the same children) and reads both ranks, then closes.
        resumer = Scope()
        resumed = turn_in_background(shared, resumer, open_(q.group), next_(), next_(), close())
        # The group's cancel of the queued run, heard by its watch: the repair queues behind the
        # namesake's run, as the run did.
        fails = _invocation("LashChild", f"target_service_key = {quote(common)}", "fail")
        await _poll(shared, fails + " AND status = 'pending'", lambda rows: len(rows) == 1)
    finally:
        q.gate.touch()
    assert (await asyncio.wait_for(q.held, 60)).status_code == 200
    answered = await asyncio.wait_for(resumed, 60)
    assert answered.status_code == 200, answered.text
    [_, won, late, closed] = answered.json()
    assert ok(won)["outcome"] == {"type": "ok", "value": "won"}
    assert (ok(late)["rank"], ok(late)["position"], ok(late)["outcome"]) == (2, 1, {"type": "cancelled"})
    assert "error" not in closed
    await until(functools.partial(_nothing_left, shared, s.key()))


@SHARED
@pytest.mark.parametrize("action", ["kill", "cancel"])
async def test_killing_the_repair_of_a_killed_run_with_restates_cli_still_ranks_its_child(
    shared: LocalStack, tmp_path: Path, action: str
) -> None:
    """`restate invocations kill` of a child's `LashChild/run`, then a kill (or a cancel) of the
    `LashChild/fail` its group sent to settle the child as killed, each while queued behind another
    group's run of the same replay key (a namesake child waiting on a gate), the second once the
    group watches that repair as it watches a run: it sends it again, and once the key is free the
    child settles with the repair's failure and takes its rank; the caller waiting on it goes on."""
    q = await _queued_behind_a_namesake(shared, tmp_path)
    s, common, queued = q.scope, q.common, q.run
    try:
        _operator(shared, tmp_path, "kill", queued["id"])
        fails = _invocation("LashChild", f"target_service_key = {quote(common)}", "fail")
        [fail] = await _poll(shared, fails + " AND status = 'pending'", lambda rows: len(rows) == 1)
        # The group watches its repair a second after sending it: from then on it hears the repair
        # end (before, Restate keeps nothing of one killed or cancelled while queued: decision 89).
        watches = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "watch_runs")
        await _watching(shared, watches, 1)
        _operator(shared, tmp_path, action, fail["id"])
        # The group's watch of its repair sends it again, queued behind the namesake's run as well.
        again = f"{fails} AND status = 'pending' AND id != {quote(fail['id'])}"
        await _poll(shared, again, lambda rows: len(rows) == 1)
    finally:
        q.gate.touch()
    late, closed = await q.answered()
    assert (ok(late)["rank"], ok(late)["position"]) == (2, 1)
    # The repair made again carries the first's failure: `killed`, or Restate's word for a queued
    # invocation it cancelled.
    assert ok(late)["outcome"] == (KILLED if action == "kill" else {**KILLED, "message": "canceled"})
    assert "error" not in closed


async def test_a_group_whose_close_restates_cli_killed_is_listed_orphaned_and_closed_by_the_operator(
    stack: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations kill` of a caller's `LashGroup/close` before it ran (held by a deployment
    whose `close` runs nothing): the caller went on, its group open behind it with its loser
    running, and with its opener returned normally it looked parked for ever. `groups list` lists it
    orphaned, `groups show` says its close was killed, and `groups close` closes it as declared,
    though its opener had saved its handle: the opener closed the group itself."""
    s = Scope()
    group = s.group([echo("won"), event(s.event("never"))], wake="first", disposition="cancel")
    closes = _invocation("LashGroup", f"target_service_key = {quote(s.key())}", "close")
    with unanswered(stack, "groups", service="LashGroup", paused=False, hold="close"):
        [_, first, _, closed] = await stack.turn(open_(group), next_(), save(), close())
        assert ok(first)["position"] == 0 and "error" not in closed  # sent: the caller went on
        [held] = await _poll(stack, closes, lambda rows: len(rows) == 1)
        _operator(stack, tmp_path, "kill", held["id"])
        await _poll(stack, closes, lambda rows: rows[0]["status"] == "completed")
        row = await until(lambda: listed(stack, s.key(), "orphaned"))
        assert row.orphaned
        shown = lash(stack, "groups", "show", s.key())
        assert shown.returncode == 0, shown.stderr
        assert f"Restate ended that close ({held['id']}) before it closed" in shown.stdout, shown.stdout
        answer = lash(stack, "groups", "close", s.key(), "--json")
        assert answer.returncode == 0, answer.stderr
        assert json.loads(answer.stdout) | {"running": []} == {
            "group_key": s.key(),
            "closed": True,
            "was": "orphaned",
            "disposition": "cancel",
            "cancelled": 1,  # its loser, as the lost close would have
            "pumped": False,
            "running": [],
            "pumps": [],
        }
        await until(functools.partial(_nothing_left, stack, s.key()))
