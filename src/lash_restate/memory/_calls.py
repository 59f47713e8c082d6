"""The reference host's calls: in-process handlers a `Call` child reaches, and one resolver over
several (tools and calls)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import msgspec
import restate

from ..calls import CallTargets, Target
from ..contract import (
    Call,
    ExplainsMisses,
    GroupExecutor,
    GroupExecutors,
    RuntimeEffectEnvelope,
    ToolFailure,
)
from ..handlers import NotJson, handler_ref

__all__ = ["CallRegistry", "Handler", "TypedHandler", "first_of"]

In = TypeVar("In")
Out = TypeVar("Out")

Handler = Callable[[str | None, Any], Awaitable[Any]]
"""``async def handler(key, arg) -> JSON``; raise ``restate.TerminalError(message, status)``, as a
Restate handler does, to end the call in a terminal error: the child settles ``Err(message, code)``
with the status as its code, as on Restate (``"500"``, TerminalError's default, when none is given).
A `ToolFailure` works too; its code is kept, ``"500"`` if it has none. Any other exception is a
fault a retry may mend: this host runs the call again a few times and then settles the child
``Err(code="retries_exhausted")``, where Restate retries the callee, an invocation of its own, for
ever and the child waits. A test of a failure no retry mends raises `restate.TerminalError`, as the
Restate handler it stands in for must."""

# TerminalError's default status: what Restate reports for a handler's terminal error given none.
DEFAULT_STATUS = "500"

TypedHandler: TypeAlias = Callable[[str | None, In], Awaitable[Out]]
"""``async def twin(key, arg: In) -> Out``: an in-process twin of a Restate handler (`CallRegistry.typed`)."""


class _CallExecutor:
    """Runs one call once (ADR: `execute` consumes the executor)."""

    __slots__ = ("_arg", "_fn", "_key", "_spent")

    def __init__(self, fn: Handler, key: str | None, arg: Any) -> None:
        self._fn, self._key, self._arg = fn, key, arg
        self._spent = False

    async def execute(self) -> Any:
        if self._spent:
            raise RuntimeError("an executor runs once; resolve a fresh one to retry")
        self._spent = True
        try:
            return await self._fn(self._key, self._arg)
        except restate.TerminalError as error:
            # Err.code of a call child is the status the SDK reports, on every host (decision 53).
            raise ToolFailure(error.message, str(error.status_code), metadata=error.metadata) from None
        except ToolFailure as failure:
            if failure.code is None:
                raise ToolFailure(failure.message, DEFAULT_STATUS, metadata=failure.metadata) from None
            raise


class CallRegistry:
    """In-process handlers a `Call` child reaches on the reference host; a `GroupExecutors` for calls.

    ``@registry.handler("Cart", "add", keyed=True)`` registers ``async def add(key, arg)``.
    """

    def __init__(self) -> None:
        self._handlers: dict[tuple[str, str], Handler] = {}
        self._keyed: dict[str, bool] = {}
        self._targets: CallTargets | None = None  # built once per change, read by every resolve

    def register(self, service: str, name: str, fn: Handler, *, keyed: bool = False) -> None:
        if self._keyed.setdefault(service, keyed) != keyed:
            raise ValueError(f"service {service!r} is registered both keyed and not")
        self._handlers[(service, name)] = fn
        self._targets = None

    def handler(self, service: str, name: str, *, keyed: bool = False) -> Callable[[Handler], Handler]:
        def decorate(fn: Handler) -> Handler:
            self.register(service, name, fn, keyed=keyed)
            return fn

        return decorate

    def typed(
        self, ref: Callable[[Any, In], Awaitable[Out]] | Callable[[Any], Awaitable[Out]]
    ) -> Callable[[TypedHandler[In, Out]], TypedHandler[In, Out]]:
        """``@registry.typed(quote)`` registers ``async def twin(key, req: QuoteRequest) -> Quote`` as the
        in-process twin of the Restate handler ``quote``, under its service and name: the argument
        arrives read by ``quote``'s input serde and the result leaves written by its output serde, as
        the SDK does on Restate. An argument the input serde cannot read ends the call in a terminal
        error, the SDK's own (``Unable to parse an input argument``, code 500)."""
        target = handler_ref(ref)

        def decorate(fn: TypedHandler[In, Out]) -> TypedHandler[In, Out]:
            async def run(key: str | None, arg: Any) -> Any:
                try:
                    value = target.arg.from_json(arg)
                except Exception as exc:
                    raise ToolFailure(f"Unable to parse an input argument. {exc}", code="500") from None
                result = await fn(key, value)
                try:
                    return target.result.to_json(result)
                except (msgspec.DecodeError, NotJson):
                    # As Restate's child reads such an answer (a NaN a JSON serde writes): terminal.
                    size = len(target.result.written(result))
                    raise ToolFailure(
                        f"{target.target} answered {size} bytes that are not JSON", "not_json"
                    ) from None

            self.register(target.service, target.handler, run, keyed=target.keyed)
            return fn

        return decorate

    @property
    def targets(self) -> CallTargets:
        if self._targets is None:
            handlers: dict[str, set[str]] = {}
            for service, name in self._handlers:
                handlers.setdefault(service, set()).add(name)
            self._targets = CallTargets(
                Target(service, frozenset(names), self._keyed[service]) for service, names in handlers.items()
            )
        return self._targets

    def miss_reason(self, envelope: RuntimeEffectEnvelope) -> str | None:
        command = envelope.command
        return self.targets.miss(command) if isinstance(command, Call) else None

    def resolve(self, envelope: RuntimeEffectEnvelope) -> GroupExecutor | None:
        command = envelope.command
        if not isinstance(command, Call) or self.targets.miss(command) is not None:
            return None
        return _CallExecutor(self._handlers[(command.service, command.handler)], command.key, command.arg)


@dataclass(frozen=True, slots=True)
class _FirstOf:
    resolvers: tuple[GroupExecutors, ...]

    def resolve(self, envelope: RuntimeEffectEnvelope) -> GroupExecutor | None:
        for resolver in self.resolvers:
            executor = resolver.resolve(envelope)
            if executor is not None:
                return executor
        return None

    def miss_reason(self, envelope: RuntimeEffectEnvelope) -> str | None:
        reasons = (r.miss_reason(envelope) for r in self.resolvers if isinstance(r, ExplainsMisses))
        return next((reason for reason in reasons if reason is not None), None)


def first_of(*resolvers: GroupExecutors) -> GroupExecutors:
    """One resolver over several (e.g. tools and calls): the first that routes an envelope runs it."""
    return _FirstOf(resolvers)
