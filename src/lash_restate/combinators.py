"""`all`, `allSettled`, `race` and `any` as caller-side loops over any controller.

ADR, "Wake policy is journaled identity": every aggregate consumes settlements
in durable rank order; early exit is the caller's decision, never a host
obligation. The result for a settlement timeline is what ECMA-262 gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from .contract import (
    AwaitEvent,
    Cancelled,
    Combinator,
    CombinatorResult,
    EmptyGroup,
    Err,
    FulfilledResult,
    GroupHandle,
    GroupKey,
    InvalidInput,
    LashError,
    LoserPolicy,
    Outcome,
    RejectedResult,
    RuntimeEffectController,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    RuntimeErrorCode,
    Settlement,
    Sleep,
    SuspendedResult,
    empty_result,
    run_combinator,
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


# Why each status: decision 53. A child whose rejection carries no HTTP status (a tool's, an event's,
# lash's own `too_large`…) ends its caller as a failed `ctx.run` action does natively: 500.
NO_STATUS = 500
# A cancelled child ends its caller as Restate ends an invocation it cancelled: 409.
CANCELLED_STATUS = 409


def child_status(outcome: Outcome) -> int:
    """The status a rejected child's outcome stands for, as a native ``TerminalError.status_code``:
    a call's own (its ``Err.code`` is the status its callee ended with), an HTTP error status a tool
    gave as its code, 409 for a cancelled child, else 500."""
    if isinstance(outcome, Cancelled):
        return CANCELLED_STATUS
    code = outcome.code if isinstance(outcome, Err) else None
    if code is not None and len(code) == 3 and code.isascii() and code.isdigit() and 400 <= int(code) < 600:
        return int(code)
    return NO_STATUS


def child_message(position: int, outcome: Outcome) -> str:
    """A rejected child's own message, as a native caller reads its callee's
    ``TerminalError.message``: the callee's (or the tool's) message, or that it was cancelled."""
    if isinstance(outcome, Err):
        return outcome.message
    return (
        f"child {position} was cancelled" if isinstance(outcome, Cancelled) else describe_rejection(outcome)
    )


def child_metadata(outcome: Outcome) -> dict[str, str] | None:
    """A rejected child's metadata, as a native caller reads its callee's ``TerminalError.metadata``:
    None when it gave none (or the endpoint that settled it does not write it: LASH_ERROR_METADATA)."""
    if isinstance(outcome, Err) and outcome.metadata is not msgspec.UNSET:
        return dict(outcome.metadata)
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
    ``position``, the child's 0-based index among the children given, in order, its
    ``replay_key`` and ``outcome``, an `Err` or `Cancelled`). Not a ``restate.TerminalError``: an
    ``except restate.TerminalError`` around a combinator does not catch it; catch ``lash.Rejected``.

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

    @property
    def status_code(self) -> int:
        """The rejecting child's status, as a native call's ``TerminalError.status_code`` (an int):
        a call's callee's own (``TerminalError("out of stock", 409)`` gives 409), an HTTP error
        status a tool gave as its code, 409 for a cancelled child, else 500. Uncaught, the rejection
        ends its handler's invocation with it. (``code`` is lash's code for the error itself.)"""
        return child_status(self.settlement.outcome)

    @property
    def child_message(self) -> str:
        """The rejecting child's own message, as a native call's ``TerminalError.message``: its
        callee's (``TerminalError("out of stock", 409)`` gives ``"out of stock"``), its tool's, or
        that it was cancelled. Uncaught, the rejection ends its handler's invocation with it.
        (``message`` is lash's, which names the child.)"""
        return child_message(self.settlement.position, self.settlement.outcome)

    @property
    def metadata(self) -> dict[str, str] | None:
        """The rejecting child's metadata, as a native call's ``TerminalError.metadata``: its callee's
        (``TerminalError("out of stock", 409, metadata={"left": "5"})`` gives ``{"left": "5"}``) or
        its tool's, None if it gave none. Written only by an endpoint whose LASH_ERROR_METADATA is on
        (off by default in this release: an earlier release could not read it). Uncaught, the
        rejection ends its handler's invocation with it."""
        return child_metadata(self.settlement.outcome)

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

    @property
    def status_code(self) -> int:
        """The child's status, as `Rejected.status_code` reads it."""
        return child_status(self.outcome)

    @property
    def child_message(self) -> str:
        """The child's own message, as `Rejected.child_message` reads it."""
        return child_message(self.position, self.outcome)

    @property
    def metadata(self) -> dict[str, str] | None:
        """The child's metadata, as `Rejected.metadata` reads it."""
        return child_metadata(self.outcome)

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
    def status_code(self) -> int:
        """The children's status when they all share one (`Rejected.status_code`), else 500.
        Uncaught, the rejection ends its handler's invocation with it."""
        statuses = {child.status_code for child in self.exceptions}
        return statuses.pop() if len(statuses) == 1 else NO_STATUS

    @property
    def metadata(self) -> dict[str, str] | None:
        """The children's metadata when they all gave the same (`Rejected.metadata`), else None (each
        child's is its ``ChildRejected``'s). Uncaught, the rejection ends its handler's invocation
        with it, beside the status they share."""
        first, *rest = (child.metadata for child in self.exceptions)
        return first if all(other == first for other in rest) else None

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
        return (aggregate, (self.errors, self.group_key, [e.position for e in self.exceptions]))


def aggregate(errors: list[Outcome], group_key: str | None, positions: list[int]) -> AggregateRejection:
    whole = positions == list(range(len(errors)))
    return AggregateRejection(errors, group_key=group_key, positions=None if whole else positions)


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
    max_in_flight: int | None = None,
) -> CombinatorResult:
    """`run_combinator` over ``children`` as a group of ``kind``'s wake rule; no children: `empty_result`."""
    if not children:
        return empty_result(kind, key)
    group = RuntimeEffectGroup(key, children, wake=kind.wake, disposition=losers, max_in_flight=max_in_flight)
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
    # The settlement that decided: after a resume it need not be the last consumed (the ranks the
    # saved cursor consumed are read again, and the first of them may have decided).
    position = fulfilled.winner if fulfilled.winner is not None else fulfilled.order[-1]
    return position, fulfilled.value


async def _settle(
    controller: RuntimeEffectController,
    kind: Combinator,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    disposition: LoserPolicy,
    on_reject: LoserPolicy | None = None,
    max_in_flight: int | None = None,
) -> Any:
    result = await combine(
        controller, kind, key, children, losers=disposition, on_reject=on_reject, max_in_flight=max_in_flight
    )
    return _decided(result).value


async def all_(
    controller: RuntimeEffectController,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    *,
    on_reject: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    max_in_flight: int | None = None,
) -> list[Any]:
    """`Promise.all`: values in input order, or `Rejected` at the first consumed rejection.

    The group declares `RunToCompletion`; ``on_reject=CANCEL`` narrows it to `Cancel` at the close
    once a rejection is consumed, so the rest are cancelled (fail fast). ``max_in_flight`` bounds
    how many children run at once (`RuntimeEffectGroup`).
    """
    disposition = LoserPolicy.RUN_TO_COMPLETION
    return list(
        await _settle(controller, Combinator.ALL, key, children, disposition, on_reject, max_in_flight)
    )


async def all_settled(
    controller: RuntimeEffectController,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    *,
    max_in_flight: int | None = None,
) -> list[Outcome]:
    """`Promise.allSettled`: every outcome, in input order."""
    disposition = LoserPolicy.RUN_TO_COMPLETION
    kind = Combinator.ALL_SETTLED
    return list(await _settle(controller, kind, key, children, disposition, max_in_flight=max_in_flight))


async def race(
    controller: RuntimeEffectController,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    max_in_flight: int | None = None,
) -> Any:
    """`Promise.race`: the first settlement's value, or `Rejected` if it rejected (`EmptyGroup` if none)."""
    return await _settle(controller, Combinator.RACE, key, children, losers, max_in_flight=max_in_flight)


async def any_(
    controller: RuntimeEffectController,
    key: GroupKey | str,
    children: Sequence[RuntimeEffectEnvelope],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    max_in_flight: int | None = None,
) -> Any:
    """`Promise.any`: the first success, or `AggregateRejection` with errors in input order (`EmptyGroup`
    if there is no child)."""
    return await _settle(controller, Combinator.ANY, key, children, losers, max_in_flight=max_in_flight)


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

    Raises:
        Rejected: the event was rejected first (named ``"event"``).
        InvalidInput: ``replay_key_prefix`` is no string.
        InvalidEnvelope: ``event`` or the prefix makes no key, or ``deadline_ms`` is no
            non-negative int.
    """
    if not isinstance(replay_key_prefix, str):  # written into each arm's key: refused, not made text
        raise InvalidInput(f"replay_key_prefix must be a string, not {type(replay_key_prefix).__name__}")
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
