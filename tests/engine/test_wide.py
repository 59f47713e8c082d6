"""Wide groups (issue #14): past `PUMP_SLICE` children a group settles through one pump per slice.

Decision 35: the group's pump runs the first slice and calls pumps for the further ones (decision 65: a tree
of them, at most `PUMP_FANOUT` called by each); every
pump settles into the one group object. These tests check what that must not change: one rank per
child, payloads kept by the pumps (each its own slice's), a `Cancel` close reaching the children
of every slice, and every pump's store released by the close.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from lash_restate.engine.group._mode import PUMP_FANOUT, PUMP_SLICE
from lash_restate.engine.group._pages import RANK_PAGE, rank_page
from lash_restate.inspection import quote
from tests.conformance.builders import (
    Scope,
    close,
    combine,
    count,
    echo,
    event,
    next_,
    ok,
    open_,
    save,
    tool,
    use,
)
from tests.engine.conftest import Stack
from tests.engine.test_engine import (
    _handle,
    _poll,
    _runs_of,
    _wait_run_completed,
    _wait_run_started,
    group_value,
    wait_tool_started,
)
from tests.engine.test_operator import settled, until

WIDTH = 2 * PUMP_SLICE + 88  # three slices: the group's own pump and two more
# Decision 65: six slices, so the group's pump hands runs of two slices to the pumps of slices 1 and 3
# (PUMP_FANOUT = 4), which call the pumps of slices 2 and 4 themselves: a tree two pumps deep.
DEEP = 5 * PUMP_SLICE + 40
DEEPEST = 2 * PUMP_SLICE + 7  # a position in slice 2, reached through the pump of slice 1
assert PUMP_FANOUT == 4 and DEEP > RANK_PAGE


def _pump_rows(group_key: str) -> str:
    return (
        "SELECT service_key, key FROM state WHERE service_name = 'LashPump' "
        f"AND ends_with(service_key, {quote(':' + group_key)})"
    )


def _running(group_key: str) -> str:
    pumps = f"target_service_name = 'LashPump' AND ends_with(target_service_key, {quote(':' + group_key)})"
    children = (
        f"target_service_name = 'LashChild' AND starts_with(target_service_key, {quote(group_key + '/')})"
    )
    return (
        "SELECT target_service_name AS s, status FROM sys_invocation "
        f"WHERE status != 'completed' AND (({pumps}) OR ({children}))"
    )


def _slices_holding(rows: list[dict[str, Any]]) -> set[str]:
    return {r["service_key"] for r in rows if r["key"].startswith("o")}


async def test_a_wide_all_ranks_every_child_once_through_its_slices(restate_stack: Stack) -> None:
    s = Scope()
    # Past RANK_PAGE ranks, so the paged order (decision 65) is read across a page and its tail.
    group = s.group([echo(i) for i in range(DEEP)])
    [result] = await restate_stack.turn(combine("all", group), within=300)
    done = ok(result)
    assert done["status"] == "fulfilled" and done["value"] == list(range(DEEP))
    assert sorted(done["order"]) == list(range(DEEP))  # one rank per child
    # The close released every slice's store (the group's pump forgets the others after its run).
    await _poll(restate_stack, _pump_rows(s.key()), lambda rows: not rows, within=120)


async def test_a_cancel_close_of_a_wide_group_reaches_every_slice_and_releases_every_store(
    restate_stack: Stack,
) -> None:
    s = Scope()
    # A child that never settles on its own in a slice two pumps down the tree, the rest immediate.
    children = [echo(i) for i in range(DEEP)]
    children[DEEPEST] = event(s.event("never"))
    group = s.group(children)
    [_, first, _] = await restate_stack.turn(open_(group), next_(), save(), within=300)
    assert ok(first)["rank"] == 1
    # Every slice's pump keeps its own children's outcomes: six distinct pumps hold some.
    await _poll(restate_stack, _pump_rows(s.key()), lambda rows: len(_slices_holding(rows)) == 6, within=300)
    # A full page of ranks is written in its format's compact JSON, as every record is
    # (test_claims.py checks the rest of a group's state, on groups too narrow to fill a page).
    [page] = await _poll(restate_stack, group_value(s.key(), rank_page(0)), bool, within=120)
    assert len(json.loads(page["value_utf8"])) == RANK_PAGE
    assert msgspec.json.encode(msgspec.json.decode(page["value_utf8"])).decode() == page["value_utf8"]
    [_, closed] = await restate_stack.turn(use(_handle(s.key(), DEEP, 1)), close("cancel"), within=120)
    assert "error" not in closed
    # The cancel reached that child through three pumps, and nothing of the group is left: each pump
    # released its subtree's stores.
    await _poll(restate_stack, _running(s.key()), lambda rows: not rows, within=120)
    await _poll(restate_stack, _pump_rows(s.key()), lambda rows: not rows, within=120)


async def test_a_reopen_of_a_wide_group_ranks_a_child_it_ran_again_in_the_groups_pages(
    restate_stack: Stack,
) -> None:
    """Decisions 48 and 69 on a wide group opened in one message: its child 0 ran while the endpoint
    lost its tool, so it ended with no outcome and no rank while the others ranked. With the tool
    back, a reopen runs it again through its slice's pump, and it takes the last rank in the group's
    pages, read from a saved cursor as the reference host serves it (it ranked in the narrow layout
    before, where no wait could read it)."""
    s = Scope()
    width = PUMP_SLICE + 4
    name = f"{s.id}-slow"
    group = s.group(
        [count(name, "slow", delay_ms=60_000, slow_once=True), *[echo(i) for i in range(1, width)]]
    )
    [opened] = await restate_stack.turn(open_(group))
    await wait_tool_started(restate_stack, name)
    restate_stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="count")  # the deployment lost the tool while it ran
    await _wait_run_completed(restate_stack, f"{s.key()}/c0")
    restate_stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="")  # the tool is back
    [reopened] = await restate_stack.turn(open_(group))
    [_, last, closed] = await restate_stack.turn(
        use(_handle(s.key(), width, width - 1)), next_(), close(), within=120
    )
    assert "ok" in reopened and "ok" in opened
    assert (ok(last)["rank"], ok(last)["position"]) == (width, 0)
    assert ok(last)["outcome"] == {"type": "ok", "value": "slow"}
    assert "error" not in closed
    assert restate_stack.counts().count(name) == 1
    await _poll(restate_stack, _pump_rows(s.key()), lambda rows: not rows, within=120)


async def test_a_wide_group_closed_while_a_reopen_runs_a_child_again_leaves_nothing_in_its_pumps(
    restate_stack: Stack, tmp_path: Path
) -> None:
    """The reopen's re-dispatch of a child of the group's own slice runs in the group's pump's key;
    the group is closed (`RunToCompletion`) while that child still runs, so the re-dispatch hears
    "closed" from its report, and the close's release of the pump waits behind it. The release still
    reaches the further slices' pumps: nothing of the group is left (the re-dispatch's own release
    dropped the list of them, and their stores stayed)."""
    s = Scope()
    width = PUMP_SLICE + 4
    name, gate = f"{s.id}-held", tmp_path / "gate"
    held = tool("count", {"name": name, "value": "held", "after": str(gate)})  # until the gate opens
    group = s.group([held, *[echo(i) for i in range(1, width)]])
    [opened] = await restate_stack.turn(open_(group))
    await _wait_run_started(restate_stack, f"{s.key()}/c0")
    restate_stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="count")  # the deployment lost the tool while it ran
    await _wait_run_completed(restate_stack, f"{s.key()}/c0")
    restate_stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="")  # the tool is back
    [reopened] = await restate_stack.turn(open_(group))  # runs child 0 again: it waits at the gate
    runs = f"SELECT status FROM sys_invocation WHERE {_runs_of(s.key() + '/c0')}"
    await _poll(restate_stack, runs, lambda rows: any(r["status"] != "completed" for r in rows))
    [_, closed] = await restate_stack.turn(use(_handle(s.key(), width, 0)), close())
    assert "ok" in opened and "ok" in reopened and "error" not in closed
    gate.touch()
    await _poll(restate_stack, _pump_rows(s.key()), lambda rows: not rows, within=120)
    assert restate_stack.counts().count(name) == 1


async def test_a_bounded_group_wider_than_a_slice_serves_every_rank_from_its_one_pump(
    restate_stack: Stack,
) -> None:
    """Decision 81: a bounded group's one pump runs and keeps every child, past `PUMP_SLICE` too. A
    continuation re-reading it from a cursor saved at 0 reads each outcome from that pump's store
    (a rank served from the group's record carries none inline), past the first slice as well."""
    s = Scope()
    width = PUMP_SLICE + 4
    group = s.group([echo(i) for i in range(width)], max_in_flight=64)
    [_, saved] = await restate_stack.turn(open_(group), save(), within=300)
    assert "ok" in saved
    steps = [use(_handle(s.key(), width, 0)), *[next_() for _ in range(width)], close()]
    [_, *ranks, closed] = await restate_stack.turn(*steps, within=300)
    assert sorted(ok(r)["outcome"]["value"] for r in ranks) == list(range(width))
    assert "error" not in closed
    await _poll(restate_stack, _pump_rows(s.key()), lambda rows: not rows, within=120)


async def test_a_bounded_cancel_race_leaves_nothing_in_its_pump(restate_stack: Stack) -> None:
    """Decision 81 under `Cancel`: the close cancels the bounded group's one pump, which settles the
    children it never started as cancelled and hears the group is closed: it then keeps nothing,
    though the child it was running still answers it, cancelled, and reports no more (it knows the
    group is closed: one report for the winner, one for the child never started)."""
    s = Scope()
    name = f"{s.id}-never"
    children = [echo("won"), count(name, "slow", delay_ms=600_000), echo("queued")]
    group = s.group(children, wake="first", disposition="cancel", max_in_flight=1)
    [raced] = await restate_stack.turn(combine("race", group), within=300)
    assert ok(raced)["value"] == "won"
    await _poll(restate_stack, _pump_rows(s.key()), lambda rows: not rows, within=120)
    await _poll(restate_stack, _running(s.key()), lambda rows: not rows, within=120)
    assert name not in restate_stack.counts()
    reports = (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashGroup' "
        f"AND target_handler_name = 'report' AND target_service_key = {quote(s.key())}"
    )
    assert len(await _poll(restate_stack, reports, lambda rows: True)) == 2


async def test_a_read_across_two_pumps_takes_a_later_pumps_first_outcome_only_within_its_share(
    restate_stack: Stack,
) -> None:
    """Decision 35: a caller's read of outcomes kept by two pumps asks each for its share of one
    reply (2 MiB of 4: decision 142), and only the pump of the read's first outcome answers its first
    whatever its size. An outcome of the second slice's pump past its share (16 MiB) is therefore left to the
    next read, which asks for it alone: a read that let every pump answer its first whatever its
    size could bring two such outcomes at once, past what one reply carries."""
    s, size = Scope(), 16 * 1024 * 1024
    gate = restate_stack.base_dir / f"gate-{s.id}"  # ranked last: the read finds every other first
    stored = tool("blob", {"size": 17 * 1024})  # past what a report carries inline: read from its pump
    big = tool("blob", {"size": size, "after": str(gate)})
    group = s.group([stored, *[echo(i) for i in range(1, PUMP_SLICE)], big])
    [_, saved] = await restate_stack.turn(open_(group), save())

    await until(lambda: settled(restate_stack, s.key(), PUMP_SLICE))
    gate.touch()
    await until(lambda: settled(restate_stack, s.key(), PUMP_SLICE + 1))
    # Every rank at once, from the saved cursor (at 0): stored outcomes at positions 0 and 256.
    [every] = await restate_stack.turn(combine("all_settled", group, handle=ok(saved)), within=300)
    values = ok(every)["value"]
    assert (len(values[0]["value"]), len(values[-1]["value"])) == (17 * 1024, size)
    reads = await _poll(
        restate_stack,
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashPump' AND "
        f"target_handler_name = 'outcomes' AND ends_with(target_service_key, {quote('.1:' + s.key())})",
        lambda rows: len(rows) >= 1,
    )
    assert len(reads) == 2  # one answered nothing (the outcome is past its share), then it alone
