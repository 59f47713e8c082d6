"""`all`, `allSettled`, `race` and `any` as caller-side loops over any controller.

ADR, "Wake policy is journaled identity": every aggregate consumes settlements
in durable rank order; early exit is the caller's decision, never a host
obligation. The result for a settlement timeline is what ECMA-262 gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeAlias

from .contract import (
    AwaitEvent,
    Cancelled,
    DispositionDrift,
    EmptyGroup,
    Err,
    GroupHandle,
    GroupKey,
    GroupWakePolicy,
    LashError,
    LoserPolicy,
    Ok,
    Outcome,
    RuntimeEffectController,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    RuntimeErrorCode,
    Settlement,
    Sleep,
    WakeRuleDrift,
    settlement_run,
)

__all__ = [
    "AggregateRejection",
    "ChildRejected",
    "Combinator",
    "CombinatorResult",
    "FulfilledResult",
    "Rejected",
    "RejectedResult",
    "SuspendedResult",
    "all_",
    "all_settled",
    "any_",
    "combine",
    "describe_rejection",
    "empty_result",
    "race",
    "run_combinator",
    "select",
    "signal_or_deadline",
    "won",
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


def describe_rejection(outcome: Outcome) -> str:
    """A rejected child's outcome as a person reads it: its message and code, or that it was cancelled."""
    if isinstance(outcome, Err):
        return outcome.message if outcome.code is None else f"{outcome.message} (code {outcome.code})"
    if isinstance(outcome, Cancelled):
        return "cancelled"
    return f"not a rejection: {outcome!r}"


class Rejected(LashError):
    """`all`, `race` or `select` rejected: ``settlement`` is the first consumed rejecting child's (its
    ``position``, ``replay_key`` and ``outcome``, an `Err` or `Cancelled`).

    Uncaught in a Restate handler it ends the invocation with the child's own status and message.
    """

    code = RuntimeErrorCode.REJECTED
    name: str | None = None
    """For `select`, the name of the child that rejected (its position is ``settlement.position``)."""

    def __init__(self, settlement: Settlement, *, group_key: str | None = None) -> None:
        super().__init__(
            f"child {settlement.position} rejected: {describe_rejection(settlement.outcome)}",
            group_key=group_key,
            position=settlement.position,
            replay_key=settlement.replay_key,
        )
        self.settlement = settlement

    def named(self, name: str) -> None:
        """Name the child that rejected (`select`'s name for it), in ``name`` and in the message."""
        self.name = name
        self.message = f"child {name!r} rejected: {describe_rejection(self.settlement.outcome)}"

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[type[Rejected], tuple[Settlement], dict[str, Any]]:
        return (Rejected, (self.settlement,), self.__dict__)


class ChildRejected(LashError):
    """One child's rejection inside an `AggregateRejection`: its input ``position`` and its ``outcome``."""

    code = RuntimeErrorCode.CHILD_REJECTED
    position: int

    def __init__(self, position: int, outcome: Outcome) -> None:
        super().__init__(f"child {position} rejected: {describe_rejection(outcome)}", position=position)
        self.outcome = outcome

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[type[ChildRejected], tuple[int, Outcome], dict[str, Any]]:
        return (ChildRejected, (self.position, self.outcome), self.__dict__)


# ``message`` is the exception group's own (read-only there), as LashError's is an attribute.
class AggregateRejection(ExceptionGroup[ChildRejected], LashError):  # type: ignore[override]
    """`any` found no success (ECMA-262 AggregateError): one `ChildRejected` per child, in input order,
    and ``errors``, their outcomes. An `ExceptionGroup`, so ``except*`` picks children out of it.

    It always holds a child: an exception group cannot be empty, so `any([])`, whose AggregateError
    would hold none, is refused with `EmptyGroup` instead (the combinator's result,
    `RejectedResult`, says it exactly: rejected, ``reason == ()``).
    """

    code = RuntimeErrorCode.AGGREGATE_REJECTION
    errors: list[Outcome]

    def __new__(
        cls,
        errors: Sequence[Outcome],
        *,
        group_key: str | None = None,
        positions: Sequence[int] | None = None,
    ) -> AggregateRejection:
        """``positions``: the children's input positions when they are not ``0, 1, …`` (a split keeps
        its children's own)."""
        if not errors:
            raise EmptyGroup(
                "an AggregateRejection holds at least one rejected child: any([]) is refused instead",
                group_key=group_key,
            )
        at = list(range(len(errors))) if positions is None else list(positions)
        if len(at) != len(errors):
            raise ValueError(f"{len(errors)} errors at {len(at)} positions")
        members = [ChildRejected(i, e) for i, e in zip(at, errors, strict=True)]
        if positions is None:
            message = f"all {len(errors)} children rejected"
        else:
            message = f"child{'ren' if len(at) > 1 else ''} {', '.join(map(str, at))} rejected"
        group = super().__new__(cls, message, members)
        group.errors = list(errors)
        group.group_key = group_key
        return group

    def __init__(
        self,
        errors: Sequence[Outcome],
        *,
        group_key: str | None = None,
        positions: Sequence[int] | None = None,
    ) -> None:
        super().__init__(self.message, list(self.exceptions))

    @property
    def exceptions(self) -> tuple[ChildRejected, ...]:
        """One `ChildRejected` per child, in input order (never a nested group)."""
        members: tuple[ChildRejected, ...] = ExceptionGroup.exceptions.__get__(self)
        return members

    def derive(self, excs: Sequence[ChildRejected]) -> AggregateRejection:  # type: ignore[override]
        # `except*` splits keep the type, the group's key, and the positions and outcomes of the
        # children they keep.
        return AggregateRejection(
            [e.outcome for e in excs], group_key=self.group_key, positions=[e.position for e in excs]
        )

    def __reduce__(self) -> tuple[Any, tuple[list[Outcome], str | None, list[int]]]:
        return (_aggregate, (self.errors, self.group_key, [e.position for e in self.exceptions]))


def _aggregate(errors: list[Outcome], group_key: str | None, positions: list[int]) -> AggregateRejection:
    whole = positions == list(range(len(errors)))
    return AggregateRejection(errors, group_key=group_key, positions=None if whole else positions)


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

    def fulfilled(value: Any) -> FulfilledResult:
        return FulfilledResult(group_key=group_key, order=_order(seen), value=value)

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
            return fulfilled(first.outcome.value) if isinstance(first.outcome, Ok) else rejected(first)
    else:
        for s in seen[since:]:
            if isinstance(s.outcome, Ok):
                return fulfilled(s.outcome.value)
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

    With a saved ``handle`` this is a resume: the ranks it already consumed are
    re-read (they are durable facts) to rebuild the fold, then consumption
    continues from the saved cursor. A group declaring another wake rule than ``kind``'s, or (for
    `all` and `allSettled`) another disposition than `RunToCompletion`, is refused unopened.
    """
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
    opened = await controller.open_effect_group(group)
    # Begun right after the open, and nothing of the caller's runs until the close (decision 32).
    run = settlement_run(controller)
    cursor = handle if handle is not None else opened
    seen: list[Settlement] = []
    if cursor.consumed:
        replay = GroupHandle(cursor.group_key, cursor.child_count, 0)
        for _ in range(cursor.consumed):
            seen.append(await run.next(replay))
    verdict = _verdict(kind, cursor.group_key, len(group), seen)
    while verdict is None:
        if stop_after is not None and cursor.consumed >= stop_after:
            return SuspendedResult(group_key=cursor.group_key, order=_order(seen), handle=cursor)
        seen.append(await run.next(cursor))
        verdict = _verdict(kind, cursor.group_key, len(group), seen, since=len(seen) - 1)
    # The declared disposition applies to the losers: RunToCompletion lets them run on (ECMA-262),
    # unless the caller asked to narrow it once a rejection decided the combinator.
    # Only a change is passed: a close as declared stays the call earlier releases journaled.
    narrows = isinstance(verdict, RejectedResult) and on_reject not in (None, group.disposition)
    await controller.close_effect_group(cursor, on_reject if narrows else None)
    return verdict


def empty_result(kind: Combinator, key: GroupKey | str) -> CombinatorResult:
    """What a combinator over no children gives, decided locally: no group is ever opened (ADR).

    ``all([])`` and ``allSettled([])`` fulfil with ``[]`` and ``any([])`` rejects at once with no
    error, as in ECMA-262 (raised, by `any_`, as `EmptyGroup`); ``race([])`` never settles there,
    and a never-settling durable await must not exist, so it is refused with `EmptyGroup` (decision 8).
    """
    group_key = str(key)
    if kind is Combinator.RACE:
        raise EmptyGroup("race([]) never settles; refused instead of parking forever", group_key=group_key)
    if kind is Combinator.ANY:
        return RejectedResult(group_key=group_key, order=(), reason=())
    return FulfilledResult(group_key=group_key, order=(), value=[])


async def combine(
    controller: RuntimeEffectController,
    kind: Combinator,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    handle: GroupHandle | None = None,
    stop_after: int | None = None,
    on_reject: LoserPolicy | None = None,
) -> CombinatorResult:
    """`run_combinator` over ``children`` as a group of ``kind``'s wake rule; no children: `empty_result`."""
    if not children:
        return empty_result(kind, key)
    group = RuntimeEffectGroup(key, children, wake=kind.wake, disposition=losers)
    return await run_combinator(
        controller, kind, group, handle=handle, stop_after=stop_after, on_reject=on_reject
    )


def _decided(result: CombinatorResult) -> FulfilledResult:
    """A decided result that fulfilled; a rejection is raised (`Rejected`, or `AggregateRejection`)."""
    if isinstance(result, FulfilledResult):
        return result
    assert isinstance(result, RejectedResult)  # without stop_after a combinator always decides
    if isinstance(result.reason, Settlement):
        raise Rejected(result.reason, group_key=result.group_key)
    if not result.reason:
        # ECMA-262's AggregateError with no errors, which an exception group cannot be (decision 53).
        raise EmptyGroup(
            "any([]) has no child to succeed: it would reject with no error, and an exception group "
            "cannot be empty; check for no children before calling any",
            group_key=result.group_key,
        )
    raise AggregateRejection(list(result.reason), group_key=result.group_key)


def won(result: CombinatorResult) -> tuple[int, Any]:
    """The winner of a decided `race` or `any`: its position and value; a rejection is raised."""
    fulfilled = _decided(result)
    return fulfilled.order[-1], fulfilled.value  # the settlement that decided is the last consumed


async def _settle(
    controller: RuntimeEffectController,
    kind: Combinator,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    disposition: LoserPolicy,
    on_reject: LoserPolicy | None = None,
) -> Any:
    return _decided(
        await combine(controller, kind, key, children, losers=disposition, on_reject=on_reject)
    ).value


async def all_(
    controller: RuntimeEffectController,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    *,
    on_reject: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
) -> list[Any]:
    """`Promise.all`: values in input order, or `Rejected` at the first consumed rejection.

    The group declares `RunToCompletion`; ``on_reject=CANCEL`` narrows it to `Cancel` at the close
    once a rejection is consumed, so the rest are cancelled (fail fast).
    """
    disposition = LoserPolicy.RUN_TO_COMPLETION
    return list(await _settle(controller, Combinator.ALL, key, children, disposition, on_reject))


async def all_settled(
    controller: RuntimeEffectController, key: GroupKey | str, children: Sequence[RuntimeEffectEnvelope]
) -> list[Outcome]:
    """`Promise.allSettled`: every outcome, in input order."""
    disposition = LoserPolicy.RUN_TO_COMPLETION
    return list(await _settle(controller, Combinator.ALL_SETTLED, key, children, disposition))


async def race(
    controller: RuntimeEffectController,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
) -> Any:
    """`Promise.race`: the first settlement's value, or `Rejected` if it rejected (`EmptyGroup` if none)."""
    return await _settle(controller, Combinator.RACE, key, children, losers)


async def any_(
    controller: RuntimeEffectController,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
) -> Any:
    """`Promise.any`: the first success, or `AggregateRejection` with errors in input order (`EmptyGroup`
    if there is no child)."""
    return await _settle(controller, Combinator.ANY, key, children, losers)


async def select(
    controller: RuntimeEffectController,
    key: GroupKey | str,
    children: Mapping[str, RuntimeEffectEnvelope],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
) -> tuple[str, Any]:
    """`race` over named children: ``(name, value)`` of the first settlement (as ``restate.select``
    answers), or `Rejected` carrying its ``name`` if it rejected (`EmptyGroup` if none). The
    children's positions are their order in ``children``."""
    names = list(children)
    try:
        position, value = won(
            await combine(controller, Combinator.RACE, key, list(children.values()), losers=losers)
        )
    except Rejected as rejected:
        rejected.named(names[rejected.settlement.position])
        raise
    return names[position], value


async def signal_or_deadline(
    controller: RuntimeEffectController,
    key: GroupKey | str,
    *,
    event: str,
    deadline_ms: int,
    replay_key_prefix: str,
) -> tuple[Literal["event", "deadline"], Any]:
    """The signal/deadline select: a two-child First group with Cancel (ADR, Consequences).

    Returns ``("event", payload)`` or ``("deadline", None)``; the losing arm is cancelled.
    """
    children = {
        "event": RuntimeEffectEnvelope(
            command=AwaitEvent(name=event), replay_key=f"{replay_key_prefix}:event"
        ),
        "deadline": RuntimeEffectEnvelope(
            command=Sleep(duration_ms=deadline_ms), replay_key=f"{replay_key_prefix}:deadline"
        ),
    }
    name, value = await select(controller, key, children, losers=LoserPolicy.CANCEL)
    return ("event" if name == "event" else "deadline"), value
