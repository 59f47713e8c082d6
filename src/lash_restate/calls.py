"""Restate handlers as children (`Call`): which handlers a child may call, a Restate handler
reference seen as JSON values, and an in-process registry of handlers that runs them on the
reference host.

A `Call` child is routable when its target is known: its service binds the handler, and the call
carries a key exactly when the service is keyed (a virtual object or a workflow). What is known is
a deployment fact, so a miss refuses a first open (ADR, "resolve all N before recording") and is
never turned into an outcome.

A `Call` carries a JSON value (its ``arg``, its outcome's ``value``), whatever the handler takes and
returns; `HandlerRef` is the one place a handler's own serde turns a model into that JSON value and
back, for the caller (the front door) and for an in-process twin alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeAlias, TypeVar, cast

import msgspec
import restate
from restate.handler import handler_from_callable
from restate.serde import DefaultSerde, Serde

from .contract import (
    Call,
    ExplainsMisses,
    GroupExecutor,
    GroupExecutors,
    InvalidInput,
    RuntimeEffectEnvelope,
    ToolFailure,
)

__all__ = [
    "CallRegistry",
    "CallTargets",
    "Handler",
    "HandlerRef",
    "JsonCodec",
    "Target",
    "TypedHandler",
    "first_of",
    "handler_ref",
]

In = TypeVar("In")
Out = TypeVar("Out")
T = TypeVar("T")

Handler = Callable[[str | None, Any], Awaitable[Any]]
"""``async def handler(key, arg) -> JSON``; raise ``restate.TerminalError(message, status)``, as a
Restate handler does, to end the call in a terminal error: the child settles ``Err(message, code)``
with the status as its code, as on Restate (``"500"``, TerminalError's default, when none is given).
A `ToolFailure` works too; its code is kept, ``"500"`` if it has none."""

# TerminalError's default status: what Restate reports for a handler's terminal error given none.
DEFAULT_STATUS = "500"


TypedHandler: TypeAlias = Callable[[str | None, In], Awaitable[Out]]
"""``async def twin(key, arg: In) -> Out``: an in-process twin of a Restate handler (`CallRegistry.typed`)."""


def _untyped(serde: Serde[Any]) -> bool:
    """The SDK's `DefaultSerde` with no type: what a handler gets unless it takes or returns a pydantic
    model or a msgspec Struct, or names a serde of its own."""
    return isinstance(serde, DefaultSerde) and serde.type_hint is None


# Decision 51: the front door converts at both ends, so the recorded `Call` (and its hash) is unchanged.
class JsonCodec(Generic[T]):
    """One side of a Restate handler (its input or its output) as JSON values, through the serde the SDK
    chose for it: a pydantic model's or a msgspec Struct's own JSON, or the handler's named serde.

    Where the SDK left the untyped `DefaultSerde` (it picks a serde for pydantic models and msgspec
    Structs only), a dataclass is written and read with msgspec (the JSON object
    `dataclasses.asdict` gives), and any other model by its own type, as the SDK's ``ctx.set`` does.
    """

    __slots__ = ("_annotation", "_serde")

    def __init__(self, serde: Serde[T], annotation: Any) -> None:
        self._serde = serde
        self._annotation = annotation

    @property
    def type_name(self) -> str:
        """The annotated type's name, for messages (``Any`` when the handler names none)."""
        return getattr(self._annotation, "__name__", None) or repr(self._annotation or Any)

    def to_json(self, value: T) -> Any:
        """``value`` as the JSON value its serde writes; raises what the serde raises, or
        `msgspec.DecodeError` if the serde does not write JSON."""
        serde: Serde[Any] = self._serde
        if _untyped(serde):
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                return msgspec.to_builtins(value)
            serde = cast(DefaultSerde[Any], serde).with_maybe_type(type(value))
        raw = serde.serialize(value)
        return msgspec.json.decode(raw) if raw else None

    def from_json(self, value: Any) -> T:
        """The JSON ``value`` read by the serde (``None``: what an empty body reads as)."""
        annotation = self._annotation
        if _untyped(self._serde) and dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
            return cast(T, msgspec.convert(value, annotation))
        return cast(T, self._serde.deserialize(b"" if value is None else msgspec.json.encode(value)))


@dataclass(frozen=True, slots=True)
class HandlerRef(Generic[In, Out]):
    """What a decorated Restate handler says about itself, as ``ctx.service_call`` reads it: its
    service, its name, whether it is keyed (a virtual object's or a workflow's), and its two serdes."""

    service: str
    handler: str
    kind: Literal["service", "object", "workflow"]
    takes_input: bool
    arg: JsonCodec[In]
    result: JsonCodec[Out]

    @property
    def keyed(self) -> bool:
        return self.kind != "service"

    @property
    def target(self) -> str:
        return f"{self.service}/{self.handler}"


def handler_ref(
    fn: Callable[[Any, In], Awaitable[Out]] | Callable[[Any], Awaitable[Out]],
) -> HandlerRef[In, Out]:
    """The `HandlerRef` of a function decorated by ``@service.handler()`` (or an object's or a
    workflow's); `InvalidInput` for anything else."""
    try:
        found = handler_from_callable(fn)
    except (ValueError, TypeError):
        raise InvalidInput(
            f"{fn!r} is not a Restate handler: pass a function decorated with @service.handler() (or an "
            "object's or a workflow's), or lash.call('Service', 'handler', arg) for one served elsewhere"
        ) from None
    io = found.handler_io
    return HandlerRef(
        service=found.service_tag.name,
        handler=found.name,
        kind=found.service_tag.kind,
        takes_input=found.arity == 2,
        arg=JsonCodec(io.input_serde, io.input_type.annotation if io.input_type else None),
        result=JsonCodec(io.output_serde, io.output_type.annotation if io.output_type else None),
    )


@dataclass(frozen=True, slots=True)
class Target:
    """A service a child may call: its name, its handlers (None: any) and whether it is keyed."""

    service: str
    handlers: frozenset[str] | None = None
    keyed: bool = False


class CallTargets:
    """The handlers children may call, by service."""

    def __init__(self, targets: Iterable[Target] = (), *, external: Iterable[Target] = ()) -> None:
        self._by_service: dict[str, Target] = {}
        self._external: set[str] = set()
        for target in targets:
            self.add(target)
        for target in external:
            self.add(target, external=True)

    def add(self, target: Target, *, external: bool = False) -> None:
        """Add a target; ``external``: declared, served by another deployment (not bound here)."""
        known = self._by_service.get(target.service)
        if known is not None and known != target:
            raise ValueError(f"service {target.service!r} is declared twice, differently")
        self._by_service[target.service] = target
        if external and known is None:
            self._external.add(target.service)
        elif not external:
            self._external.discard(target.service)  # bound here after all

    def is_external(self, service: str) -> bool:
        """Whether ``service`` is only declared (served elsewhere, if anywhere), not bound here."""
        return service in self._external

    @property
    def services(self) -> list[str]:
        return sorted(self._by_service)

    def miss(self, call: Call) -> str | None:
        """Why ``call`` cannot be routed here, or None when it can."""
        target = self._by_service.get(call.service)
        if target is None:
            return f"service {call.service!r} is not bound here and not declared"
        if target.handlers is not None and call.handler not in target.handlers:
            return f"service {call.service!r} has no handler {call.handler!r}"
        if target.keyed and call.key is None:
            return f"service {call.service!r} is keyed: the call needs a key"
        if not target.keyed and call.key is not None:
            return f"service {call.service!r} is not keyed: the call must not carry a key"
        return None


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
            # Err.code of a call child is the status the SDK reports, on every tier (decision 53).
            raise ToolFailure(error.message, str(error.status_code)) from None
        except ToolFailure as failure:
            if failure.code is None:
                raise ToolFailure(failure.message, DEFAULT_STATUS) from None
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
                return target.result.to_json(await fn(key, value))

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
