"""Structured logs: one JSON object per line, carrying the invocation id and group key.

Quiet by default (warnings and errors only); ``--verbose`` logs every group event. Handler logs
go through the SDK's replay filter, so a replayed step does not log twice.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import restate

from . import metrics, tracing

__all__ = ["configure", "event", "logger"]

logger = logging.getLogger("lash_restate")
logger.addFilter(restate.RestateLoggingFilter())  # a replayed step does not log twice
endpoint_logger = logging.getLogger("lash_restate.endpoint")  # `endpoint.*`: no handler's, never replayed

_FIELDS = ("event", "group_key", "invocation_id", "replay_key", "position", "rank")


def stamp(seconds: float) -> str:
    """A log line's time (``ts``): UTC, to the millisecond, ISO 8601 (so two compare as text)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1000):03d}Z"


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": stamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        extra = getattr(record, "data", None)
        if isinstance(extra, dict):
            line.update(extra)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(verbose: bool = False) -> None:
    """JSON lines on stderr; INFO for lash events when verbose, WARNING otherwise, but for the
    endpoint's own start and stop (``endpoint.*``), one line each, always logged."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("lash_restate").setLevel(logging.INFO if verbose else logging.WARNING)
    endpoint_logger.setLevel(logging.INFO)  # an operator sees a served endpoint start and stop
    logging.getLogger("hypercorn.error").setLevel(logging.INFO if verbose else logging.WARNING)


def event(name: str, ctx: Any = None, **fields: Any) -> None:
    """Log one event at INFO with the invocation id of ``ctx`` (a Restate context) if given, and
    record a group's (``group.*``) as a span and in metrics where OpenTelemetry is configured
    (`lash_restate.tracing`, `lash_restate.metrics`). A field that is None is left out."""
    if name.startswith("group."):  # a group's events are its spans and metrics; the endpoint's are lines
        tracing.record(name, ctx, fields)
        metrics.record(name, fields)
    log = endpoint_logger if name.startswith("endpoint.") else logger
    if not log.isEnabledFor(logging.INFO):
        return
    extra: dict[str, Any] = {"event": name}
    if ctx is not None:
        extra["invocation_id"] = ctx.request().id
    for key in ("group_key", "replay_key", "position", "rank"):
        if key in fields:
            extra[key] = fields.pop(key)
    extra["data"] = {key: value for key, value in fields.items() if value is not None}
    log.info(name, extra=extra)
