"""Spans for the group's events, read back through an in-memory exporter."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from restate.server_context import restate_context_is_replaying

from lash_restate import logs
from lash_restate.testing import LocalStack
from tests.conformance.builders import Scope, combine, echo, event, next_, ok, open_, save

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
    """What the span code reads of a Restate context: the invocation id and the attempt's headers."""
    request = SimpleNamespace(id="inv_1abc", headers={}, attempt_headers=headers)
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


def test_a_groups_span_never_ends_before_it_began_whatever_the_opens_clock() -> None:
    """A close's span starts at the group's open, read from the clock of the process that opened it;
    one running a minute ahead of this one's starts it now, not after its end."""
    ahead = int(time.time() * 1000) + 60_000
    logs.event(
        "group.closed", _ctx({}), group_key="s:group:b:0", disposition="cancel", settled=1, opened_at_ms=ahead
    )
    [span] = _EXPORTER.get_finished_spans()
    assert span.start_time is not None and span.end_time is not None and span.start_time <= span.end_time


def test_a_replayed_step_emits_no_span() -> None:
    token = restate_context_is_replaying.set(True)
    try:
        logs.event("group.ranked", _ctx({}), group_key="s:group:b:0", rank=1, position=0)
    finally:
        restate_context_is_replaying.reset(token)
    assert _EXPORTER.get_finished_spans() == ()


async def test_a_served_endpoint_exports_each_groups_metrics_and_spans(tmp_path: Path) -> None:
    """An application that set OpenTelemetry's providers (`telemetry_app`), served against a real
    server: a race and a group left open are counted (`lash.group.opened` 2, closed 1, open 1), the
    time to each one's first rank and the race's life are recorded, and its close's span lasts from
    its open (a real duration, not a point)."""
    # A server that traces (to nowhere: port 9 discards), so that it sends its span to the endpoint.
    traced = {"RESTATE_TRACING_ENDPOINT": "http://127.0.0.1:9"}
    stack_ = LocalStack.single(
        tmp_path, module="tests.engine.telemetry_app", endpoint_args=(), server_env=traced
    )
    with stack_.start() as stack:
        s = Scope()
        # The loser outlives the test: only the winner ranks, however slow the machine.
        race = s.group([echo("won", delay_ms=300), echo("lost", delay_ms=600_000)], wake="first")
        [raced] = await stack.turn(combine("race", race))
        assert ok(raced)["value"] == "won"
        kept = s.group([echo("a"), event(s.event("never"))], batch="kept")
        await stack.turn(open_(kept), next_(), save())
        log = tmp_path / "endpoint.log"

        def exported() -> dict[str, Any] | None:
            points = _metric_points(log.read_text())
            # An export may fall between two events: wait for one that has seen all of them.
            wanted = {"opened": 2, "ranks": 2, "first_rank.duration": 2, "duration": 1}
            done = all(points.get(f"lash.group.{name}", 0) >= least for name, least in wanted.items())
            return points if done else None

        points = await _until(exported)
        counted = [points[f"lash.group.{name}"] for name in ("opened", "closed", "open", "ranks")]
        assert counted == [2, 1, 1, 2]  # the race's winner and the kept group's first
        assert points["lash.group.first_rank.duration"] == 2 and points["lash.group.duration"] == 1
        [closed] = [span for span in _spans(log.read_text()) if span["name"] == "group.closed"]
        lived = _ns(closed["end_time"]) - _ns(closed["start_time"])
        assert lived >= 300_000_000  # at least its winner's 300 ms
        # A child of Restate's span of the invocation's attempt, which Restate sends the endpoint in
        # the attempt's headers (the invocation's own headers are its ingress client's: none here).
        assert closed["parent_id"] is not None, closed


def _otel(text: str, kind: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        if line.startswith('{"otel": '):
            record = json.loads(line)
            if record["otel"] == kind:
                found.append(record["data"])
    return found


def _metric_points(text: str) -> dict[str, float]:
    """The latest export's value of each metric: a sum's value, a histogram's count (cumulative)."""
    latest: dict[str, float] = {}
    for data in _otel(text, "metrics"):
        for resource in data["resource_metrics"]:
            for scope in resource["scope_metrics"]:
                for metric in scope["metrics"]:
                    points = metric["data"]["data_points"]
                    latest[metric["name"]] = sum(p["value"] if "value" in p else p["count"] for p in points)
    return latest


def _spans(text: str) -> list[dict[str, Any]]:
    return _otel(text, "span")


def _ns(stamp: str) -> int:
    """An exported span's ISO 8601 time (microseconds, UTC), in nanoseconds."""
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1_000_000) * 1_000


async def _until(probe: Any, within: float = 30) -> Any:
    async with asyncio.timeout(within):
        while True:
            found = probe()
            if found is not None:
                return found
            await asyncio.sleep(0.1)
