"""The group events' OpenTelemetry metrics, read back through an in-memory reader."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from restate.server_context import restate_context_is_replaying

from lash_restate import logs
from lash_restate.metrics import INSTRUMENTS

_READER = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))  # the API keeps the first one set


def _points() -> dict[str, list[Any]]:
    """Every data point recorded so far, by metric name (cumulative, as the reader keeps them)."""
    data = _READER.get_metrics_data()
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def _total(points: dict[str, list[Any]], name: str) -> float:
    """A counter's value summed over its series; a histogram's number of recordings."""
    total = 0.0
    for point in points.get(name, []):
        total += point.value if hasattr(point, "value") else point.count
    return total


@pytest.fixture
def before() -> dict[str, list[Any]]:
    """What the reader held before the test: its counters are cumulative over the process."""
    return _points()


def _ctx() -> Any:
    request = SimpleNamespace(id="inv_1abc", headers={}, attempt_headers={})
    return SimpleNamespace(request=lambda: request)


def test_a_groups_life_is_counted_and_timed(before: dict[str, list[Any]]) -> None:
    ctx, key = _ctx(), "s:group:b:0"
    opened_at = int(time.time() * 1000) - 2_000  # opened two seconds ago
    logs.event(
        "group.opened", ctx, group_key=key, children=2, wake="first", disposition="cancel", mode="direct"
    )
    logs.event("group.ranked", ctx, group_key=key, rank=1, position=1, opened_at_ms=opened_at)
    logs.event("group.woken", ctx, group_key=key, rank=1)
    logs.event("group.ranked", ctx, group_key=key, rank=2, position=0, opened_at_ms=None)
    logs.event("group.cancelled", ctx, group_key=key, cancelled=3, mode="direct")
    logs.event("group.missed", ctx, group_key=key, children=2)
    logs.event("group.run_ended", ctx, group_key=key, children=1, code="409")
    logs.event("group.run_ended", ctx, group_key=key, children=4, code="409", settled_as="cancelled")
    logs.event("group.reclaimed", ctx, group_key=key)
    logs.event("group.closed", ctx, group_key=key, disposition="cancel", settled=2, opened_at_ms=opened_at)
    after = _points()
    counted = {name: _total(after, name) - _total(before, name) for name in after}
    assert counted["lash.group.opened"] == 1 and counted["lash.group.closed"] == 1
    assert counted["lash.group.open"] == 0  # opened, then closed
    assert (counted["lash.group.ranks"], counted["lash.group.wakes"]) == (2, 1)
    assert (
        counted["lash.invocation.cancelled"],
        counted["lash.child.missed"],
        counted["lash.child.run_failed"],
    ) == (
        3,
        2,
        1,
    )
    assert counted["lash.group.reclaimed"] == 1
    ours = {"lash.wake": "first", "lash.disposition": "cancel", "lash.mode": "direct"}
    assert any(dict(point.attributes) == ours for point in after["lash.group.opened"])
    for name in ("lash.group.first_rank.duration", "lash.group.duration"):
        recorded = sum(p.count for p in after[name]) - sum(p.count for p in before.get(name, []))
        lasted = sum(p.sum for p in after[name]) - sum(p.sum for p in before.get(name, []))
        assert recorded == 1 and lasted >= 2.0  # the two seconds since the open
    assert {i.name for i in INSTRUMENTS} == set(after)  # every instrument the guide lists is recorded


def test_a_replayed_step_records_nothing(before: dict[str, list[Any]]) -> None:
    token = restate_context_is_replaying.set(True)
    try:
        logs.event(
            "group.opened", _ctx(), group_key="s:group:b:0", children=1, wake="all", disposition="cancel"
        )
        logs.event("group.ranked", _ctx(), group_key="s:group:b:0", rank=1, position=0)
    finally:
        restate_context_is_replaying.reset(token)
    after = _points()
    for name in ("lash.group.opened", "lash.group.ranks"):
        assert _total(after, name) == _total(before, name)


def test_the_operate_guide_lists_every_metric() -> None:
    guide = (Path(__file__).parents[1] / "docs" / "guides" / "operate.md").read_text()
    assert [i.name for i in INSTRUMENTS if f"| `{i.name}` |" not in guide] == []
