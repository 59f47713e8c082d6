"""The front door: what a Restate application needs, from ``import lash_restate as lash``.

Inside a handler, ``await lash.race(ctx, [lash.call("Payments", "charge", order), lash.sleep(...)])``
opens a durable group of those children under a key derived the ADR's way, consumes it and closes
it. The key is ``{invocation id}:group:{content hash}:{occurrence}`` (decision 38): the scope is the
invocation, the batch is a hash of the children, and the occurrence counts the groups with the same
children this invocation has opened before, in the order the handler runs (replay-stable).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from functools import wraps
from typing import Any, ParamSpec, TypeAlias, TypeVar

import msgspec
import restate

from . import combinators
from .calls import Target
from .combinators import AggregateRejection, Rejected
from .contract import (
    AwaitEvent,
    Call,
    Command,
    GroupHandle,
    GroupKey,
    GroupWakePolicy,
    InvalidInput,
    LashError,
    LoserPolicy,
    Outcome,
    Reopens,
    RuntimeEffectController,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    Settlement,
    Sleep,
    ToolCall,
    canonical_bytes,
)
from .engine import (
    BATCH_FROM,
    DEFAULT_PREFIX,
    RestateController,
    build_app,
    call_targets,
    lash_services,
    use_groups_served_elsewhere,
)
from .engine import serve as _serve
from .tools import ToolRegistry

__all__ = [
    "Child",
    "Group",
    "all",
    "all_settled",
    "any",
    "app",
    "call",
    "controller",
    "event",
    "external",
    "open",
    "race",
    "serve",
    "services",
    "sleep",
    "tool",
    "use_prefix",
]

Child: TypeAlias = Command | RuntimeEffectEnvelope
"""A child as an application writes it: a command (its replay key follows from the group key and
its position) or a whole envelope with a replay key of its own."""

Bindable: TypeAlias = restate.Service | restate.VirtualObject | restate.Workflow
Caller: TypeAlias = restate.Context | RuntimeEffectController


# -- children --------------------------------------------------------------------------------------


def call(service: str, handler: str, arg: Any = None, *, key: str | None = None) -> Call:
    """A child that invokes the Restate handler ``service/handler`` with JSON ``arg`` (``key`` for a
    virtual object or workflow); it settles with the handler's output or its terminal error."""
    return Call(service=service, handler=handler, arg=arg, key=key)


def tool(name: str, args: Any = None) -> ToolCall:
    """A child that runs the tool ``name`` (registered in the endpoint's `ToolRegistry`) with ``args``."""
    return ToolCall(tool=name, args=args)


def sleep(duration: timedelta) -> Sleep:
    """A child that is a durable timer: it fulfils with ``None`` after ``duration``."""
    return Sleep(duration_ms=int(duration / timedelta(milliseconds=1)))


def event(name: str) -> AwaitEvent:
    """A child that waits for the durable event ``name`` and fulfils with its payload."""
    return AwaitEvent(name=name)


# -- keys ------------------------------------------------------------------------------------------


class _Invocation:
    """What one invocation keeps between its groups: its controller and its occurrence counts."""

    __slots__ = ("controller", "opened")

    def __init__(self, ctx: restate.Context) -> None:
        self.controller = RestateController(ctx)
        self.opened: dict[str, int] = {}


_ENCODER = msgspec.json.Encoder(order="sorted")
_STATE = "_lash_invocation"  # the attribute of a context that holds its `_Invocation`


def _invocation(ctx: restate.Context) -> _Invocation:
    # Kept on the context itself: it lives exactly as long as the invocation's attempt (a retried
    # attempt gets a fresh context and counts again from zero, in the same handler order: decision
    # 38), and nothing outside the attempt keeps it alive.
    found: _Invocation | None = getattr(ctx, _STATE, None)
    if found is None:
        found = _Invocation(ctx)
        setattr(ctx, _STATE, found)
    return found


def use_prefix(prefix: str = DEFAULT_PREFIX) -> None:
    """In a process that only calls lash: another deployment of this Restate cluster serves lash's
    services, named ``{prefix}Group``, ``{prefix}Child``, … (``Lash…`` by default). Without this (or
    `app` / `services` in the same process) a handler here cannot open groups: its controller answers
    `supports_effect_groups()` false and refuses them with `EffectGroupUnsupported`."""
    use_groups_served_elsewhere(prefix)


def controller(ctx: Caller) -> RuntimeEffectController:
    """The controller for ``ctx``'s invocation (one per invocation), or ``ctx`` if it is a controller."""
    if isinstance(ctx, restate.Context):
        return _invocation(ctx).controller
    if not callable(getattr(ctx, "open_effect_group", None)):
        # Checked here, before any key is derived: a wrong ctx is the caller's mistake to name.
        raise InvalidInput(
            f"ctx is a {type(ctx).__name__}: pass the handler's restate.Context (lash's groups run "
            "inside a Restate handler), or a RuntimeEffectController such as a MemoryHost"
        )
    return ctx


def _batch(children: Sequence[Child]) -> str:
    """A content hash of the children: the batch id of the key they are grouped under."""
    digest = hashlib.sha256()
    for child in children:
        if isinstance(child, RuntimeEffectEnvelope):
            digest.update(canonical_bytes(child))
        else:
            digest.update(_ENCODER.encode(child))
        digest.update(b"\n")
    return digest.hexdigest()[:24]


def _key(ctx: Caller, children: Sequence[Child], key: GroupKey | str | None) -> str:
    if key is not None:
        return str(key if isinstance(key, GroupKey) else GroupKey.parse(key))
    if not isinstance(ctx, restate.Context):
        raise InvalidInput("a group opened through a controller needs an explicit key=")
    batch = _batch(children)
    opened = _invocation(ctx).opened
    occurrence = opened.get(batch, 0)
    opened[batch] = occurrence + 1
    return str(GroupKey(scope_id=ctx.request().id, batch_id=batch, occurrence=occurrence))


def _outside_run(owner: RuntimeEffectController, what: str) -> None:
    """Refuse a call made inside a ``ctx.run`` action, before anything is derived, sent or journaled."""
    if isinstance(owner, RestateController):
        owner.outside_run(what)


def _grouped(
    ctx: Caller, children: Iterable[Child], key: GroupKey | str | None, what: str
) -> tuple[str, list[RuntimeEffectEnvelope]]:
    """The group key and the children as envelopes, a command's replay key being the group key and
    its position. ``children`` is read once (a generator will do), each checked before anything is
    hashed or sent; ``what`` names the entry point called, for a refusal."""
    # A ctx that is neither a context nor a controller is refused first, by name; then a call from
    # inside a ctx.run action.
    _outside_run(controller(ctx), what)
    listed = list(children)
    for position, child in enumerate(listed):
        if not isinstance(child, RuntimeEffectEnvelope | ToolCall | Sleep | AwaitEvent | Call):
            raise InvalidInput(
                f"child {position} is a {type(child).__name__}: "
                "pass lash.call/tool/sleep/event or an envelope"
            )
    group_key = _key(ctx, listed, key)
    envelopes = [
        child
        if isinstance(child, RuntimeEffectEnvelope)
        else RuntimeEffectEnvelope(command=child, replay_key=f"{group_key}/{position}")
        for position, child in enumerate(listed)
    ]
    return group_key, envelopes


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _terminal(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """A rejection or contract error left uncaught in a handler ends the invocation, not a retry.

    Restate retries any exception but a `TerminalError` (or one caused by it); these are facts of
    the journal that a retry would only meet again, so each is chained to one (ADR: typed errors).
    """

    @wraps(fn)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await fn(*args, **kwargs)
        except (LashError, Rejected, AggregateRejection) as error:
            if not isinstance(error.__cause__, restate.TerminalError):
                error.__cause__ = restate.TerminalError(str(error), 500)
            raise

    return wrapper


# -- combinators -----------------------------------------------------------------------------------


@_terminal
async def all(ctx: Caller, children: Iterable[Child], *, key: GroupKey | str | None = None) -> list[Any]:
    """`Promise.all`: every value in input order, or `Rejected` at the first consumed rejection."""
    group_key, envelopes = _grouped(ctx, children, key, "lash.all")
    return await combinators.all_(controller(ctx), group_key, envelopes)


@_terminal
async def all_settled(
    ctx: Caller, children: Iterable[Child], *, key: GroupKey | str | None = None
) -> list[Outcome]:
    """`Promise.allSettled`: every outcome (`Ok`, `Err` or `Cancelled`) in input order."""
    group_key, envelopes = _grouped(ctx, children, key, "lash.all_settled")
    return await combinators.all_settled(controller(ctx), group_key, envelopes)


@_terminal
async def race(
    ctx: Caller,
    children: Iterable[Child],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    key: GroupKey | str | None = None,
) -> Any:
    """`Promise.race`: the first settlement's value, or `Rejected` if it rejected. ``losers=CANCEL``
    cancels the children still running once it is decided."""
    group_key, envelopes = _grouped(ctx, children, key, "lash.race")
    return await combinators.race(controller(ctx), group_key, envelopes, losers=losers)


@_terminal
async def any(
    ctx: Caller,
    children: Iterable[Child],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    key: GroupKey | str | None = None,
) -> Any:
    """`Promise.any`: the first success, or `AggregateRejection` (an exception group of every
    child's rejection, in input order)."""
    group_key, envelopes = _grouped(ctx, children, key, "lash.any")
    return await combinators.any_(controller(ctx), group_key, envelopes, losers=losers)


# -- a group by hand: open, consume, save, resume, close ------------------------------------------


class Group:
    """An open group and its cursor; `save` gives what a fresh invocation resumes from."""

    def __init__(self, controller: RuntimeEffectController, handle: GroupHandle) -> None:
        self._controller = controller
        self._handle = handle

    @property
    def key(self) -> str:
        return self._handle.group_key

    @property
    def consumed(self) -> int:
        return self._handle.consumed

    def __len__(self) -> int:
        return self._handle.child_count

    @_terminal
    async def next(self, cancel: Awaitable[object] | None = None) -> Settlement:
        """The next settlement in rank order (ADR: the cursor advances by exactly this one)."""
        _outside_run(self._controller, "Group.next")
        return await self._controller.await_next_settlement(self._handle, cancel)

    def save(self) -> str:
        """The cursor as text: keep it, and `open(..., resume=...)` in a fresh invocation.

        On Restate the group also learns that a continuation holds it, so once this invocation returns
        normally an operator sees the group as parked, not orphaned (`lash-restate groups list`).
        """
        if isinstance(self._controller, RestateController):
            self._controller.outside_run("Group.save")
            self._controller.handle_saved(self._handle)
        return self._handle.to_bytes().decode()

    @_terminal
    async def close(self, losers: LoserPolicy | None = None) -> None:
        """Close the group; ``losers`` may narrow the declared disposition to `CANCEL`."""
        _outside_run(self._controller, "Group.close")
        await self._controller.close_effect_group(self._handle, losers)


@_terminal
async def open(
    ctx: Caller,
    children: Iterable[Child],
    *,
    wake: GroupWakePolicy = GroupWakePolicy.ALL,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    key: GroupKey | str | None = None,
    resume: str | None = None,
) -> Group:
    """Open a group of ``children`` (or, with ``resume``, reopen the saved one and restore its cursor)."""
    _outside_run(controller(ctx), "lash.open")
    saved = GroupHandle.from_bytes(resume) if resume is not None else None
    group_key, envelopes = _grouped(ctx, children, saved.group_key if saved is not None else key, "lash.open")
    group = RuntimeEffectGroup(group_key, envelopes, wake=wake, disposition=losers)
    owner = controller(ctx)
    if saved is None:
        return Group(owner, await owner.open_effect_group(group))
    if not isinstance(owner, Reopens):
        raise InvalidInput(  # decision 41
            f"{type(owner).__name__} cannot reopen a saved group: it has no reopen_effect_group, and a "
            "resume must never start a closed group over"
        )
    await owner.reopen_effect_group(group)  # a closed group is refused, never started over
    return Group(owner, saved)


# -- the endpoint ----------------------------------------------------------------------------------


def external(service: str, *handlers: str, keyed: bool = False) -> Target:
    """Declare a service another endpoint of the cluster serves, so children may call it; without
    ``handlers``, any handler of it."""
    return Target(service, frozenset(handlers) if handlers else None, keyed)


def services(
    *yours: Bindable,
    tools: ToolRegistry | None = None,
    external: Sequence[Target] = (),
    batch_from: int = BATCH_FROM,
    prefix: str = DEFAULT_PREFIX,
    name: str | None = None,
) -> list[Bindable]:
    """lash's services, to bind next to ``yours`` in your own ``restate.app([...])``: children may call
    the handlers of ``yours`` and of the ``external`` services, and run the ``tools``. They are
    named ``{prefix}Group``, ``{prefix}Child``, …, so two applications on one cluster can each have
    their own (decision 40); ``name`` names your application on them (see `app`)."""
    calls = call_targets(yours, external)
    resolver = tools if tools is not None else ToolRegistry()
    return lash_services(resolver, calls=calls, batch_from=batch_from, prefix=prefix, name=name)


def app(
    *yours: Bindable,
    tools: ToolRegistry | None = None,
    external: Sequence[Target] = (),
    identity_keys: Sequence[str] = (),
    prefix: str = DEFAULT_PREFIX,
    name: str | None = None,
) -> Any:
    """The ASGI app serving ``yours`` and lash's services (named with ``prefix``), checked once
    assembled.

    Registering it where another application's lash services already have the same names is
    refused by `lash-restate register`. Two deployments are taken for the same application (an
    upgrade) when both carry the same ``name``, or, when either has none, when they serve a service
    of their own in common, or the same services; give ``name`` to keep one identity across an
    upgrade that renames every service."""
    return build_app(
        tools if tools is not None else ToolRegistry(),
        extra_services=yours,
        external=external,
        identity_keys=identity_keys,
        prefix=prefix,
        name=name,
    )


async def serve(asgi: Any, host: str = "0.0.0.0", port: int = 9080, *, server: str = "hypercorn") -> None:
    """Serve an app (from `app`) over HTTP/2 cleartext until SIGTERM or SIGINT, under hypercorn or
    (with the ``granian`` extra) granian, in this process either way (decision 33)."""
    await _serve(asgi, host, port, server=server)
