"""The combinators' decision, host-neutral: given the settlements consumed so far in rank order,
what ECMA-262's `Promise.all`, `allSettled`, `race` and `any` give (ADR, "Wake policy is journaled
identity": early exit is the caller's decision, never a host obligation)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeAlias

from ._controller import (
    EndsInvocations,
    RecordsSaves,
    Reopens,
    RuntimeEffectController,
    require_disposition,
    require_group,
    require_handle,
    settlement_run,
)
from ._errors import DispositionDrift, EmptyGroup, InvalidHandle, InvalidInput, WakeRuleDrift
from ._group import GroupKey, RuntimeEffectGroup
from ._handle import GroupHandle
from ._policies import GroupWakePolicy, LoserPolicy, effective_disposition
from ._settlement import Ok, Outcome, Settlement

__all__ = [
    "Combinator",
    "CombinatorResult",
    "FulfilledResult",
    "RejectedResult",
    "SuspendedResult",
    "empty_result",
    "reopen_as_saved",
    "run_combinator",
]


class Combinator(StrEnum):
    ALL = "all"
    ALL_SETTLED = "all_settled"
    RACE = "race"
    ANY = "any"

    @property
    def wake(self) -> GroupWakePolicy:
        return {
            Combinator.ALL: GroupWakePolicy.ALL,
            Combinator.ALL_SETTLED: GroupWakePolicy.ALL,
            Combinator.RACE: GroupWakePolicy.FIRST,
            Combinator.ANY: GroupWakePolicy.FIRST_SUCCESS,
        }[self]

    @property
    def disposition(self) -> LoserPolicy | None:
        """The disposition this combinator fixes, or None where the caller declares it.

        ADR, "Loser disposition is declared at open": `all` and `allSettled` declare
        `RunToCompletion`; `race` and `any` default to it and may declare `Cancel` (a deadline arm).
        """
        if self in (Combinator.ALL, Combinator.ALL_SETTLED):
            return LoserPolicy.RUN_TO_COMPLETION
        return None


@dataclass(frozen=True, kw_only=True)
class _Ended:
    """What every combinator result says: which group, and the positions in the rank order consumed."""

    group_key: str
    order: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class FulfilledResult(_Ended):
    """The combinator fulfilled with ``value`` (ECMA-262's value for the settlements in ``order``)."""

    status: Literal["fulfilled"] = field(default="fulfilled", init=False)
    value: Any
    # The position of the child that decided a `race` or `any` (its value is ``value``); None for
    # `all` and `allSettled`, which every child decides.
    winner: int | None = None


@dataclass(frozen=True, kw_only=True)
class RejectedResult(_Ended):
    """The combinator rejected.

    ``reason`` is the first consumed rejecting settlement for `all` and `race`, and every
    outcome in input order for `any` (ECMA-262 AggregateError).
    """

    status: Literal["rejected"] = field(default="rejected", init=False)
    reason: Settlement | tuple[Outcome, ...]


@dataclass(frozen=True, kw_only=True)
class SuspendedResult(_Ended):
    """The combinator stopped before deciding; ``handle`` is the cursor to save and resume from."""

    status: Literal["suspended"] = field(default="suspended", init=False)
    handle: GroupHandle


CombinatorResult: TypeAlias = FulfilledResult | RejectedResult | SuspendedResult
"""How a combinator ended; tell the three apart with ``isinstance`` or ``status``."""


def _verdict(
    kind: Combinator, group_key: str, n: int, seen: list[Settlement], since: int = 0
) -> FulfilledResult | RejectedResult | None:
    """ECMA-262 semantics over the settlements consumed so far; None means keep consuming.

    ``seen[:since]`` were judged already (and decided nothing), so only the rest is scanned: a wide
    group's fold costs O(1) per settlement, not O(consumed) (decision 36).
    """

    def fulfilled(value: Any, winner: Settlement | None = None) -> FulfilledResult:
        position = None if winner is None else winner.position
        return FulfilledResult(group_key=group_key, order=_order(seen), value=value, winner=position)

    def rejected(reason: Settlement | tuple[Outcome, ...]) -> RejectedResult:
        return RejectedResult(group_key=group_key, order=_order(seen), reason=reason)

    def by_position() -> dict[int, Outcome]:
        return {s.position: s.outcome for s in seen}

    if kind is Combinator.ALL:
        for s in seen[since:]:
            if not isinstance(s.outcome, Ok):
                return rejected(s)
        if len(seen) == n:
            outcomes = by_position()
            return fulfilled([_value(outcomes[p]) for p in range(n)])
    elif kind is Combinator.ALL_SETTLED:
        if len(seen) == n:
            outcomes = by_position()
            return fulfilled([outcomes[p] for p in range(n)])
    elif kind is Combinator.RACE:
        if seen:
            first = seen[0]
            return fulfilled(first.outcome.value, first) if isinstance(first.outcome, Ok) else rejected(first)
    else:
        for s in seen[since:]:
            if isinstance(s.outcome, Ok):
                return fulfilled(s.outcome.value, s)
        if len(seen) == n:
            outcomes = by_position()
            return rejected(tuple(outcomes[p] for p in range(n)))
    return None


def _order(seen: list[Settlement]) -> tuple[int, ...]:
    return tuple(s.position for s in seen)


def _value(outcome: Outcome) -> Any:
    assert isinstance(outcome, Ok)
    return outcome.value


async def run_combinator(
    controller: RuntimeEffectController,
    kind: Combinator,
    group: RuntimeEffectGroup,
    *,
    handle: GroupHandle | None = None,
    stop_after: int | None = None,
    on_reject: LoserPolicy | None = None,
) -> CombinatorResult:
    """Open (or reopen) ``group`` and consume it until ``kind`` decides, or ``stop_after`` settlements.

    ``on_reject=CANCEL`` closes a group that rejected with `Cancel`: the disposition declared at open
    narrows once the rejection is consumed, so the children still running are cancelled (ADR: close
    may only narrow); a group that fulfils is closed as declared.

    With a saved ``handle`` this is a resume: the group is reopened (a group closed since is refused
    `GroupNotOpen`, never started over), the ranks the handle already consumed are re-read (they
    are durable facts) to rebuild the fold, then consumption continues from the saved cursor.
    A group declaring another wake rule than ``kind``'s, or (for
    `all` and `allSettled`) another disposition than `RunToCompletion`, is refused unopened.
    """
    # Checked before anything is asked of the host: an untyped caller may pass anything.
    if not isinstance(kind, Combinator):
        raise InvalidInput(f"kind must be a Combinator (e.g. Combinator.ALL), not {kind!r}")
    group = require_group(group)
    if handle is not None:
        require_handle(handle)
    if stop_after is not None and (
        isinstance(stop_after, bool) or not isinstance(stop_after, int) or stop_after < 0
    ):
        raise InvalidInput(f"stop_after must be a non-negative integer, not {stop_after!r}")
    on_reject = require_disposition(on_reject)  # refused unopened, not only once a child rejects
    if on_reject is not None:
        # A widening is refused unopened too: at the close it would lose the verdict and the close.
        effective_disposition(group.disposition, on_reject, group_key=str(group.key))
    if group.wake is not kind.wake:
        # The wake rule is journaled identity: a combinator only runs groups declared with its own.
        raise WakeRuleDrift(
            f"{kind.value} needs wake {kind.wake.value}, the group declares {group.wake.value}",
            group_key=str(group.key),
        )
    if kind.disposition is not None and group.disposition is not kind.disposition:
        # Refused before anything is recorded, as the wake rule is: the disposition is identity too.
        raise DispositionDrift(
            f"{kind.value} needs disposition {kind.disposition.value}, "
            f"the group declares {group.disposition.value}",
            group_key=str(group.key),
        )
    opened = await (
        controller.open_effect_group(group) if handle is None else _reopen(controller, group, handle)
    )
    cursor = handle if handle is not None else opened
    try:
        # Begun right after the open, and nothing of the caller's runs until the close (decision 32).
        run = settlement_run(controller)
        seen: list[Settlement] = []
        if cursor.consumed:
            replay = GroupHandle(cursor.group_key, cursor.child_count, 0, incarnation=cursor.incarnation)
            for _ in range(cursor.consumed):
                seen.append(await run.next(replay))
        verdict = _verdict(kind, cursor.group_key, len(group), seen)
        while verdict is None:
            if stop_after is not None and cursor.consumed >= stop_after:
                if isinstance(controller, RecordsSaves):  # the handle is answered to be saved: parked
                    controller.handle_saved(cursor)
                return SuspendedResult(group_key=cursor.group_key, order=_order(seen), handle=cursor)
            seen.append(await run.next(cursor))
            verdict = _verdict(kind, cursor.group_key, len(group), seen, since=len(seen) - 1)
    except BaseException as error:
        # Decision 122: an error that ends the invocation (a cancel of it, say) closes a group this
        # combinator opened, as declared: nothing else can reach it once this raises. A resumed one
        # is left to the saved cursor it was resumed from, which something else may hold.
        if handle is None and isinstance(controller, EndsInvocations) and controller.ends_invocation(error):
            with contextlib.suppress(Exception):  # the error that ended the invocation is the one raised
                await controller.close_effect_group(cursor)
        raise
    # The declared disposition applies to the losers: RunToCompletion lets them run on (ECMA-262),
    # unless the caller asked to narrow it once a rejection decided the combinator.
    # Only a change is passed: a close as declared stays the call earlier releases journaled.
    narrows = isinstance(verdict, RejectedResult) and on_reject not in (None, group.disposition)
    await controller.close_effect_group(cursor, on_reject if narrows else None)
    return verdict


async def _reopen(
    controller: RuntimeEffectController, group: RuntimeEffectGroup, handle: GroupHandle
) -> GroupHandle:
    """A resume reopens its group (decision 41): one closed since, or never recorded, is refused
    (`GroupNotOpen`), never started over, and a handle of another group is refused unopened."""
    key = str(group.key)
    if (handle.group_key, handle.child_count) != (key, len(group)):
        raise InvalidHandle(
            f"the handle is of group {handle.group_key!r} of {handle.child_count} children, "
            f"not of this group of {len(group)}",
            group_key=key,
        )
    if not isinstance(controller, Reopens):
        raise InvalidInput(
            f"{type(controller).__name__} cannot reopen a saved group: it has no reopen_effect_group, "
            "and a resume must never start a closed group over",
            group_key=key,
        )
    return await reopen_as_saved(controller, group, handle)


async def reopen_as_saved(controller: Reopens, group: RuntimeEffectGroup, saved: GroupHandle) -> GroupHandle:
    """Reopen ``group`` for a resume of the cursor ``saved``: naming the group it reads, if it names
    one, so that a group opened under the key since is refused as a closed one is. A cursor that
    names none is reopened as a host without ``incarnation=`` takes it."""  # decision 124
    if saved.incarnation is None:
        return await controller.reopen_effect_group(group)
    return await controller.reopen_effect_group(group, incarnation=saved.incarnation)


def empty_result(kind: Combinator, key: GroupKey | str) -> CombinatorResult:
    """What a combinator over no children gives, decided locally: no group is ever opened (ADR).

    ``all([])`` and ``allSettled([])`` fulfil with ``[]`` and ``any([])`` rejects at once with no
    error, as in ECMA-262 (raised, by `any_`, as `EmptyGroup`); ``race([])`` never settles there,
    and a never-settling durable await must not exist, so it is refused with `EmptyGroup`.
    """
    group_key = str(key)
    if kind is Combinator.RACE:
        raise EmptyGroup("race([]) never settles; refused instead of parking forever", group_key=group_key)
    if kind is Combinator.ANY:
        return RejectedResult(group_key=group_key, order=(), reason=())
    return FulfilledResult(group_key=group_key, order=(), value=[])
