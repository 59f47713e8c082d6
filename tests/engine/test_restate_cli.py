"""Restate's own CLI on lash's invocations: an operator's tool never strands a group.

An operator of a shared cluster uses `restate invocations pause|resume|…` (the pinned
`@restatedev/restate` CLI that `make setup` installs), not lash's. These tests run that CLI against a
real restate-server on the invocations a group is made of, and check that the group's caller still
gets the right answer: every rank, each child's real outcome, its side effect once.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lash_restate.inspection import quote
from lash_restate.testing import LocalStack
from tests.conformance.builders import Scope, close, combine, count, echo, next_, ok, open_, use
from tests.engine.test_engine import _poll

CLI = Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "restate"


def restate(stack: LocalStack, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Restate's CLI against ``stack``'s admin API, with a configuration of its own (none of the user's)."""
    env = {**os.environ, "RESTATE_ADMIN_URL": stack.server.admin_url, "RESTATE_CLI_CONFIG_HOME": str(tmp)}
    return subprocess.run([str(CLI), *args, "--yes"], capture_output=True, text=True, timeout=60, env=env)


def _invocation(service: str, key_clause: str, handler: str) -> str:
    return (
        f"SELECT id, status FROM sys_invocation WHERE target_service_name = {quote(service)} "
        f"AND {key_clause} AND target_handler_name = {quote(handler)}"
    )


def test_the_pinned_cli_is_the_servers_release() -> None:
    assert CLI.exists(), "run `make setup`: it installs Restate's CLI with the server"
    out = subprocess.run([str(CLI), "--version"], capture_output=True, text=True, timeout=30)
    assert "1.7.12" in out.stdout, out.stdout


@pytest.mark.parametrize("which", ["pump", "child"])
async def test_pausing_and_resuming_a_groups_invocation_with_restates_cli_changes_no_answer(
    stack: LocalStack, tmp_path: Path, which: str
) -> None:
    """`restate invocations pause` then `resume` of the group's pump, or of the `LashChild/execute`
    of its slow child, while that child runs: the caller then reads every rank, the slow child's
    real outcome among them, and its side effect happened once."""
    s = Scope()
    name = f"{s.id}-slow"
    group = s.group([echo("a"), count(name, "slow", delay_ms=3000), echo("b")])  # three: pumped
    [opened, first, second] = await stack.turn(open_(group), next_(), next_())
    assert {ok(first)["position"], ok(second)["position"]} == {0, 2}
    if which == "pump":
        query = _invocation("LashPump", f"ends_with(target_service_key, {quote(':' + s.key())})", "run2")
    else:
        query = _invocation("LashChild", f"target_service_key = {quote(s.key() + '/c1')}", "execute")
    [row] = await _poll(stack, query, lambda rows: len(rows) == 1)
    paused = restate(stack, tmp_path, "invocations", "pause", row["id"])
    assert paused.returncode == 0, paused.stderr
    await _poll(stack, query, lambda rows: rows[0]["status"] == "paused")
    resumed = restate(stack, tmp_path, "invocations", "resume", row["id"])
    assert resumed.returncode == 0, resumed.stderr
    [_, again, _, third, closed] = await stack.turn(use(ok(opened)), next_(), next_(), next_(), close())
    assert ok(again) == ok(first)  # the ranks read before are served the same
    assert "error" not in closed
    assert ok(third)["outcome"] == {"type": "ok", "value": "slow"}
    assert stack.counts().count(name) == 1


@pytest.fixture
def stack(tmp_path: Path) -> Any:
    with LocalStack.single(tmp_path / "stack").start() as s:
        yield s


async def test_restart_as_new_of_a_finished_caller_runs_it_again_with_a_group_of_its_own(
    stack: LocalStack, tmp_path: Path
) -> None:
    """`restate invocations restart-as-new` of a caller that ran an `all` to its end: the new
    invocation runs the same handler on the same input, opens the group again (the first closed it),
    and ends with the same answer; each child's side effect ran once per run."""
    s = Scope()
    name = f"{s.id}-once"
    group = s.group([echo("a"), count(name, "b")])
    [first] = await stack.turn(combine("all", group))
    assert ok(first)["value"] == ["a", "b"]
    turns = _invocation("LashTurn", "true", "run") + " ORDER BY created_at"
    [row] = (await _poll(stack, turns, lambda rows: bool(rows)))[-1:]
    restarted = restate(stack, tmp_path, "invocations", "restart-as-new", row["id"])
    assert restarted.returncode == 0, restarted.stderr
    rows = await _poll(
        stack,
        "SELECT id, status, completion_result, completion_failure FROM sys_invocation "
        f"WHERE target_service_name = 'LashTurn' AND id != {quote(row['id'])}",
        lambda rows: any(r["status"] == "completed" for r in rows),
    )
    [again] = [r for r in rows if r["status"] == "completed"]
    assert again["completion_result"] == "success", again
    assert stack.counts().count(name) == 2  # the restarted caller's group ran its children again


KILLED = {"type": "err", "code": "409", "message": "killed"}  # what a killed callee answers its caller


@pytest.mark.parametrize(
    ("which", "width"),
    [("pump", 3), ("child", 3), ("child", 2)],
    ids=["pump", "pumped-child", "direct-child"],
)
async def test_killing_a_groups_pump_or_child_with_restates_cli_settles_its_unsettled_children_as_killed(
    stack: LocalStack, tmp_path: Path, which: str, width: int
) -> None:
    """`restate invocations kill` of the group's pump, of the `LashChild/execute` it awaits, or of a
    narrow group's `LashChild/run`, while a caller waits on the slow child: as a killed callee answers
    its caller, the slow child settles as killed (409) and takes its rank, so the waiting caller ends;
    the ranks read before are served the same, and the close finds nothing left running."""
    s = Scope()
    name = f"{s.id}-slow"
    fast = [echo("a"), echo("b")][: width - 1]
    group = s.group([*fast, count(name, "slow", delay_ms=120_000)])
    [opened, *read] = await stack.turn(open_(group), *[next_() for _ in fast])
    slow = f"{s.key()}/c{width - 1}"
    if which == "pump":
        query = _invocation("LashPump", f"ends_with(target_service_key, {quote(':' + s.key())})", "run2")
    else:
        handler = "execute" if width >= 3 else "run"
        query = _invocation("LashChild", f"target_service_key = {quote(slow)}", handler)
    [row] = await _poll(stack, query, lambda rows: len(rows) == 1 and rows[0]["status"] != "completed")
    steps = [use(ok(opened)), *[next_() for _ in range(width)], close()]
    async with asyncio.TaskGroup() as tasks:
        waiting = tasks.create_task(stack.turn(*steps))  # a caller waits on the slow child's rank
        killed = await asyncio.to_thread(restate, stack, tmp_path, "invocations", "kill", row["id"])
    assert killed.returncode == 0, killed.stderr
    [_, *again, last, closed] = waiting.result()
    assert [ok(r) for r in again] == [ok(r) for r in read]  # the ranks read before are served the same
    assert (ok(last)["rank"], ok(last)["position"], ok(last)["outcome"]) == (width, width - 1, KILLED)
    assert "error" not in closed
