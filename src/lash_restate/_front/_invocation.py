"""One invocation's groups: its controller, the key each group gets, and the children as envelopes."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeAlias

import msgspec
import restate

from ..contract import (
    MAX_KEY_LENGTH,
    AwaitEvent,
    Call,
    Child,
    Command,
    GroupKey,
    InvalidGroupKey,
    InvalidInput,
    Ok,
    Outcome,
    RuntimeEffectController,
    RuntimeEffectEnvelope,
    Settlement,
    Sleep,
    ToolCall,
    UndecodableResult,
    canonical_bytes,
)
from ..contract._errors import a_kind
from ..engine import RestateController
from ._children import TypedCall

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


def a_type(value: object) -> str:
    """``value``'s type as a message names it: ``a str``, ``an object``."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def controller(ctx: Caller) -> RuntimeEffectController:
    """The controller for ``ctx``'s invocation (one per invocation), or ``ctx`` if it is a controller."""
    if isinstance(ctx, restate.Context):
        return _invocation(ctx).controller
    if not callable(getattr(ctx, "open_effect_group", None)):
        # Checked here, before any key is derived: a wrong ctx is the caller's mistake to name.
        raise InvalidInput(
            f"ctx is {a_type(ctx)}: pass the handler's restate.Context (lash's groups run "
            "inside a Restate handler), or a RuntimeEffectController such as a MemoryHost"
        )
    return ctx


def _batch(children: Sequence[RuntimeEffectEnvelope | Command]) -> str:
    """A content hash of the children: the batch id of the key they are grouped under."""
    digest = hashlib.sha256()
    for child in children:
        if isinstance(child, RuntimeEffectEnvelope):
            digest.update(canonical_bytes(child))
        else:
            digest.update(_ENCODER.encode(child))
        digest.update(b"\n")
    return digest.hexdigest()[:24]


def _key(ctx: Caller, children: Sequence[RuntimeEffectEnvelope | Command], key: GroupKey | str | None) -> str:
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


class Values:
    """How the front door hands back each child's value: a typed call's read by its handler's output
    serde, any other child's as recorded (a JSON value)."""

    __slots__ = ("_group_key", "_replay_keys", "_typed")

    def __init__(
        self, group_key: str, envelopes: Sequence[RuntimeEffectEnvelope], typed: dict[int, TypedCall[Any]]
    ):
        self._group_key = group_key
        self._replay_keys = [e.replay_key for e in envelopes]
        self._typed = typed

    def value(self, position: int, recorded: Any) -> Any:
        """The value of the child at ``position``; `UndecodableResult` if its handler's serde cannot
        read it."""
        child = self._typed.get(position)
        if child is None:
            return recorded
        try:
            return child.value(recorded)
        except Exception as exc:  # a serde is the application's code: anything it raises is a refusal
            raise UndecodableResult(
                f"{child.target} settled with a value its output serde cannot read as {child.result_type} "
                f"({type(exc).__name__}: {exc})",
                group_key=self._group_key,
                position=position,
                replay_key=self._replay_keys[position],
            ) from None

    def outcome(self, position: int, outcome: Outcome) -> Outcome:
        """``outcome`` with a typed call's fulfilled value read (a rejection is the same either way)."""
        if position not in self._typed or not isinstance(outcome, Ok):
            return outcome
        return Ok(value=self.value(position, outcome.value))

    def settlement(self, settlement: Settlement) -> Settlement:
        outcome = self.outcome(settlement.position, settlement.outcome)
        if outcome is settlement.outcome:
            return settlement
        return msgspec.structs.replace(settlement, outcome=outcome)


def iterated(children: Iterable[Any], what: str) -> Iterator[Any]:
    """An iterator over ``children``; anything that cannot be iterated is refused by name (a plain
    `TypeError` would be retried by Restate for ever)."""
    try:
        if inspect.isawaitable(children):
            raise TypeError  # an asyncio future iterates (its __iter__ is its __await__): not children
        return iter(children)  # typed an iterable, and given anything at run time
    except TypeError:
        raise InvalidInput(
            f"{what} takes lash children (lash.call, lash.tool, lash.sleep, lash.event), one by one or "
            f"as one iterable, not {a_kind(children)} (a native call is written "
            "lash.call(handler, arg))"
        ) from None


def typed_grouped(
    ctx: Caller,
    children: Iterable[Child],
    key: GroupKey | str | None,
    what: str,
    names: Sequence[str] | None = None,
    *,
    opens: bool = True,
) -> tuple[str, list[RuntimeEffectEnvelope], Values]:
    """The group key, the children as envelopes, a command's replay key being the group key and its
    position, and how their values are handed back. ``children`` is read once (a generator will do),
    each checked, and a typed call's argument written, before anything is hashed or sent; ``what``
    names the entry point called and ``names`` the children (``select``'s), for a refusal.
    ``opens``: a first open, not a resume of a saved group."""
    # A ctx that is neither a context nor a controller is refused first, by name; then a call from
    # inside a ctx.run action.
    owner = controller(ctx)
    outside_run(owner, what)
    # A typed call's argument that lash would round is refused as a group is first opened; a resume,
    # or a replay of an open an earlier release sent, keeps what that release recorded.
    first = opens and not (isinstance(owner, RestateController) and owner.replaying())
    listed: list[RuntimeEffectEnvelope | Command] = []
    typed: dict[int, TypedCall[Any]] = {}
    for position, child in enumerate(iterated(children, what)):
        label = f"child {names[position]!r}" if names is not None else f"child {position}"
        if isinstance(child, TypedCall):
            typed[position] = child
            listed.append(child.command(position, label, first=first))
        elif isinstance(child, RuntimeEffectEnvelope | ToolCall | Sleep | AwaitEvent | Call):
            listed.append(child)
        else:
            raise InvalidInput(
                f"{label} is {a_type(child)}: pass lash.call/tool/sleep/event or an envelope",
                position=position,
            )
    group_key = _key(ctx, listed, key)
    derived = [p for p, child in enumerate(listed) if not isinstance(child, RuntimeEffectEnvelope)]
    if derived and len(f"{group_key}/{derived[-1]}") > MAX_KEY_LENGTH:
        # Each child's replay key is the group key and its position: one past the limit is refused
        # here, naming why, rather than as the envelope of some child.
        raise InvalidGroupKey(
            f"group key is {len(group_key)} characters: its children's replay keys (the key, '/' and a "
            f"position up to {derived[-1]}) would pass {MAX_KEY_LENGTH}; give a shorter key=",
            group_key=group_key,
        )
    envelopes = [
        child
        if isinstance(child, RuntimeEffectEnvelope)
        else RuntimeEffectEnvelope(command=child, replay_key=f"{group_key}/{position}")
        for position, child in enumerate(listed)
    ]
    return group_key, envelopes, Values(group_key, envelopes, typed)


def grouped(
    ctx: Caller, children: Iterable[Child], key: GroupKey | str | None, what: str
) -> tuple[str, list[RuntimeEffectEnvelope]]:
    """`typed_grouped` without the values: the group key and the children as envelopes."""
    group_key, envelopes, _ = typed_grouped(ctx, children, key, what)
    return group_key, envelopes
