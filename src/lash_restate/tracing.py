"""OpenTelemetry spans for the group's events: open, each ranking, each wake, close and cancel.

Spans go through the OpenTelemetry API (the ``tracing`` extra), so they are off unless the
application configures a tracer provider, and nothing is emitted where the API is not installed.
Each span is a child of the Restate invocation's own trace (the ``traceparent`` Restate passes to the
handler), so it joins the server's invocation spans in the same trace, and it carries the group key,
rank, position and disposition as attributes. A replayed handler step emits nothing, as with logs.
A group's close spans its life from its open, and its first rank the time from its open to it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from restate.server_context import restate_context_is_replaying

try:  # the `tracing` extra; without it, spans are off
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - exercised by an install without the extra
    propagate = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]

__all__ = ["ATTRIBUTES", "record"]

# The event fields a span carries, under their attribute names.
ATTRIBUTES = {
    "group_key": "lash.group.key",
    "rank": "lash.rank",
    "position": "lash.position",
    "disposition": "lash.disposition",
    "wake": "lash.wake",
    "mode": "lash.mode",
    "children": "lash.children",
    "settled": "lash.settled",
    "cancelled": "lash.cancelled",
}


def record(name: str, ctx: Any, fields: Mapping[str, Any]) -> None:
    """One span named ``name`` (e.g. ``group.opened``), child of the invocation ``ctx`` runs in."""
    if trace is None or restate_context_is_replaying.get():
        return
    tracer = trace.get_tracer("lash_restate")
    parent = None
    attributes: dict[str, Any] = {k: fields[f] for f, k in ATTRIBUTES.items() if fields.get(f) is not None}
    if ctx is not None:
        request = ctx.request()
        # Restate's span of this attempt, in the headers it sent the endpoint (when it traces); the
        # invocation's own headers are its ingress client's.
        parent = propagate.extract(dict(request.attempt_headers))
        attributes["restate.invocation.id"] = request.id
    # The group's close, and its first rank, span the time since its open; any other event is a point.
    opened = fields.get("opened_at_ms")
    # The open's clock is its process's: one running ahead of this one's must not end a span before it began.
    start = min(int(opened) * 1_000_000, time.time_ns()) if opened else None
    with tracer.start_as_current_span(name, context=parent, attributes=attributes, start_time=start):
        pass
