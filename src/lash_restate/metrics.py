"""OpenTelemetry metrics for groups: how many open, close and rank, and how long they take.

They come from the same group events as the logs and spans (`lash_restate.logs.event`), through the
OpenTelemetry API (the ``tracing`` extra), so they are off unless the application sets a meter
provider, and nothing is recorded where the API is not installed. A replayed handler step records
nothing, as with logs; a step retried before Restate journaled it may record again (at least once).

Attributes are few and bounded (wake, disposition, mode): never a group key, so a metric's series
do not grow with the number of groups. Each endpoint process counts what it saw: sum over the
endpoints; `lash.group.open` is that process's opens less its closes, so a restart resets its
share (for the exact number of open groups, `lash-restate groups list`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from restate.server_context import restate_context_is_replaying

try:  # the `tracing` extra; without it, metrics are off
    from opentelemetry import metrics
except ImportError:  # pragma: no cover - exercised by an install without the extra
    metrics = None  # type: ignore[assignment]

__all__ = ["INSTRUMENTS", "Instrument", "record"]


@dataclass(frozen=True)
class Instrument:
    """One metric: its name, kind, unit and what it means (the operate guide lists them)."""

    name: str
    kind: str  # "counter" | "up_down_counter" | "histogram"
    unit: str
    description: str


INSTRUMENTS: tuple[Instrument, ...] = (
    Instrument("lash.group.opened", "counter", "{group}", "Groups opened (a reopen is not counted)."),
    Instrument(
        "lash.group.closed", "counter", "{group}", "Groups closed, by a caller, an operator or a reclaim."
    ),
    Instrument(
        "lash.group.open", "up_down_counter", "{group}", "Groups this process opened less those it closed."
    ),
    Instrument("lash.group.ranks", "counter", "{rank}", "Settlements recorded at their rank."),
    Instrument("lash.group.wakes", "counter", "{wake}", "Waiting callers woken with a rank."),
    Instrument("lash.group.reclaimed", "counter", "{group}", "Groups nobody could resume, reclaimed."),
    Instrument(
        "lash.invocation.cancelled",
        "counter",
        "{invocation}",
        "Invocations a group cancelled (a close, or a Cancel group's opener gone): a direct child's "
        "run each, a pumped group's pump once (it cancels the calls it made).",
    ),
    Instrument(
        "lash.child.missed",
        "counter",
        "{child}",
        "Children whose runner was missing (no deployment served them).",
    ),
    Instrument(
        "lash.child.run_failed",
        "counter",
        "{child}",
        "Children settled because their run, or the settle it sent, ended in failure (killed).",
    ),
    Instrument("lash.group.first_rank.duration", "histogram", "s", "From a group's open to its first rank."),
    Instrument("lash.group.duration", "histogram", "s", "From a group's open to its close."),
)

# The event fields a metric carries as attributes, under their names (the same as the spans').
_ATTRIBUTES = {"wake": "lash.wake", "disposition": "lash.disposition", "mode": "lash.mode"}

_made: dict[str, Any] = {}  # instrument name -> the API's instrument, made on first use


def _instrument(name: str) -> Any:
    if name not in _made:
        spec = next(i for i in INSTRUMENTS if i.name == name)
        meter = metrics.get_meter("lash_restate")
        make: Callable[..., Any] = {
            "counter": meter.create_counter,
            "up_down_counter": meter.create_up_down_counter,
            "histogram": meter.create_histogram,
        }[spec.kind]
        _made[name] = make(spec.name, unit=spec.unit, description=spec.description)
    return _made[name]


def _since_open(fields: Mapping[str, Any]) -> float | None:
    """Seconds from the group's open (``opened_at_ms``, the time the open recorded) to now."""
    opened = fields.get("opened_at_ms")
    return max(0.0, time.time() - opened / 1000) if opened else None


def record(name: str, fields: Mapping[str, Any]) -> None:
    """Record the metrics of the group event ``name`` (e.g. ``group.closed``) with its ``fields``."""
    if metrics is None or restate_context_is_replaying.get():
        return
    attributes = {key: fields[field] for field, key in _ATTRIBUTES.items() if fields.get(field) is not None}
    match name:
        case "group.opened":
            _instrument("lash.group.opened").add(1, attributes)
            _instrument("lash.group.open").add(1)  # no attributes: a close may narrow the disposition
        case "group.closed":
            _instrument("lash.group.closed").add(1, attributes)
            _instrument("lash.group.open").add(-1)
            if (lived := _since_open(fields)) is not None:
                _instrument("lash.group.duration").record(lived, attributes)
        case "group.ranked":
            _instrument("lash.group.ranks").add(1, attributes)
            if fields.get("rank") == 1 and (first := _since_open(fields)) is not None:
                _instrument("lash.group.first_rank.duration").record(first, attributes)
        case "group.woken":
            _instrument("lash.group.wakes").add(1, attributes)
        case "group.reclaimed":
            _instrument("lash.group.reclaimed").add(1, attributes)
        case "group.cancelled":
            _instrument("lash.invocation.cancelled").add(int(fields.get("cancelled", 0)), attributes)
        case "group.missed":
            _instrument("lash.child.missed").add(int(fields.get("children", 0)), attributes)
        case "group.run_ended" if fields.get("settled_as") != "cancelled":  # a cancel is no failure
            _instrument("lash.child.run_failed").add(int(fields.get("children", 0)), attributes)
