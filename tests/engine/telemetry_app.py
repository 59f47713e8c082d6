"""`lash-restate serve --with-turn` in a process whose application set OpenTelemetry's meter and
tracer providers, as a user's would: each exports to stderr, a JSON object per line, which the
stack keeps in the endpoint's log (`tests/engine/test_tracing.py` reads it)."""

from __future__ import annotations

import argparse
import json
import sys

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from lash_restate.cli import main


def _line(kind: str, data: str) -> str:
    return json.dumps({"otel": kind, "data": json.loads(data)}) + "\n"


def telemetry() -> None:
    out = sys.stderr
    exporter = ConsoleMetricExporter(
        out=out, formatter=lambda data: _line("metrics", data.to_json(indent=None))
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=200)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    spans = TracerProvider()
    spans.add_span_processor(
        SimpleSpanProcessor(
            ConsoleSpanExporter(out=out, formatter=lambda span: _line("span", span.to_json(indent=None)))
        )
    )
    trace.set_tracer_provider(spans)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", required=True)
    args = parser.parse_args()
    telemetry()
    raise SystemExit(main(["serve", "--host", "127.0.0.1", "--port", args.port, "--with-turn", "-v"]))
