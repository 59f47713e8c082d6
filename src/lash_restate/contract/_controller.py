"""The controller boundary and the executor-resolution seam.

`RuntimeEffectController` is the one cut between a runtime and a host: the
runtime hands it envelopes and a cursor; the host decides how children run and
how ranks are recorded. `GroupExecutors` is the contract's only
executor-resolution seam (ADR, Decision, `open_effect_group`): the open, a
retry and the loser drain all reach a child's runner through it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import msgspec

from ._envelope import RuntimeEffectEnvelope, describe_command
from ._errors import (
    EffectGroupUnsupported,
    InvalidEnvelope,
    InvalidHandle,
    InvalidInput,
    MembershipUnsupported,
    a_kind,
)
from ._group import RuntimeEffectGroup
from ._handle import GroupHandle
from ._limits import OUTCOME_LIMIT, fit_outcome, ok_size, too_large
from ._policies import LoserPolicy
from ._settlement import Err, Ok, Outcome, Settlement

__all__ = [
    "EffectGroupDefaults",
    "ExplainsMisses",
    "GroupExecutor",
    "GroupExecutors",
    "RecordsSaves",
    "Reopens",
    "RuntimeEffectController",
    "ServesRuns",
    "SettlementRun",
    "ToolFailure",
    "Transient",
    "check_await",
    "check_close",
    "describe_miss",
    "execute_once",
    "execute_outcome",
    "require_disposition",
    "require_envelope",
    "require_group",
    "require_groups",
    "require_handle",
    "require_ungrouped",
    "resolve_or_none",
    "resolver_fault",
    "settlement_run",
]


class ToolFailure(Exception):
    """Raised by an executor to reject its child: it settles `Err(message, code, metadata)` and is not
    retried. ``metadata`` (text keys and values, as a ``restate.TerminalError``'s) rides with it.

    Any other exception is a transient fault: the host retries the child with a
    fresh executor from the resolver, a bounded number of times.
    """

    def __init__(
        self, message: str, code: str | None = None, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        # Text, whatever was given (a status code as an int, say): it is stored as the error's.
        message = str(message)
        super().__init__(message)
        self.message = message
        self.code = None if code is None else str(code)
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(f"ToolFailure metadata must be a mapping of text, not {type(metadata).__name__}")
        self.metadata: dict[str, str] | None = None if metadata is None else dict(metadata)


@runtime_checkable
class GroupExecutor(Protocol):
    """Runs one child once. ``execute`` consumes it: a retry resolves a fresh executor."""

    async def execute(self) -> Any:
        """Run the child and return its JSON value, or raise `ToolFailure` to reject it."""
        ...


@runtime_checkable
class GroupExecutors(Protocol):
    """Maps an envelope to a fresh single-use executor, or None when this deployment cannot run it.

    None is a routing fact, never an outcome: the host records no settlement for the child from it.
    A first open is refused whole (`ChildUnroutable`); a child whose runner goes missing later stays
    unsettled, for a drain or a redispatch to run where it can be routed.
    """

    def resolve(self, envelope: RuntimeEffectEnvelope) -> GroupExecutor | None: ...


@runtime_checkable
class RuntimeEffectController(Protocol):
    """What a runtime calls to run effects, singly or as a durable group."""

    def supports_concurrent_effects(self) -> bool: ...

    async def execute_effect(self, envelope: RuntimeEffectEnvelope, executor: GroupExecutor) -> Outcome: ...

    def supports_effect_groups(self) -> bool:
        """True only once a `GroupExecutors` resolver is registered; read at deployment validation."""
        ...

    async def open_effect_group(self, group: RuntimeEffectGroup) -> GroupHandle:
        """Return once the group is durably recorded (not when a child settles), with ``consumed = 0``."""
        ...

    async def await_next_settlement(
        self, handle: GroupHandle, cancel: Awaitable[object] | None = None
    ) -> Settlement:
        """Serve rank ``handle.consumed + 1`` and advance ``handle`` by exactly that one settlement."""
        ...

    async def close_effect_group(self, handle: GroupHandle, disposition: LoserPolicy | None = None) -> None:
        """Release the caller's interest; idempotent; ``disposition`` may only narrow the declared one."""
        ...


class SettlementRun(Protocol):  # decision 32
    """Consecutive awaits made with nothing of the caller's between them.

    A combinator reads through one from its open to its close. Since nothing can reach the caller
    between those awaits, a host may answer them from what the open and the run's own reads
    delivered; a plain `await_next_settlement` is answered by the group as it stands when it begins.
    """

    async def next(self, handle: GroupHandle) -> Settlement:
        """Serve rank ``handle.consumed + 1`` and advance ``handle``, as `await_next_settlement` does."""
        ...


@runtime_checkable
class RecordsSaves(Protocol):
    """A controller whose groups learn that a caller saved a cursor for a continuation (the Restate
    host's): such a group is parked, never reclaimed as one nobody can resume."""

    def handle_saved(self, handle: GroupHandle) -> None: ...


@runtime_checkable
class EndsInvocations(Protocol):
    """A controller that tells an error ending its invocation from one its host retries (the Restate
    host's): a combinator that meets the first while it consumes closes its group as it ends, as a
    caller's block does; on the second it leaves the group to the retry, which replays it."""

    def ends_invocation(self, error: BaseException) -> bool: ...


@runtime_checkable
class ExplainsMisses(Protocol):
    """A resolver that can say why it routes no executor for an envelope (e.g. a call's target)."""

    def miss_reason(self, envelope: RuntimeEffectEnvelope) -> str | None: ...


def describe_miss(resolver: object, envelope: RuntimeEffectEnvelope) -> str:
    """How a routing refusal names a child: its command, and the resolver's reason where it has one
    (what it raised, when resolving the child raised)."""
    what = describe_command(envelope.command)
    reason = resolver.miss_reason(envelope) if isinstance(resolver, ExplainsMisses) else None
    if reason is None and isinstance(resolver, GroupExecutors):
        reason = resolver_fault(resolver, envelope)
    return what if reason is None else f"{what} ({reason})"


def resolve_or_none(resolver: GroupExecutors, envelope: RuntimeEffectEnvelope) -> GroupExecutor | None:
    """``resolver.resolve(envelope)``, None (a miss) when the resolver raised: a host never lets a
    resolver's own fault out of a group's open (on Restate it would be retried for ever)."""
    try:
        return resolver.resolve(envelope)
    except Exception:  # any fault of the application's resolver; `resolver_fault` names it
        return None


def resolver_fault(resolver: GroupExecutors, envelope: RuntimeEffectEnvelope) -> str | None:
    """What ``resolver`` raised resolving ``envelope``, if it raised."""
    try:
        resolver.resolve(envelope)
    except Exception as exc:  # any fault of the application's resolver
        return f"its resolver raised {exc!r}"
    return None


@runtime_checkable
class Reopens(Protocol):  # decision 41
    """A host that can reopen a recorded group and refuse one that is not: how a resume from a
    saved cursor avoids starting a closed group over. Given the cursor's ``incarnation``, it also
    refuses (`GroupNotOpen`) a group opened under the key since that one was closed."""

    async def reopen_effect_group(
        self, group: RuntimeEffectGroup, *, incarnation: str | None = None
    ) -> GroupHandle: ...


@runtime_checkable
class ServesRuns(Protocol):
    """A host with its own `SettlementRun`; for any other, a run is a series of plain awaits."""

    def settlement_run(self) -> SettlementRun: ...


@dataclass(frozen=True, slots=True)
class _PlainRun:
    controller: RuntimeEffectController

    async def next(self, handle: GroupHandle) -> Settlement:
        return await self.controller.await_next_settlement(handle)


def settlement_run(controller: RuntimeEffectController) -> SettlementRun:  # decision 32
    """The run a combinator reads a group through, begun right after its open."""
    if isinstance(controller, ServesRuns):
        return controller.settlement_run()
    return _PlainRun(controller)


class EffectGroupDefaults:
    """Group methods that fail closed, for controllers that have not implemented groups.

    `supports_effect_groups` answers False and every other group method raises
    `EffectGroupUnsupported`, so a controller written elsewhere that mixes this in fails loudly
    rather than running a group's children some other way.
    """

    def supports_effect_groups(self) -> bool:
        return False

    async def open_effect_group(self, group: RuntimeEffectGroup) -> GroupHandle:
        raise EffectGroupUnsupported(
            f"{type(self).__name__} does not implement effect groups", group_key=str(require_group(group).key)
        )

    async def await_next_settlement(
        self, handle: GroupHandle, cancel: Awaitable[object] | None = None
    ) -> Settlement:
        raise EffectGroupUnsupported(
            f"{type(self).__name__} does not implement effect groups",
            group_key=require_handle(handle).group_key,
        )

    async def close_effect_group(self, handle: GroupHandle, disposition: LoserPolicy | None = None) -> None:
        raise EffectGroupUnsupported(
            f"{type(self).__name__} does not implement effect groups",
            group_key=require_handle(handle).group_key,
        )


def require_group(group: object) -> RuntimeEffectGroup:
    """Hosts call this first: a caller passing anything but a group gets a typed error."""
    if not isinstance(group, RuntimeEffectGroup):
        raise InvalidInput(f"expected a RuntimeEffectGroup, got {type(group).__name__}")
    return group


def require_envelope(envelope: object) -> RuntimeEffectEnvelope:
    if not isinstance(envelope, RuntimeEffectEnvelope):
        raise InvalidEnvelope(f"expected a RuntimeEffectEnvelope, got {type(envelope).__name__}")
    return envelope


def require_ungrouped(envelope: object) -> RuntimeEffectEnvelope:
    """For `execute_effect`: a grouped child on a path with no membership slot is refused, never stripped."""
    checked = require_envelope(envelope)
    membership = checked.membership
    if membership is not None:
        raise MembershipUnsupported(
            "execute_effect has no slot for group membership; open a group instead",
            group_key=membership.group_key,
            position=membership.position,
            replay_key=checked.replay_key,
        )
    return checked


def require_handle(handle: object) -> GroupHandle:
    if not isinstance(handle, GroupHandle):
        raise InvalidHandle(f"expected a GroupHandle, got {type(handle).__name__}")
    return handle


def require_disposition(disposition: object) -> LoserPolicy | None:
    if disposition is None or isinstance(disposition, LoserPolicy):
        return disposition
    try:
        return LoserPolicy(disposition)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(p.value for p in LoserPolicy)
        raise InvalidInput(f"disposition must be one of {allowed}; got {disposition!r}") from None


def require_groups(supported: bool, *, group_key: str) -> None:
    """Refuse with `EffectGroupUnsupported` unless ``supported``: a host does groups only once a
    `GroupExecutors` resolver is registered, so ``supported`` is that deployment fact (what
    `supports_effect_groups()` answers), never a constant."""
    if not supported:
        raise EffectGroupUnsupported("no GroupExecutors resolver is registered", group_key=group_key)


def check_await(handle: GroupHandle, supported: bool, cancel: object = None) -> None:
    """What every await checks before it asks the group anything: a handle, groups, a rank left, and a
    ``cancel`` that can be awaited."""
    require_groups(supported, group_key=require_handle(handle).group_key)
    handle.check_can_advance()  # ADR: exhaustion is the caller's arithmetic, not a host round trip
    if cancel is not None and not inspect.isawaitable(cancel):
        raise InvalidInput(
            f"cancel must be an awaitable (e.g. ctx.sleep(...)), not {a_kind(cancel)}",
            group_key=handle.group_key,
        )


def check_close(handle: GroupHandle, disposition: LoserPolicy | None, supported: bool) -> LoserPolicy | None:
    """What every close checks before it asks the group anything; returns the requested disposition.

    Arguments are checked at run time too (an untyped caller may pass anything). Whether the
    disposition narrows the declared one is the group's to decide: see `effective_disposition`.

    Args:
        handle: the caller's cursor of the group to close.
        disposition: the disposition the close asks for (a `LoserPolicy` or its value), or None.
        supported: what the host's `supports_effect_groups()` answers.

    Returns:
        ``disposition`` as a `LoserPolicy`, or None.

    Raises:
        EffectGroupUnsupported: ``supported`` is false.
        InvalidHandle: ``handle`` is not a `GroupHandle`.
        InvalidInput: ``disposition`` is not a `LoserPolicy` value.
    """
    require_groups(supported, group_key=require_handle(handle).group_key)
    return require_disposition(disposition)


@dataclass(frozen=True)
class Transient:
    """One attempt ended in a fault that is not a `ToolFailure`: retry with a fresh executor."""

    message: str

    def give_up(self, attempts: int) -> Err:
        """The terminal recorded once a host stops retrying."""
        return Err(message=f"gave up after {attempts} attempts: {self.message}", code="retries_exhausted")

    @classmethod
    def of(cls, exc: Exception) -> Transient:
        """The fault ``exc`` (an executor's, or a resolver's on a retry), worded alike on every host."""
        return cls(message=_text(f"{type(exc).__name__}: {exc}"))


async def execute_once(executor: GroupExecutor) -> Outcome | Transient:
    """Run one executor once and map how it ended onto an outcome (or a retryable fault)."""
    try:
        value = await executor.execute()
    except ToolFailure as failure:
        # A rejection's message is stored and served like a value: past the limit it is `too_large`.
        # Its attributes may have been set after it was made: text again, as the record holds it.
        code = failure.code if failure.code is None else _text(str(failure.code))
        metadata = failure.metadata
        carried = {_text(str(k)): _text(str(v)) for k, v in metadata.items()} if metadata else msgspec.UNSET
        return fit_outcome(Err(message=_text(str(failure.message)), code=code, metadata=carried))
    except Exception as exc:
        return Transient.of(exc)
    try:
        encoded = msgspec.json.encode(value)
    # A lone surrogate is a ValueError; a value that holds itself, a RecursionError.
    except (TypeError, ValueError, RecursionError, msgspec.EncodeError) as exc:
        return Err(message=_text(f"tool returned a value that is not JSON: {exc}"), code="bad_value")
    size = ok_size(len(encoded))
    if size > OUTCOME_LIMIT:
        return too_large(size)  # no host could store or serve it: a terminal, never a retry loop
    # The outcome holds the value's JSON form, as a journal gives it back (a tuple is a list, NaN
    # is null), so the reference host serves what the Restate host serves (ADR, "Tier split").
    return Ok(value=msgspec.json.decode(encoded))


def _text(message: str) -> str:
    """``message`` as UTF-8 can carry it: a lone surrogate written as its escape."""
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


async def execute_outcome(executor: GroupExecutor) -> Outcome:
    """`execute_once` for paths that do not retry: a transient fault becomes the terminal."""
    outcome = await execute_once(executor)
    return outcome.give_up(1) if isinstance(outcome, Transient) else outcome
