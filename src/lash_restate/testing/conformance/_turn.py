"""A caller's turn written as its handler would be: open, next, save, resume, close.

A scenario cannot simply run a handler's body on every tier: on Restate the body must run inside a
handler, and the `LashTurn` driver runs a list of steps there. So a `Turn` is written like the
handler and compiled to those steps: each call records one step and answers at once with an
`Answer`, a typed placeholder. The tier runs the steps as one turn when the ``async with`` block
ends; then every answer is known, as `Answer.ok` (the typed value) or `Answer.error` (the error the
step ended in; a turn goes on past a step's error, as a handler catching it would)::

    async with Turn(tier) as t:
        g = t.open(group)
        first, saved = g.next(), g.save()
    assert first.ok.rank == 1
    async with Turn(tier) as t:
        again = t.resume(saved.ok).next()

An answer read before its turn ran fails the test saying so: the placeholder is never a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, TypeVar

import msgspec

from ...contract import GroupHandle, Settlement
from . import _steps as steps
from ._answers import Answer, Combined, Iterated, Selected, decode_handle, decode_none, decode_settlement
from ._tier import Tier

__all__ = ["Block", "Group", "Turn"]

T = TypeVar("T")

Kind = Literal["all", "all_settled", "race", "any"]


def _text(handle: GroupHandle | str) -> str:
    return handle if isinstance(handle, str) else handle.to_bytes().decode()


class Group:
    """A group in a turn: what ``await lash.open(...)`` or a resume gave the handler."""

    __slots__ = ("_resumed", "_turn", "opened")

    def __init__(self, turn: Turn, opened: Answer[GroupHandle], resumed: str | None) -> None:
        self._turn, self._resumed = turn, resumed
        self.opened = opened
        """The open's answer: the handle it returned, or the error that refused it; for a resumed
        group, the cursor it was resumed from."""

    def next(self, *, cancel_after_ms: int | None = None) -> Answer[Settlement]:
        """`await_next_settlement`; with ``cancel_after_ms``, raced against a cancel after that long."""
        return self._turn._step(self, steps.next_(cancel_after_ms), "next", decode_settlement)

    def save(self) -> Answer[GroupHandle]:
        """``g.save()``: the cursor as the handler would persist it."""
        return self._turn._step(self, steps.save(), "save", decode_handle)

    def close(self, disposition: str | None = None) -> Answer[None]:
        """`close_effect_group`, narrowing the disposition to ``disposition`` if given."""
        return self._turn._step(self, steps.close(disposition), "close", decode_none)


class Block:
    """``async with lash.open(...) as g: async for s in g`` in a turn; ``group`` is the saved group the
    block left current (its `Group.save` answers the block's own save)."""

    __slots__ = ("answer", "group")

    def __init__(self, answer: Answer[Iterated], group: Group) -> None:
        self.answer, self.group = answer, group


class Turn:
    """One caller's invocation on ``tier``, written as its handler; run when the block ends."""

    def __init__(self, tier: Tier) -> None:
        self.tier = tier
        self.steps: list[dict[str, Any]] = []
        self._answers: list[list[Answer[Any]]] = []  # per step: its answer, and any read of it
        self._current: Group | None = None
        self._ran = False

    async def __aenter__(self) -> Turn:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            await self.run()

    async def run(self) -> None:
        """Run the recorded steps as one turn on the tier, and resolve every answer."""
        assert not self._ran, "a turn runs once: write the next invocation as a new Turn"
        self._ran = True
        results = await self.tier.turn(*self.steps)
        assert len(results) == len(self._answers), f"{len(self.steps)} steps, {len(results)} answers"
        for answers, result in zip(self._answers, results, strict=True):
            for answer in answers:
                answer._resolve(result)

    # -- a group's life ------------------------------------------------------------------------

    def open(self, group: dict[str, Any]) -> Group:
        """``await lash.open(...)`` of ``group`` (a first open, or a reopen of the same key)."""
        opened: Answer[GroupHandle] = self._record(steps.open_(group), "open", decode_handle)
        self._current = Group(self, opened, None)
        return self._current

    def resume(self, handle: GroupHandle | str) -> Group:
        """The group a saved cursor names, as a fresh invocation restoring it holds it."""
        text = _text(handle)
        self._record(steps.use(text), "use", decode_none)
        resumed: Answer[GroupHandle] = Answer("resume", decode_handle)
        resumed._resolve({"ok": text})
        self._current = Group(self, resumed, text)
        return self._current

    def supports(self) -> Answer[bool]:
        """`supports_effect_groups()`."""
        return self._record(steps.supports(), "supports", bool)

    # -- combinators and the front door ----------------------------------------------------------

    def combine(
        self,
        kind: Kind,
        group: dict[str, Any],
        *,
        stop_after: int | None = None,
        resume: GroupHandle | str | None = None,
        on_reject: str | None = None,
    ) -> Answer[Combined]:
        """`run_combinator` of ``kind`` over ``group``: stopped after ``stop_after`` settlements, resumed
        from the cursor ``resume``, failing fast with ``on_reject``.

        Args:
            kind: ``all``, ``all_settled``, ``race`` or ``any``.
            group: the group, as `Scope.group` writes it.
            stop_after: suspend after this many settlements, answering the saved cursor.
            resume: a saved cursor to go on from.
            on_reject: ``cancel`` to cancel the children still running once a rejection is consumed.
        """
        handle = _text(resume) if resume is not None else None
        step = steps.combine(kind, group, stop_after=stop_after, handle=handle, on_reject=on_reject)
        self._current = None  # the driver's current handle is the result's, if it suspended
        return self._record(step, kind, lambda v: msgspec.convert(v, Combined))

    def all(
        self,
        group: dict[str, Any],
        *,
        stop_after: int | None = None,
        resume: GroupHandle | str | None = None,
        on_reject: str | None = None,
    ) -> Answer[Combined]:
        """`combine` of ``all`` (``lash.all``'s loop).

        Args:
            group: the group, as `Scope.group` writes it.
            stop_after: suspend after this many settlements, answering the saved cursor.
            resume: a saved cursor to go on from.
            on_reject: ``cancel`` to cancel the children still running once a rejection is consumed.
        """
        return self.combine("all", group, stop_after=stop_after, resume=resume, on_reject=on_reject)

    def all_settled(
        self,
        group: dict[str, Any],
        *,
        stop_after: int | None = None,
        resume: GroupHandle | str | None = None,
        on_reject: str | None = None,
    ) -> Answer[Combined]:
        """`combine` of ``all_settled`` (``lash.all_settled``'s loop).

        Args:
            group: the group, as `Scope.group` writes it.
            stop_after: suspend after this many settlements, answering the saved cursor.
            resume: a saved cursor to go on from.
            on_reject: ``cancel`` to cancel the children still running once a rejection is consumed.
        """
        return self.combine("all_settled", group, stop_after=stop_after, resume=resume, on_reject=on_reject)

    def race(
        self,
        group: dict[str, Any],
        *,
        stop_after: int | None = None,
        resume: GroupHandle | str | None = None,
        on_reject: str | None = None,
    ) -> Answer[Combined]:
        """`combine` of ``race`` (``lash.race``'s loop).

        Args:
            group: the group, as `Scope.group` writes it.
            stop_after: suspend after this many settlements, answering the saved cursor.
            resume: a saved cursor to go on from.
            on_reject: ``cancel`` to cancel the children still running once a rejection is consumed.
        """
        return self.combine("race", group, stop_after=stop_after, resume=resume, on_reject=on_reject)

    def any(
        self,
        group: dict[str, Any],
        *,
        stop_after: int | None = None,
        resume: GroupHandle | str | None = None,
        on_reject: str | None = None,
    ) -> Answer[Combined]:
        """`combine` of ``any`` (``lash.any``'s loop).

        Args:
            group: the group, as `Scope.group` writes it.
            stop_after: suspend after this many settlements, answering the saved cursor.
            resume: a saved cursor to go on from.
            on_reject: ``cancel`` to cancel the children still running once a rejection is consumed.
        """
        return self.combine("any", group, stop_after=stop_after, resume=resume, on_reject=on_reject)

    def signal_or_deadline(self, key: str, event: str, deadline_ms: int) -> Answer[Selected]:
        """`combinators.signal_or_deadline`: the event against a deadline, as group ``key``.

        Args:
            key: the group's key.
            event: the durable event's name.
            deadline_ms: the deadline, in milliseconds.
        """
        step = steps.select(key, event, deadline_ms, f"{key}/sel")
        return self._record(step, "signal_or_deadline", lambda v: msgspec.convert(v, Selected))

    def front(
        self,
        entry: Literal["all", "all_settled", "race", "any", "select"],
        key: str,
        children: list[dict[str, Any]] | dict[str, dict[str, Any]],
        *,
        losers: str | None = None,
    ) -> Answer[dict[str, Any]]:
        """``lash.<entry>(ctx, children, key=key)`` through the front door. Its values come back as
        ``{"type": class name, "value": JSON}`` (the shape `lash_restate.testing.turn.FrontStep` gives),
        so a scenario sees which model the front door handed back.

        Args:
            entry: the front door's entry point.
            key: the group's key.
            children: the children (for ``select``, by name).
            losers: ``cancel`` or ``run_to_completion`` (the default), for ``race``, ``any`` and
                ``select``.
        """
        step = steps.front(entry, key, children, losers=losers)
        return self._record(step, f"lash.{entry}", dict)

    def iterate(
        self,
        group: dict[str, Any],
        *,
        resume: GroupHandle | str | None = None,
        save_after: int | None = None,
        raise_after: int | None = None,
    ) -> Block:
        """``async with lash.open(group, resume=resume) as g: async for s in g``, saving and leaving the
        block after ``save_after`` settlements, or raising inside it after ``raise_after``.

        Args:
            group: the group, as `Scope.group` writes it.
            resume: a saved cursor to reopen the group from.
            save_after: save the cursor and leave the block after this many settlements.
            raise_after: raise inside the block after this many settlements.

        Returns:
            The `Block`: what the loop received, and the group it left current.
        """
        if resume is not None:
            self.resume(resume)
        step = steps.iterate(group, resume=resume is not None, save_after=save_after, raise_after=raise_after)
        answer = self._record(step, "async for", lambda v: msgspec.convert(v, Iterated))
        saved: Answer[GroupHandle] = Answer(
            "the block's save", lambda v: decode_handle(msgspec.convert(v, Iterated).saved)
        )
        self._answers[-1].append(saved)  # the same answer, read as the cursor the block saved
        self._current = Group(self, saved, None)
        return Block(answer, self._current)

    # -- the compiler ------------------------------------------------------------------------------

    def _record(self, step: dict[str, Any], what: str, decode: Callable[[Any], T]) -> Answer[T]:
        assert not self._ran, "this turn has run: write the next invocation as a new Turn"
        answer = Answer(f"step {len(self.steps)} ({what})", decode)
        self.steps.append(step)
        self._answers.append([answer])
        return answer

    def _step(self, group: Group, step: dict[str, Any], what: str, decode: Callable[[Any], T]) -> Answer[T]:
        """A step on ``group``: the driver holds one current handle, so a group that is not current
        is made so again from its saved cursor (a resumed group), and one opened earlier in this turn
        cannot be (its handle is known only once the turn ran)."""
        assert group._turn is self, "a group belongs to the turn that opened or resumed it"
        if group is not self._current:
            assert group._resumed is not None, (
                "another group became current since this one was opened in this turn: save it, "
                "and resume the saved cursor in a later turn"
            )
            self.resume(group._resumed)
            self._current = group
        return self._record(step, what, decode)
