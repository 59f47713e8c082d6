"""The group's guard of its waiting callers' wakes (decision 83): what it keeps while a group is read.

What it is for, a record deleted under a waiting caller, is `test_restate_cli.py`'s (with Restate's
own `state clear`); this file holds what it costs: a caller that reads a group as fast as it settles
registers wakes again and again, and the guards of the wakes already woken must not pile up.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from lash_restate.inspection import quote, sql
from lash_restate.testing import LocalStack
from tests.conformance.builders import Scope, close, event, next_, ok, open_
from tests.engine.test_operator import _nothing_left, turn_in_background, until

pytestmark = pytest.mark.restate

WIDTH = 40  # past the 32 wakes an open registers: the caller registers its next ones with `wait`


async def _guarded(stack: LocalStack, key: str) -> dict[str, list[str]]:
    query = (
        "SELECT value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(key)} AND key = 'guarded'"
    )
    rows = await asyncio.to_thread(sql, stack.server.admin_url, query)
    return msgspec.json.decode(rows[0]["value_utf8"], type=dict[str, list[str]]) if rows else {}


async def _status(stack: LocalStack, invocation: str) -> str | None:
    rows = await asyncio.to_thread(
        sql, stack.server.admin_url, f"SELECT status FROM sys_invocation WHERE id = {quote(invocation)}"
    )
    return str(rows[0]["status"]) if rows else None


async def _cancelled(stack: LocalStack, invocation: str) -> bool:
    return await _status(stack, invocation) != "scheduled"  # ended, or gone from the table


async def test_a_registration_of_wakes_cancels_the_guards_whose_wakes_were_all_woken(
    restate_stack: LocalStack,
) -> None:
    """The open registers wakes for ranks 1 to 32 and a guard for them. Once the caller has read
    those ranks and one more, it registers wakes for the next with a guard of their own (the rest of
    the ranks, or the next one alone if the group had served the caller's read before: decision
    132); the open's guard, none of whose wakes is still registered, is cancelled (not left to look
    five minutes later), and only the new one is kept."""
    stack = restate_stack
    s = Scope()
    names = [s.event(f"e{i}") for i in range(WIDTH)]
    caller = turn_in_background(
        stack, s, open_(s.group([event(n) for n in names])), *[next_()] * WIDTH, close()
    )
    [(opens, first)] = (await until(lambda: _guarded(stack, s.key()))).items()
    assert len(first) == 32
    for name in names[:33]:  # ranks 1 to 32 woken by the open's wakes, rank 33 read
        await stack.emit(name, name)

    async def replaced() -> dict[str, list[str]] | None:
        guarded = await _guarded(stack, s.key())
        return guarded if guarded and opens not in guarded else None

    [(again, rest)] = (await until(replaced)).items()
    # Ranks 34 on, or 33 on if the caller asked before rank 33 was recorded; one rank's alone if the
    # group had served the caller's read before it.
    assert len(rest) in (1, WIDTH - 33, WIDTH - 32) and not set(rest) & set(first)
    assert await _status(stack, again) == "scheduled"
    await until(lambda: _cancelled(stack, opens))  # before its first look, five minutes away
    for name in names[33:]:
        await stack.emit(name, name)
    answered = await caller
    assert answered.status_code == 200, answered.text
    *read, closed = answered.json()[1:]
    assert [ok(r)["rank"] for r in read] == list(range(1, WIDTH + 1))
    # Each emit returns once its event is set; the children it wakes settle in their own time, so
    # two emitted one after the other may rank either way round.
    assert sorted(ok(r)["outcome"]["value"] for r in read) == sorted(names)
    assert "error" not in closed
    await until(lambda: _nothing_left(stack, s.key()))  # the close cancelled the guard left
