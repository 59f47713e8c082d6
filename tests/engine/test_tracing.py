"""Spans for the group's events, read back through an in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from restate.server_context import restate_context_is_replaying

from lash_restate import logs

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(autouse=True)
def exporter() -> Iterator[InMemorySpanExporter]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)  # the API keeps the first provider a process sets
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def _ctx(headers: dict[str, str]) -> Any:
    """What the span code reads of a Restate context: the invocation id and the request's headers."""
    request = SimpleNamespace(id="inv_1abc", headers=headers)
    return SimpleNamespace(request=lambda: request)


def test_each_group_event_is_a_span_in_the_invocations_trace() -> None:
    ctx = _ctx({"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"})
    logs.event("group.opened", ctx, group_key="s:group:b:0", children=2, wake="first", disposition="cancel")
    logs.event("group.ranked", ctx, group_key="s:group:b:0", rank=1, position=1)
    logs.event("group.woken", ctx, group_key="s:group:b:0", rank=1)
    logs.event("group.cancelled", ctx, group_key="s:group:b:0", cancelled=1, mode="direct")
    logs.event("group.closed", ctx, group_key="s:group:b:0", disposition="cancel", settled=1)
    spans = _EXPORTER.get_finished_spans()
    assert [s.name for s in spans] == [
        "group.opened",
        "group.ranked",
        "group.woken",
        "group.cancelled",
        "group.closed",
    ]
    # Joined to Restate's own trace: same trace id, the invocation's span as parent.
    assert {format(s.context.trace_id, "032x") for s in spans} == {TRACE_ID}
    assert all(s.parent is not None and format(s.parent.span_id, "016x") == "00f067aa0ba902b7" for s in spans)
    opened, ranked = spans[0].attributes, spans[1].attributes
    assert opened is not None and ranked is not None
    assert opened["lash.group.key"] == "s:group:b:0"
    assert opened["lash.disposition"] == "cancel"
    assert opened["restate.invocation.id"] == "inv_1abc"
    assert (ranked["lash.rank"], ranked["lash.position"]) == (1, 1)


def test_a_replayed_step_emits_no_span() -> None:
    token = restate_context_is_replaying.set(True)
    try:
        logs.event("group.ranked", _ctx({}), group_key="s:group:b:0", rank=1, position=0)
    finally:
        restate_context_is_replaying.reset(token)
    assert _EXPORTER.get_finished_spans() == ()
