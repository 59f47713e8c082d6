"""What a group of call children costs in invocations, counted in Restate's own `sys_invocation`.

Issue 22: a call child costs the user's handler invocation and nothing per child beyond the
settlement that reaches the single writer. A count, not a time: these fail the day a wrapper
invocation per child (or a release per child) comes back.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

from lash_restate.engine.group._group_watch import WATCH_AFTER
from lash_restate.engine.group._mode_stores import PUMP_SLICE
from lash_restate.inspection import quote, sql
from tests.conformance.builders import Scope, close, combine, event, iterate, next_, ok, open_, use
from tests.engine.conftest import Stack
from tests.engine.test_engine import recorded_meta
from tests.engine.test_operator import settled, until

# The targets: caller, open, the pump, two user handlers, the winner's settle, close.
RACE_MOST = 7
ALL_OVER = 10
ALL_MOST = ALL_OVER + 6  # caller, open, the pump, N user handlers, the settles, close


def thin(value: Any, delay_ms: int = 0) -> dict[str, Any]:
    arg = {"value": value, "delay_ms": delay_ms}
    return {"type": "call", "service": "DemoCalls", "handler": "echo", "arg": arg}


def _by_target(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {f"{r['s']}/{r['h']}": int(r["n"]) for r in rows}


async def _invocations(stack: Stack) -> dict[str, int]:
    rows = await asyncio.to_thread(
        sql,
        stack.admin_url,
        "SELECT target_service_name AS s, target_handler_name AS h, count(*) AS n FROM sys_invocation "
        "GROUP BY target_service_name, target_handler_name",
    )
    return _by_target(rows)


async def _until(stack: Stack, query: str, done: Any, within: float = 60) -> list[dict[str, Any]]:
    async with asyncio.timeout(within):
        while True:
            rows = await asyncio.to_thread(sql, stack.admin_url, query)
            if done(rows):
                return rows
            await asyncio.sleep(0.05)


async def _unwatched(stack: Stack, group_key: str, spent: dict[str, int]) -> dict[str, int]:
    """``spent`` without the group's watch of what it dispatched, which starts WATCH_AFTER after the
    open and which the close cancels before it starts: it runs only for a group open longer than
    that, as on a busy machine. Counted, it would make a count a measure of the machine's speed; a
    watch for a group closed sooner is still a failure."""
    watches = spent.pop("LashGroup/watch_runs", 0)
    rows = await asyncio.to_thread(
        sql,
        stack.admin_url,
        "SELECT target_handler_name AS h, created_at AS t FROM sys_invocation WHERE "
        f"target_service_name = 'LashGroup' AND target_service_key = {quote(group_key)} "
        "AND target_handler_name IN ('open', 'close')",
    )
    times = {r["h"]: datetime.fromisoformat(str(r["t"]).replace("Z", "+00:00")) for r in rows}
    lived = times["close"] - times["open"]
    assert watches <= (1 if lived >= WATCH_AFTER else 0), (watches, lived, spent)
    return spent


async def test_a_race_of_two_calls_costs_at_most_seven_invocations(stack: Stack) -> None:
    """The loser runs for an hour: what is counted is what the race cost by the time its group is
    closed and lash has nothing left running for it (the loser's own invocation is one of the two)."""
    s = Scope()
    group = s.group([thin("won"), thin("late", delay_ms=3_600_000)], wake="first")
    [raced] = await stack.turn(combine("race", group))
    assert ok(raced)["value"] == "won"
    # Closed (the close is a sent message), and nothing of lash's still running for the group.
    await _until(
        stack,
        "SELECT count(*) AS n FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(s.key())}",
        lambda rows: rows[0]["n"] == 0,
    )
    await _until(
        stack,
        "SELECT count(*) AS n FROM sys_invocation WHERE status != 'completed' "
        "AND target_service_name IN ('LashGroup', 'LashPump')",
        lambda rows: rows[0]["n"] == 0,
    )
    spent = await _unwatched(stack, s.key(), await _invocations(stack))
    assert spent.get("DemoCalls/echo") == 2, spent
    assert sum(spent.values()) <= RACE_MOST, spent


async def test_an_all_over_ten_calls_costs_at_most_n_plus_six_invocations(stack: Stack) -> None:
    s = Scope()
    group = s.group([thin(i) for i in range(ALL_OVER)])
    [done] = await stack.turn(combine("all", group))
    assert ok(done)["value"] == list(range(ALL_OVER))
    await _until(
        stack,
        "SELECT count(*) AS n FROM sys_invocation WHERE status != 'completed'",
        lambda rows: rows[0]["n"] == 0,
    )
    spent = await _unwatched(stack, s.key(), await _invocations(stack))
    assert spent.get("DemoCalls/echo") == ALL_OVER, spent
    assert sum(spent.values()) <= ALL_MOST, spent


async def test_the_pump_of_a_call_group_calls_its_children_before_anything_else(stack: Stack) -> None:
    """The open decides how the pump calls each child and sends that plan with the children, so the
    pump journals nothing before its calls: a journaled run of its own there was one round trip more
    on every call group's path."""
    s = Scope()
    group = s.group([thin("won"), thin("late", delay_ms=3_600_000)], wake="first")
    [_, first] = await stack.turn(open_(group), next_())
    assert ok(first)["outcome"]["value"] == "won"
    [pump] = await asyncio.to_thread(
        sql,
        stack.admin_url,
        "SELECT id FROM sys_invocation "
        "WHERE target_service_name = 'LashPump' AND target_handler_name = 'run2'",
    )
    journal = await asyncio.to_thread(
        sql,
        stack.admin_url,
        f"SELECT entry_type FROM sys_journal WHERE id = {quote(pump['id'])} ORDER BY index",
    )
    commands = [entry["entry_type"] for entry in journal if entry["entry_type"].startswith("Command")]
    assert commands[:3] == ["Command: Input", "Command: Call", "Command: Call"], commands
    assert "Command: Run" not in commands, commands
    await stack.turn(open_(group), close())  # the loser runs on; the pump lets its store go


async def test_a_further_slices_pump_calls_its_children_before_anything_else(stack: Stack) -> None:
    """The same for a group of calls wider than one pump's slice: the group's pump hands the open's
    plan of the further slice to that slice's pump with its children, which journals nothing
    before its calls either."""
    s = Scope()
    group = s.group([thin(i) for i in range(PUMP_SLICE + 1)])
    [answered] = await stack.turn(combine("all", group))
    assert ok(answered)["value"] == list(range(PUMP_SLICE + 1))
    pumps = await asyncio.to_thread(
        sql,
        stack.admin_url,
        "SELECT id, target_service_key AS key FROM sys_invocation WHERE target_service_name = 'LashPump' "
        f"AND target_handler_name = 'run2' AND ends_with(target_service_key, {quote(':' + s.key())})",
    )
    [further] = [p for p in pumps if p["key"].split(":", 1)[0].endswith(".1")]  # the second slice's
    journal = await asyncio.to_thread(
        sql,
        stack.admin_url,
        f"SELECT entry_type FROM sys_journal WHERE id = {quote(further['id'])} ORDER BY index",
    )
    commands = [entry["entry_type"] for entry in journal if entry["entry_type"].startswith("Command")]
    assert commands[:2] == ["Command: Input", "Command: Call"], commands
    assert "Command: Run" not in commands, commands


async def _first_report(stack: Stack, group_key: str) -> list[str]:
    """The journal of the group's first `report`, entry by entry (Restate keeps a finished one's)."""
    rows = await _until(
        stack,
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashGroup' AND "
        f"target_handler_name = 'report' AND target_service_key = {quote(group_key)} ORDER BY created_at",
        bool,
    )
    journal = await asyncio.to_thread(
        sql,
        stack.admin_url,
        f"SELECT entry_type FROM sys_journal WHERE id = {quote(rows[0]['id'])} ORDER BY index",
    )
    return [entry["entry_type"] for entry in journal]


async def test_a_narrow_groups_report_reads_its_record_alone(restate_stack: Stack) -> None:
    """A pump's report to a group that keeps its ranks in its record reads that record and nothing
    else: the pages a paged group's report reads at once are not read for it."""
    s = Scope()
    [done] = await restate_stack.turn(combine("all", s.group([thin("a"), thin("b")])))
    assert ok(done)["value"] == ["a", "b"]
    journal = await _first_report(restate_stack, s.key())
    assert journal.count("Command: GetLazyState") == 1, journal


async def _calls(stack: Stack, invocation: str) -> list[tuple[str, dict[str, Any]]]:
    """What the invocation called, in order: each call's target handler and its request."""
    query = f"SELECT entry_json FROM sys_journal WHERE id = {quote(invocation)} ORDER BY index"
    journal = await asyncio.to_thread(sql, stack.admin_url, query)
    calls = [json.loads(entry["entry_json"]).get("Command", {}).get("Call") for entry in journal]
    return [
        (
            c["request"]["invocation_target"]["VirtualObject"]["handler"],
            json.loads(bytes(c["request"]["parameter"])),
        )
        for c in calls
        if c is not None
    ]


async def _closer(stack: Stack, group_key: str) -> str:
    """The invocation that closed the group ``group_key`` (the caller the test reads the calls of)."""
    [closed] = await _until(
        stack,
        "SELECT invoked_by_id FROM sys_invocation WHERE target_service_name = 'LashGroup' AND "
        f"target_handler_name = 'close' AND target_service_key = {quote(group_key)}",
        bool,
    )
    return str(closed["invoked_by_id"])


async def test_a_plain_await_reads_the_one_rank_it_serves(restate_stack: Stack) -> None:
    """`Group.next` (and so `async for`) reads the group at every await and serves one rank: it asks
    for that rank alone and reads its outcome alone, where it read every rank the group held, and
    their outcomes, and dropped all but one (an `async for` over N children read O(N²) outcomes). The
    first read of a caller that did not open the group asks as before: nothing in its journal yet
    says which release opened the group, and a baseline caller's replay must meet what it journaled.
    The outcomes that read past its own rank are kept for the awaits after it, which ask the group
    for their rank alone, with no wake, and read nothing (decision 134)."""
    s = Scope()
    group = s.group([thin(f"v{i}") for i in range(6)])
    [opened] = await restate_stack.turn(open_(group))

    await until(lambda: settled(restate_stack, s.key(), 6))
    read = await restate_stack.turn(use(ok(opened)), *[next_() for _ in range(6)], close())
    assert sorted(ok(r)["outcome"]["value"] for r in read[1:-1]) == [f"v{i}" for i in range(6)]
    closer = await _closer(restate_stack, s.key())
    calls = await _calls(restate_stack, closer)
    waits = [request for handler, request in calls if handler == "wait"]
    asked = [request["positions"] for handler, request in calls if handler == "outcomes"]
    # The first read asks for every rank (its journal says nothing of the group yet) and reads their
    # outcomes; each await after it asks for its own rank alone, and is served the outcome that read
    # (decision 134), where it read it again.
    assert "at_most" not in waits[0] and [w.get("at_most") for w in waits[1:]] == [1] * 5, waits
    assert [len(positions) for positions in asked] == [6], asked
    # The first read sends wakes for the ranks it has none for; those after it none, the group having
    # held their ranks (it serves them or refuses).
    assert [len(w["wakes"]) for w in waits] == [6, 0, 0, 0, 0, 0], waits


async def test_plain_awaits_read_ahead_the_outcomes_their_group_holds_in_one_read_per_window(
    restate_stack: Stack,
) -> None:
    """Decision 134: an `async for` behind its group (40 settled, read by a block that opens it again)
    asks the group at every await (decision 32), but reads outcomes once per window of ranks: the
    await that has nothing read ahead for its rank asks for up to 32 ranks and reads the outcomes of
    all it is given in one read; each await after it asks for its rank alone and is served what was
    read, with no read of its own and no wake."""
    s = Scope()
    names = [s.event(f"e{i}") for i in range(40)]
    group = s.group([event(name) for name in names])
    await restate_stack.turn(open_(group))
    for i, name in enumerate(names):
        await restate_stack.emit(name, f"v{i}")

    await until(lambda: settled(restate_stack, s.key(), 40))
    [read] = await restate_stack.turn(iterate(group))
    settlements = ok(read)["settlements"]
    assert [settlement["rank"] for settlement in settlements] == list(range(1, 41)), read
    # Each rank's child with its own outcome (their order is the pumps' reports', not the emits').
    assert all(f"v{s['position']}" == s["outcome"]["value"] for s in settlements), read
    assert sorted(settlement["position"] for settlement in settlements) == list(range(40)), read
    closer = await _closer(restate_stack, s.key())
    calls = await _calls(restate_stack, closer)
    waits = [request for handler, request in calls if handler == "wait"]
    asked = [request["positions"] for handler, request in calls if handler == "outcomes"]
    assert [w["at_most"] for w in waits] == [32, *[1] * 31, 32, *[1] * 7], waits
    assert [len(positions) for positions in asked] == [32, 8], asked
    # One wake where nothing was read ahead for the rank (the first a caller that reopened the group
    # asks, too: it sent a window), none where it was.
    assert [len(w["wakes"]) for w in waits] == [1, *[0] * 31, 1, *[0] * 7], waits


async def test_what_a_plain_await_reads_ahead_is_bounded_in_bytes(restate_stack: Stack) -> None:
    """Decision 134: what an await reads ahead stops at 256 KiB in all: outcomes of about 100 KB are
    read two at a time (the await's own and one more), so a caller that stops reading has read at
    most that past its rank."""
    s = Scope()
    names = [s.event(f"e{i}") for i in range(12)]
    group = s.group([event(name) for name in names])
    await restate_stack.turn(open_(group))
    for i, name in enumerate(names):
        await restate_stack.emit(name, f"{i:02}" + "x" * 100_000)

    await until(lambda: settled(restate_stack, s.key(), 12))
    [read] = await restate_stack.turn(iterate(group))
    settlements = ok(read)["settlements"]
    assert all(s["outcome"]["value"][:2] == f"{s['position']:02}" for s in settlements), len(settlements)
    assert sorted(settlement["position"] for settlement in settlements) == list(range(12))
    closer = await _closer(restate_stack, s.key())
    calls = await _calls(restate_stack, closer)
    asked = [request["positions"] for handler, request in calls if handler == "outcomes"]
    # Six reads, each asked for every rank from its own and answering two; each await after a read
    # served from it.
    assert [len(positions) for positions in asked] == [12, 10, 8, 6, 4, 2], asked
    assert [w["at_most"] for w in (r for h, r in calls if h == "wait")] == [32, 1] * 6


async def test_plain_awaits_over_a_paged_group_read_ahead_from_one_slices_pump_at_a_time(
    restate_stack: Stack,
) -> None:
    """Decision 134 on a group wider than a pump's slice: its ranks spread over two pumps' stores, and
    a read ahead asks one pump only, for the ranks of the window its store keeps (not consecutive);
    every rank is served its own child's outcome, once."""
    s = Scope()
    width = PUMP_SLICE + 44
    group = s.group([thin(f"v{i}") for i in range(width)])
    await restate_stack.turn(open_(group))

    await until(lambda: settled(restate_stack, s.key(), width))
    [read] = await restate_stack.turn(iterate(group))
    settlements = ok(read)["settlements"]
    assert [settlement["rank"] for settlement in settlements] == list(range(1, width + 1))
    assert all(f"v{s['position']}" == s["outcome"]["value"] for s in settlements)
    assert sorted(settlement["position"] for settlement in settlements) == list(range(width))
    closer = await _closer(restate_stack, s.key())
    asked = [
        request["positions"]
        for handler, request in await _calls(restate_stack, closer)
        if handler == "outcomes"
    ]
    assert all(len({position // PUMP_SLICE for position in positions}) == 1 for positions in asked), asked
    assert len(asked) < width // 2, len(asked)  # mostly served from reads ahead


async def test_a_plain_await_sends_one_wake_after_a_served_rank_and_the_window_after_a_wait(
    restate_stack: Stack,
) -> None:
    """Decision 132: a reader behind its group (three ranks held) sends one wake per await, the
    rank's own, or none for a rank read ahead (decision 134); the await that finds its rank not held
    yet waits on that one wake, and the next, the group now behind it, sends the window again, whose
    wakes serve the rank after it with none."""
    s = Scope()
    later = [s.event(f"e{i}") for i in range(3)]
    group = s.group([thin("a"), thin("b"), thin("c"), *(event(name) for name in later)])
    [opened] = await restate_stack.turn(open_(group))

    await until(lambda: settled(restate_stack, s.key(), 3))
    steps = [use(ok(opened)), *[next_() for _ in range(6)], close()]
    reading = asyncio.create_task(restate_stack.turn(*steps))

    async def waited_at(rank: int) -> bool:
        # The opener's wakes for the ranks not settled stay registered: the reader's is a second.
        waiters: list[dict[str, Any]] = (await recorded_meta(restate_stack, s.key()))["waiters"]
        return len([waiter for waiter in waiters if waiter["rank"] == rank]) == 2

    await until(lambda: waited_at(4))  # the await of rank 4 sent one wake, and waits on it
    await restate_stack.emit(later[0], "d")
    await until(lambda: waited_at(5))  # the await of rank 5 sent the window, and waits
    await restate_stack.emit(later[1], "e")
    await restate_stack.emit(later[2], "f")
    read = await reading
    assert [ok(r)["position"] for r in read[1:-1]][3:] == [3, 4, 5], read
    closer = await _closer(restate_stack, s.key())
    waits = [request for handler, request in await _calls(restate_stack, closer) if handler == "wait"]
    # Ranks 2 and 3 send none: the first read held them and read them ahead (decision 134).
    assert [len(w["wakes"]) for w in waits] == [6, 0, 0, 1, 2, 0], waits


async def test_a_resume_of_a_cursor_naming_its_group_sends_its_reopen_no_wakes(restate_stack: Stack) -> None:
    """Decision 132: a reopen's group keeps the wakes it holds and ignores the open's, so a resume of a
    cursor that names its group (which is recorded, or the resume is refused) sends none, where it
    sent a window of them, unused; the await after it registers its own."""
    s = Scope()
    group = s.group([thin(f"v{i}") for i in range(6)])
    [opened] = await restate_stack.turn(open_(group))
    [resumed] = await restate_stack.turn(combine("all", group, handle=ok(opened)))
    assert ok(resumed)["value"] == [f"v{i}" for i in range(6)], resumed
    closer = await _closer(restate_stack, s.key())
    query = f"SELECT entry_json FROM sys_journal WHERE id = {quote(closer)} ORDER BY index"
    journal = await asyncio.to_thread(sql, restate_stack.admin_url, query)
    sends = [json.loads(e["entry_json"]).get("Command", {}).get("OneWayCall") for e in journal]
    opens = [
        json.loads(bytes(send["request"]["parameter"]))
        for send in sends
        if send is not None and send["request"]["invocation_target"]["VirtualObject"]["handler"] == "open"
    ]
    assert [(o["reopen_only"], o["wakes"]) for o in opens] == [(True, [])], opens
