"""`LashSignal`, keyed by event name: the durable-wait service behind `AwaitEvent` children.

``emit`` and ``reject`` are public: POST the event's JSON payload to ``/LashSignal/{name}/emit`` (or a
JSON string message to ``…/reject``) on the ingress. An event, once emitted, stays emitted (later
waiters settle at once) until ``clear`` is called (decision 12).

Each waiting child is a state entry of its own, ``waiter:{awakeable}`` (decision 112): a subscribe
writes one small entry however many children wait, and an emit lists them. An earlier release kept
them all in one list, ``waiters``, which an event that had waiters then still holds: read as well.

``operator_resend`` is public too: `lash-restate groups stranded --resend` sends through it a waiting
child's subscription again, lost when the event's state was cleared outside lash (decision 129).
"""

from __future__ import annotations

from typing import Any

import msgspec
import restate

from ...contract import AwaitEvent, InvalidEnvelope, InvalidInput, check_text, validate_json_value
from ..wire._errors import HANDLER_RETRY, client_errors
from ..wire._messages import OperatorResend, OperatorResent, require_awakeable
from ..wire._records import BYTES, EVENT_WAITER, EVENT_WAITERS, STRINGS
from ..wire._routes import (
    SIGNAL,
    SIGNAL_CLEAR,
    SIGNAL_EMIT,
    SIGNAL_OPERATOR_RESEND,
    SIGNAL_REJECT,
    SIGNAL_SUBSCRIBE,
    SIGNAL_UNSUBSCRIBE,
    described_by,
    named,
)

__all__ = ["clear_event", "emit_event", "reject_event", "signal_object"]


def signal_object(*, metadata: dict[str, str] | None = None) -> restate.VirtualObject:
    signal = restate.VirtualObject(named(SIGNAL), invocation_retry_policy=HANDLER_RETRY, metadata=metadata)

    @signal.handler(name=SIGNAL_SUBSCRIBE.handler, ingress_private=True)
    async def subscribe(ctx: restate.ObjectContext, awakeable: str) -> None:
        payload = await ctx.get("payload", serde=BYTES)
        rejection = await ctx.get("rejection", serde=BYTES)
        if payload is not None:
            ctx.resolve_awakeable(awakeable, payload, serde=BYTES)
        elif rejection is not None:
            ctx.reject_awakeable(awakeable, rejection.decode())
        else:
            # Its own entry: a list of every waiter, rewritten per subscribe, costs the square of them.
            ctx.set(EVENT_WAITER + awakeable, b"", serde=BYTES)

    @signal.handler(name=SIGNAL_OPERATOR_RESEND.handler, kind="shared")
    @client_errors  # called through the ingress only: what it answers is for a client
    @described_by(on_operator_resend)
    async def operator_resend(ctx: restate.ObjectSharedContext, req: OperatorResend) -> OperatorResent:
        return await on_operator_resend(ctx, req)

    @signal.handler(name=SIGNAL_UNSUBSCRIBE.handler, ingress_private=True)
    async def unsubscribe(ctx: restate.ObjectContext, awakeable: str) -> None:
        """A waiting child was cancelled: nobody reads its awakeable, which the event forgets."""
        ctx.clear(EVENT_WAITER + awakeable)
        listed = await ctx.get(EVENT_WAITERS, serde=STRINGS)
        if listed is not None and awakeable in listed:  # subscribed on an earlier release
            left = [w for w in listed if w != awakeable]
            if left:
                ctx.set(EVENT_WAITERS, left, serde=STRINGS)
            else:
                ctx.clear(EVENT_WAITERS)

    @signal.handler(accept="*/*")
    async def emit(ctx: restate.ObjectContext, payload: Any) -> None:
        """Fulfil the event with a JSON payload; every waiter, now or later, settles Ok(payload)."""
        body = _recorded(payload)
        waiters = await _waiters(ctx)
        ctx.clear_all()  # the waiters, and a rejection an earlier reject kept
        ctx.set("payload", body, serde=BYTES)
        for awakeable in waiters:
            ctx.resolve_awakeable(awakeable, body, serde=BYTES)

    @signal.handler()
    async def reject(ctx: restate.ObjectContext, message: str) -> None:
        """Reject the event with a JSON string message; every waiter, now or later, settles
        Err(message, "rejected")."""
        text = _message(message)
        waiters = await _waiters(ctx)
        ctx.clear_all()  # the waiters, and a payload an earlier emit kept
        ctx.set("rejection", text.encode(), serde=BYTES)
        for awakeable in waiters:
            ctx.reject_awakeable(awakeable, text)

    @signal.handler()
    async def clear(ctx: restate.ObjectContext) -> None:
        """Forget the event's payload (or rejection), so later waiters wait again; the children
        already waiting on it wait on, for its next emit or reject."""
        ctx.clear("payload")
        ctx.clear("rejection")

    del subscribe, operator_resend, unsubscribe, emit, reject, clear
    return signal


# See decision 129 (its docstring is what Restate's UI shows).
async def on_operator_resend(ctx: restate.ObjectSharedContext, req: OperatorResend) -> OperatorResent:
    """Subscribe again a waiting child whose subscription was lost (the event's state cleared
    outside lash), as its journal holds it (read by `lash-restate groups stranded`): the event
    sends itself the child's `subscribe` again, which an emit (or the payload kept) then answers.
    Shared: it sends, and waits behind nothing the event is doing."""
    if req.handler != SIGNAL_SUBSCRIBE.handler:
        raise InvalidInput(f"only a subscription is sent again (subscribe), not {req.handler!r}")
    try:
        awakeable = msgspec.json.decode(req.request, type=str)
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"not a subscribe request of this event: {exc}") from None
    require_awakeable(awakeable)  # an emit would fail to complete it, retried for ever
    sent = SIGNAL_SUBSCRIBE.send(ctx, ctx.key(), awakeable)
    return OperatorResent(invocation=await sent.invocation_id())


async def _waiters(ctx: restate.ObjectContext) -> list[str]:
    """Every awakeable waiting on the event: an earlier release's list first, then each entry."""
    listed = await ctx.get(EVENT_WAITERS, serde=STRINGS) or []
    keys = await ctx.state_keys()
    return [*listed, *(key.removeprefix(EVENT_WAITER) for key in keys if key.startswith(EVENT_WAITER))]


def _recorded(payload: Any) -> bytes:
    """The payload as every waiter settles with it (UTF-8 JSON, as lash records values). One lash
    cannot record (a lone surrogate, a non-finite number) is refused here, terminally, naming why:
    kept, it would fail every child that waits on the event, each retried for ever."""
    try:
        validate_json_value(payload, "event payload")
    except InvalidEnvelope as error:
        raise restate.TerminalError(error.message, 400) from None
    return msgspec.json.encode(payload)


def _message(message: Any) -> str:
    """A rejection's message: a JSON string lash can record, or refused terminally, naming why."""
    if not isinstance(message, str):
        raise restate.TerminalError(f"reject takes a JSON string message, not {type(message).__name__}", 400)
    try:
        check_text(message, "rejection message")
    except InvalidEnvelope as error:
        raise restate.TerminalError(error.message, 400) from None
    return message


def emit_event(ctx: restate.Context, name: str, payload: Any) -> None:
    """Send ``emit`` to the event ``name`` from a handler, one way, journaled in its invocation.

    Checked here, as the event's handler would check it, so bad input is refused at the sender
    (`InvalidEnvelope`) instead of failing the send's invocation."""
    validate_json_value(payload, "event payload")
    SIGNAL_EMIT.send(ctx, _event(name), payload)


def reject_event(ctx: restate.Context, name: str, message: str) -> None:
    """Send ``reject`` to the event ``name`` from a handler, one way: its waiters settle
    Err(message, "rejected")."""
    if not isinstance(message, str):
        raise InvalidInput(f"reject_event takes a str message, not {type(message).__name__}")
    check_text(message, "rejection message")
    SIGNAL_REJECT.send(ctx, _event(name), message)


def clear_event(ctx: restate.Context, name: str) -> None:
    """Send ``clear`` to the event ``name`` from a handler, one way: later waiters wait again."""
    SIGNAL_CLEAR.send(ctx, _event(name), None)


def _event(name: str) -> str:
    """``name`` checked as `lash.event` checks the name a child waits on (`InvalidEnvelope`)."""
    return AwaitEvent(name=name).name
