"""One invocation's groups: its controller, the key each group gets, and the children as envelopes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TypeAlias

import msgspec
import restate

from ..contract import (
    AwaitEvent,
    Call,
    GroupKey,
    InvalidInput,
    RuntimeEffectController,
    RuntimeEffectEnvelope,
    Sleep,
    ToolCall,
    canonical_bytes,
)
from ..engine import (
    RestateController,
)
from ._children import Child

Caller: TypeAlias = restate.Context | RuntimeEffectController


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


def outside_run(owner: RuntimeEffectController, what: str) -> None:
    """Refuse a call made inside a ``ctx.run`` action, before anything is derived, sent or journaled."""
    if isinstance(owner, RestateController):
        owner.outside_run(what)


def grouped(
    ctx: Caller, children: Iterable[Child], key: GroupKey | str | None, what: str
) -> tuple[str, list[RuntimeEffectEnvelope]]:
    """The group key and the children as envelopes, a command's replay key being the group key and
    its position. ``children`` is read once (a generator will do), each checked before anything is
    hashed or sent; ``what`` names the entry point called, for a refusal."""
    # A ctx that is neither a context nor a controller is refused first, by name; then a call from
    # inside a ctx.run action.
    outside_run(controller(ctx), what)
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
