"""Events from a handler: `emit`, `reject_event` and `clear_event`, what the ingress's
``LashSignal/{name}/emit`` (``/reject``, ``/clear``) do, sent from your own handler's code."""

from __future__ import annotations

from typing import Any

import restate

from .. import engine
from ._invocation import controller, outside_run
from ._terminal import terminal_here

__all__ = ["clear_event", "emit", "reject_event"]


def emit(ctx: restate.Context, name: str, payload: Any = None) -> None:
    """Emit the event ``name``: every child waiting on ``lash.event(name)``, now or later, settles
    with ``payload`` (until the event is cleared), as a POST of it to ``LashSignal/{name}/emit``
    does. What resolves a native awakeable or a workflow's promise, from a handler: one message,
    journaled in this invocation, so a replay of the handler sends it once. It goes to this
    process's prefix (what `lash.app` or `lash.use_prefix` chose, else ``Lash``): a process that
    serves no group of an application with a prefix of its own names it with `lash.use_prefix`.

    Uncaught in a handler, its refusal ends the invocation with status 400, never a retry:
    `InvalidEnvelope` for a name ``lash.event`` would refuse, or a payload lash cannot record as
    JSON (a non-finite number, a lone surrogate, a value that is no JSON)."""
    with terminal_here():
        outside_run(controller(ctx), "lash.emit")
        engine.emit_event(ctx, name, payload)


def reject_event(ctx: restate.Context, name: str, message: str) -> None:
    """Reject the event ``name``: every child waiting on it, now or later, settles as a rejection
    with ``message`` (code ``"rejected"``), as ``LashSignal/{name}/reject`` does; what rejects a
    native awakeable, from a handler. Refused (status 400 left uncaught) for a message that is no
    ``str``, or a name ``lash.event`` would refuse."""
    with terminal_here():
        outside_run(controller(ctx), "lash.reject_event")
        engine.reject_event(ctx, name, message)


def clear_event(ctx: restate.Context, name: str) -> None:
    """Forget the event ``name``'s payload (or rejection): later waiters wait for its next emit, as
    ``LashSignal/{name}/clear`` does. The children already waiting on it wait on."""
    with terminal_here():
        outside_run(controller(ctx), "lash.clear_event")
        engine.clear_event(ctx, name)
