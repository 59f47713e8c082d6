"""The children as an application writes them: a call, a tool, a timer, an event."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, overload

import restate

from ..contract import (
    AwaitEvent,
    Call,
    Child,
    InvalidEnvelope,
    InvalidInput,
    Sleep,
    ToolCall,
)
from ..handlers import HandlerRef, NotJson, handler_ref
from ._terminal import terminal_here

In = TypeVar("In")
Out = TypeVar("Out")
T_co = TypeVar("T_co", covariant=True)

_UNSET: Any = object()  # no argument given (None is a value)

# lash's own files, passed over when naming where an application made a call.
_PACKAGE = str(Path(__file__).parent.parent)  # as imported, the form a frame's file name takes


def _made_at() -> str:
    """Where the application's code made the call being built: its first frame outside lash."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class TypedCall(Child[T_co]):
    """A child calling a Restate handler by reference, built by ``lash.call(handler, arg)``.

    Its argument is written, and its value read, by the handler's own serde (a pydantic model, a
    msgspec Struct or a dataclass travels as its JSON), so the combinators hand back what the handler
    returns (a ``T_co``). The argument is written as the child is made, as a native call writes its
    own: changing the object afterwards changes no child. One the serde cannot write is refused
    when a combinator builds the group, `InvalidInput` naming the child's position, before anything
    is sent.
    """

    __slots__ = ("_arg", "_key", "_made_at", "_options", "_ref", "_rounded", "_written")

    def __init__(
        self, ref: HandlerRef[Any, T_co], arg: Any, key: str | None, options: _Options | None = None
    ) -> None:
        self._ref, self._arg, self._key = ref, arg, key
        self._options = options or _Options()
        self._written: Any | Exception  # the argument's JSON, or what its serde raised, for `command`
        self._made_at: str | None = None  # where, when the serde refused: the refusal comes later
        self._rounded: str | None = None  # a number its serde wrote that a float holds only rounded
        try:
            if ref.takes_input:
                self._written, self._rounded = ref.arg.json_of(arg)
            else:
                self._written = None
        except Exception as exc:  # a serde is the application's code: anything it raises is a refusal
            self._written, self._made_at = exc, _made_at()
        if self._rounded is not None:
            self._made_at = _made_at()

    @property
    def target(self) -> str:
        """``Service/handler``."""
        return self._ref.target

    @property
    def key(self) -> str | None:
        return self._key

    def command(self, position: int, label: str | None = None, *, first: bool = True) -> Call:
        """The `Call` this child is recorded as: its argument as the JSON value its input serde writes.
        ``label`` names the child in a refusal (``child 1`` by default). ``first``: the group's first
        open, not replayed, which refuses an argument lash would round; a reopen, or a replay of
        what an earlier release sent, records it rounded, as that release opened it."""
        ref, where = self._ref, label or f"child {position}"
        try:
            if isinstance(value := self._written, Exception):
                raise value
            if first and self._rounded is not None:
                raise InvalidEnvelope(
                    f"it writes the number {self._rounded}, which lash, recording a call's argument "
                    f"as JSON, would round to {float(self._rounded)!r}: write it as a string"
                )
            return Call(
                service=ref.service, handler=ref.handler, arg=value, key=self._key, **self._options.fields()
            )
        except InvalidEnvelope as refused:
            reason = refused.message
        except NotJson as not_json:
            raise InvalidInput(
                f"{where}: {ref.target} cannot be a lash.call child: its input serde, {not_json}, "
                "writes no JSON, and lash records a call's argument as JSON; give the handler's input "
                "a JSON serde (a pydantic model, a msgspec Struct, or the default)",
                position=position,
            ) from None
        except Exception as exc:  # a serde is the application's code: anything it raises is a refusal
            reason = f"{type(exc).__name__}: {exc}"
        refusal = InvalidInput(
            f"{where}: {ref.target} takes {ref.arg.a_type}, and its input serde cannot write the "
            f"{type(self._arg).__name__} given ({reason})",
            position=position,
        )
        if self._made_at is not None:
            refusal.add_note(f"lash.call made at {self._made_at}")  # the traceback shows the group's build
        raise refusal

    def value(self, recorded: Any) -> T_co:
        """The child's recorded JSON value, read by the handler's output serde."""
        return self._ref.result.from_json(recorded)

    @property
    def result_type(self) -> str:
        """The handler's output type, with its article (``an int``, ``a Quote``), for messages."""
        return self._ref.result.a_type

    def __repr__(self) -> str:
        key = f", key={self._key!r}" if self._key is not None else ""
        options = "".join(f", {name}={value!r}" for name, value in self._options.fields().items())
        # What it sends, as written when it was made; the object given, if its serde could not write it.
        arg = self._arg if isinstance(self._written, Exception) else self._written
        return f"lash.call({self.target}, {arg!r}{key}{options})"


class _Options:
    """What a call passes to its callee's invocation beside its argument, as a native call does."""

    __slots__ = ("headers", "idempotency_key", "limit_key", "scope")

    def __init__(
        self,
        headers: Mapping[str, str] | None = None,
        scope: str | None = None,
        limit_key: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        if headers is not None and not isinstance(headers, Mapping):  # `dict()` of it would raise plainly
            raise InvalidInput(
                f"a call's headers are a mapping of text to text; got {type(headers).__name__}"
            )
        # Empty headers are no headers: the call encodes (and hashes) as one given none.
        self.headers = dict(headers) if headers else None
        self.scope, self.limit_key, self.idempotency_key = scope, limit_key, idempotency_key

    def fields(self) -> dict[str, Any]:
        """The `Call` fields given (the others stay omitted)."""
        given = {
            "headers": self.headers,
            "scope": self.scope,
            "limit_key": self.limit_key,
            "idempotency_key": self.idempotency_key,
        }
        return {name: value for name, value in given.items() if value is not None}


# The context a keyed handler takes: a virtual object's or a workflow's, exclusive or shared. Its
# handler's call must name the key, as `ctx.object_call` / `ctx.workflow_call` take one.
KeyedContext = TypeVar(
    "KeyedContext",
    restate.ObjectContext,
    restate.ObjectSharedContext,
    restate.WorkflowContext,
    restate.WorkflowSharedContext,
)


@overload
def call(
    handler: Callable[[restate.Context, In], Awaitable[Out]],
    arg: In,
    /,
    *,
    key: None = None,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> TypedCall[Out]: ...
@overload
def call(
    handler: Callable[[KeyedContext, In], Awaitable[Out]],
    arg: In,
    /,
    *,
    key: str,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> TypedCall[Out]: ...
@overload
def call(
    handler: Callable[[restate.Context, In], Awaitable[Out]],
    /,
    *,
    arg: In,
    key: None = None,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> TypedCall[Out]: ...
@overload
def call(
    handler: Callable[[KeyedContext, In], Awaitable[Out]],
    /,
    *,
    arg: In,
    key: str,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> TypedCall[Out]: ...
@overload
def call(
    handler: Callable[[restate.Context], Awaitable[Out]],
    arg: None = None,
    /,
    *,
    key: None = None,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> TypedCall[Out]: ...
@overload
def call(
    handler: Callable[[KeyedContext], Awaitable[Out]],
    arg: None = None,
    /,
    *,
    key: str,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> TypedCall[Out]: ...
@overload
def call(
    handler: Callable[[restate.Context], Awaitable[Out]],
    /,
    *,
    arg: None,
    key: None = None,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> TypedCall[Out]: ...
@overload
def call(
    handler: Callable[[KeyedContext], Awaitable[Out]],
    /,
    *,
    arg: None,
    key: str,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> TypedCall[Out]: ...
@overload
def call(
    service: str,
    handler: str,
    arg: Any = None,
    *,
    key: str | None = None,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> Call: ...
def call(
    service: Any,
    handler: Any = _UNSET,
    arg: Any = _UNSET,
    *,
    key: str | None = None,
    headers: Mapping[str, str] | None = None,
    scope: str | None = None,
    limit_key: str | None = None,
    idempotency_key: str | None = None,
) -> Any:
    """A child that invokes a Restate handler; it settles with the handler's output or its terminal
    error.

    ``call(handler, arg)`` takes the handler itself (a function decorated with ``@service.handler()``,
    as ``ctx.service_call`` / ``ctx.object_call`` / ``ctx.workflow_call`` do): ``arg`` goes through
    the handler's input serde and the value comes back through its output serde, typed.
    ``call("Service", "handler", arg)`` names a handler served elsewhere: ``arg`` is a JSON value,
    and so is the value. A handler that takes no input is called ``call(handler)``, or with
    ``None`` as its argument (``arg=None``, as a native call to it is written).

    Args:
        key: the virtual object's or workflow's key: required for their handlers (exclusive or
            shared), refused for a service's, by a type checker (which reads the kind from the
            handler's context annotation: ``restate.Context`` is a service's) and at run time alike.
        headers: headers of the callee's invocation, as a native call's ``headers=``.
        scope: the Restate flow-control scope the callee's invocation runs in, as
            ``ctx.scope(scope)``'s calls do (the server must have flow control enabled; without it
            Restate retries the call until it is).
        limit_key: the concurrency-limit key within ``scope`` (``"tenant1"`` or ``"tenant1/user42"``),
            as a scoped call's ``limit_key=``.
        idempotency_key: the callee's idempotency key, as a native call's ``idempotency_key=``:
            Restate runs the callee once for every call that gives the same key to the same handler
            (and key), within its idempotency retention, and answers each of them its result. Without
            one, a callee the group's pump calls gets a key of lash's own that names the child (one
            of another deployment's services, called through ``LashChild/execute2``, gets none; see
            the operate guide).

    Like the argument, these are part of the child's identity: a replay must give the same ones.

    Raises:
        InvalidInput: the arguments do not make a call (a handler's name missing, an argument given
            twice, or other than ``None`` to a handler that takes none, ``key=`` missing for a
            virtual object's or a workflow's handler, or given for a service's).
        InvalidEnvelope: ``arg`` is not a JSON value (a set, say), a header is not a string,
            ``limit_key`` is malformed or given without ``scope``, or ``idempotency_key`` is empty,
            longer than 512 characters or holds a control character.

    Uncaught in a handler, either ends the invocation with status 400, never a retry.
    """
    with terminal_here():
        return _call(service, handler, arg, key, _Options(headers, scope, limit_key, idempotency_key))


def _call(service: Any, handler: Any, arg: Any, key: str | None, options: _Options) -> Any:
    if isinstance(service, str):
        if not isinstance(handler, str):
            raise InvalidInput(
                f"lash.call({service!r}, ...) needs the handler's name: call(service, handler, arg)"
            )
        value = None if arg is _UNSET else _as_made(arg)
        return Call(service=service, handler=handler, arg=value, key=key, **options.fields())
    ref: HandlerRef[Any, Any] = handler_ref(service)
    if ref.result.raw:
        # Refused before the callee runs: its answer, read as JSON where it settles, would reject
        # the child only once the callee had done its work.
        raise InvalidInput(
            f"{ref.target} cannot be a lash.call child: its output serde, BytesSerde, writes no JSON, "
            "and lash records a child's value as JSON; give the handler's output a JSON serde "
            "(a pydantic model, a msgspec Struct, or the default)"
        )
    if handler is not _UNSET and arg is not _UNSET:
        if ref.keyed and key is None:  # `ctx.object_call(handler, key, arg)`'s order
            raise InvalidInput(
                f"lash.call({ref.target}, ...) takes one argument and the key by name: "
                "lash.call(handler, arg, key=...)"
            )
        raise InvalidInput(f"lash.call({ref.target}, ...) takes one argument, given twice")
    value = arg if handler is _UNSET else handler
    if ref.takes_input and value is _UNSET:
        raise InvalidInput(f"{ref.target} takes an argument: lash.call(handler, arg)")
    # `None` too, as a native call to such a handler is written (`arg=None`): no argument either way.
    if not ref.takes_input and value is not _UNSET and value is not None:
        raise InvalidInput(f"{ref.target} takes no argument: lash.call(handler) or lash.call(handler, None)")
    if ref.keyed and key is None:
        kind = "a virtual object" if ref.kind == "object" else "a workflow"
        raise InvalidInput(f"{ref.target} is {kind}'s handler: the call needs key=")
    if not ref.keyed and key is not None:
        raise InvalidInput(f"{ref.target} is a service's handler: the call must not carry a key")
    # The key and options are checked now, where the application wrote them, not when a combinator
    # builds the call.
    Call(service=ref.service, handler=ref.handler, key=key, **options.fields())
    return TypedCall(ref, None if value is _UNSET else value, key, options)


def tool(name: str, args: Any = None) -> ToolCall:
    """A child that runs the tool ``name`` (registered in the endpoint's `ToolRegistry`) with ``args``.

    Uncaught in a handler, its refusal (`InvalidEnvelope`: ``args`` is not a JSON value) ends the
    invocation with status 400, never a retry."""
    with terminal_here():
        return ToolCall(tool=name, args=_as_made(args))


def _as_made(value: Any) -> Any:
    """``value`` with its lists and objects copied, so a child keeps the argument it was made with
    (as a native call writes its own as it is made): changing the caller's value afterwards changes
    no child. A value nested past what can be copied, or holding itself, is kept as it is, for the
    child's own check to refuse."""
    try:
        return _copied(value)
    except RecursionError:
        return value


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return list(map(_copied, value))
    if isinstance(value, tuple):  # a named tuple too: JSON keeps only its items
        return tuple(map(_copied, value))
    return value


def sleep(duration: timedelta) -> Sleep:
    """A child that is a durable timer: it fulfils with ``None`` after ``duration``.

    Uncaught in a handler, its refusal (`InvalidInput`: ``duration`` is not a ``timedelta``) ends the
    invocation with status 400, never a retry."""
    with terminal_here():
        if not isinstance(duration, timedelta):
            raise InvalidInput(
                f"lash.sleep takes a timedelta (lash.sleep(timedelta(seconds=5))), "
                f"not the {type(duration).__name__} {duration!r}"
            )
        return Sleep(duration_ms=int(duration / timedelta(milliseconds=1)))


def event(name: str) -> AwaitEvent:
    """A child that waits for the durable event ``name`` and fulfils with its payload.

    Uncaught in a handler, its refusal (`InvalidEnvelope`: ``name`` is not a valid event name) ends
    the invocation with status 400, never a retry."""
    with terminal_here():
        return AwaitEvent(name=name)
