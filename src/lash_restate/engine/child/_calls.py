"""A call child's call, wherever it is made: its argument, where it goes, and the outcome it settles as.

A call is made by `LashChild` (the format-1 path, and a target only declared external) or by its
group's pump (decision 61), as the plan the group's open decides says (decision 66); both read the
callee's answer into an outcome here, so a call child settles alike whoever called it.
"""

from __future__ import annotations

from typing import Any

import msgspec
import restate

from ...contract import Call, Cancelled, Err, Ok, Outcome, RuntimeEffectEnvelope
from ..wire._errors import is_cancellation
from ..wire._incarnation import INCARNATION, calls_as_native
from ._routing import Routing

__all__ = [
    "VIA_CALL",
    "VIA_CHILD",
    "answered",
    "bound_call",
    "call_arg",
    "callee_key",
    "callee_replay_key",
    "cancelled",
    "invocation_options",
    "open_plan",
    "pump_plan",
    "refused",
]

_CANCELLED = {"cancelled", "canceled"}  # how Restate words a cancellation it propagated to a call

# How a pump calls a child (decision 61), as `PumpAwait.plan` and the pump's journaled `route` carry it:
# straight to the user's handler, or through `LashChild/execute2`.
VIA_CALL, VIA_CHILD = "call", "child"


def call_arg(call: Call, incarnation: str) -> bytes:
    """The bytes the callee receives from a call child of the group of ``incarnation``: the call's
    JSON argument; none (``None``) as a native call sends it, an empty body, unless the group was
    opened before lash did so (decision 111: its pumps and children journaled ``null``)."""
    if call.arg is None and calls_as_native(incarnation):
        return b""
    return msgspec.json.encode(call.arg)


def invocation_options(call: Call, idempotency_key: str | None = None) -> dict[str, Any]:
    """What the call gives its callee's invocation beside its argument, as `generic_call` takes it:
    its headers, Restate's flow-control scope and limit key, and its idempotency key, the call's
    own or else ``idempotency_key`` (only those given, so a call without them is made exactly as
    before)."""
    given = {
        "headers": call.headers,
        "scope": call.scope,
        "limit_key": call.limit_key,
        "idempotency_key": call.idempotency_key or idempotency_key,
    }
    return {name: value for name, value in given.items() if value is not None}


def bound_call(routing: Routing, envelope: RuntimeEffectEnvelope) -> Call | None:
    """The call, unless its target is only declared external: one the pump may call itself (decision
    61), once the caller also knows this endpoint routes it (`pump_plan` asks; an open's plan was
    made after the open refused what it cannot route).

    A target only declared external is called by a `LashChild/execute2`, which asks the admin API
    whether any deployment serves it before calling (decision 47), so a forgotten registration ends
    the child as a terminal 404 instead of a call retried for ever.
    """
    command = envelope.command
    if isinstance(command, Call) and not routing.targets.is_external(command.service):
        return command
    return None


def pump_plan(routing: Routing, children: list[RuntimeEffectEnvelope]) -> list[str]:
    """How a pump that was sent no plan (a slice of a group opened in parts, or a re-dispatch) calls
    each of ``children``, deciding as it runs (and journaling it):
    a call to a handler this endpoint binds straight to it;
    any other child through `LashChild/execute2`, which checks the target when it runs (decision 47).

    A call whose target left this endpoint goes there too: its run ends with the terminal 404 of a
    miss and tells the group, which lists it as missed for a drain, as any other miss (decision 73).
    """
    return [
        VIA_CALL if bound_call(routing, c) is not None and routing.routes(c) else VIA_CHILD for c in children
    ]


def open_plan(routing: Routing, children: list[RuntimeEffectEnvelope]) -> list[str]:
    """`pump_plan` as the open that records a group decides it, sent to its pump: every child routed
    (a miss refused the open), so this depends only on which services are declared external, and a
    replay of the open decides as its first execution did."""
    # As `pump_plan`, but for `routing.routes`: the open refused any child it does not route.
    return [VIA_CALL if bound_call(routing, child) is not None else VIA_CHILD for child in children]


def callee_key(envelope: RuntimeEffectEnvelope, incarnation: str) -> str:
    """The idempotency key of a call child's invocation: how an operator (and inspection) finds the
    callee of a child by its replay key. Per group incarnation, so a namesake reopened after a close
    calls again, as on every host, instead of being answered the old call's output."""
    return f"{envelope.replay_key}@{incarnation}"


def callee_replay_key(idempotency_key: str | None) -> str | None:
    """The replay key a callee's idempotency key names (`callee_key`'s inverse), if it is one."""
    replay_key, at, incarnation = (idempotency_key or "").rpartition("@")
    return replay_key if at and replay_key and INCARNATION.fullmatch(incarnation) else None


def cancelled(error: restate.TerminalError) -> bool:
    """Whether a call's terminal error is its cancellation (not the callee's own 409)."""
    return is_cancellation(error) and error.message.lower() in _CANCELLED


def answered(target: str, raw: bytes | None) -> Outcome:
    """The outcome of a call to ``target`` (``service/handler``) its callee answered with ``raw``."""
    try:
        # What the store holds (the answer wrapped in an `Ok`) may exceed what was answered: the store
        # sizes the wrapped form, so an answer near the limit settles `too_large`, never a retry loop.
        return Ok(value=msgspec.json.decode(raw) if raw else None)
    except (msgspec.DecodeError, RecursionError):  # nested past what a decoder follows: not JSON lash reads
        size = len(raw) if raw else 0
        return Err(message=f"{target} answered {size} bytes that are not JSON", code="not_json")


def refused(error: restate.TerminalError) -> Outcome:
    """The outcome of a call that ended in ``error``: cancelled, or the handler's own terminal error."""
    if cancelled(error):
        return Cancelled()
    # The handler's own terminal error, a 409 of its own included: a rejection, not a cancel. Its
    # metadata is written only where the endpoint writes it (`written`, decision 118).
    metadata = error.metadata or msgspec.UNSET
    return Err(message=error.message, code=str(error.status_code), metadata=metadata)
