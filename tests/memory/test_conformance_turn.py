"""`lash_restate.testing.conformance.Turn`, the typed turn the scenarios are written with: what it
compiles to, and that a placeholder is never read as a guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from lash_restate.contract import GroupHandle, Ok
from lash_restate.testing.conformance import MemoryTier, Scope, Turn
from lash_restate.testing.conformance._steps import event


async def test_a_turn_compiles_to_the_steps_of_the_handler_it_reads_as(tmp_path: Path) -> None:
    s = Scope()
    group = s.group([s.echo("a"), event(s.event("never"))], wake="first")
    async with Turn(MemoryTier(tmp_path / "counts.txt")) as t:
        g = t.open(group)
        first, saved = g.next(), g.save()
        again = t.resume(saved_text := GroupHandle(s.key(), 2, 0).to_bytes().decode())
        reread = again.next()
        g_closed = again.close()
    assert t.steps == [
        {"type": "open", "group": group},
        {"type": "next"},
        {"type": "save"},
        {"type": "use", "handle": saved_text},
        {"type": "next"},
        {"type": "close"},
    ]
    named = g.opened.ok.incarnation  # the group the host recorded: the cursor reads no other
    assert named is not None
    assert g.opened.ok == GroupHandle(s.key(), 2, 0, incarnation=named)
    assert (first.ok.rank, first.ok.outcome) == (1, Ok(value="a"))
    assert saved.ok == GroupHandle(s.key(), 2, 1, incarnation=named)
    assert reread.ok == first.ok
    assert g_closed.ok is None


async def test_an_answer_read_before_its_turn_ran_fails_saying_so(tmp_path: Path) -> None:
    t = Turn(MemoryTier(tmp_path / "counts.txt"))
    opened = t.open(Scope().group([Scope().echo(1)])).opened
    with pytest.raises(AssertionError, match="its turn has not run yet"):
        _ = opened.ok
    await t.run()
    with pytest.raises(AssertionError, match="expected an error"):
        _ = opened.error
    with pytest.raises(AssertionError, match="a turn runs once"):
        await t.run()


async def test_a_resumed_group_is_made_current_again_and_an_opened_one_cannot_be(tmp_path: Path) -> None:
    """The driver holds one current handle: going back to a resumed group resumes its cursor again;
    going back to one opened in the same turn is refused, since its handle is known only later."""
    s = Scope()
    t = Turn(MemoryTier(tmp_path / "counts.txt"))
    first = t.resume(GroupHandle(s.key(), 1, 0))
    t.open(s.group([s.echo(1)], batch="other"))
    first.next()
    assert t.steps[-2:] == [
        {"type": "use", "handle": GroupHandle(s.key(), 1, 0).to_bytes().decode()},
        {"type": "next"},
    ]
    opened = t.open(s.group([s.echo(1)], batch="third"))
    t.resume(GroupHandle(s.key(), 1, 0))
    with pytest.raises(AssertionError, match="another group became current"):
        opened.next()
