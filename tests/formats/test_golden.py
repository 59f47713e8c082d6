"""Format 1, as the baseline release wrote it: read by this release, and written byte for byte.

docs/compatibility.md: a release reads every format written since the baseline, and during a rolling
upgrade writes only what the release before it reads. The baseline decodes every record with
``forbid_unknown_fields``, so "what it reads" is exactly the bytes it would write itself.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from lash_restate.contract import GroupHandle, LashError
from lash_restate.engine import FORMAT, FORMATS
from lash_restate.engine.wire._routes import ROUTES

from .samples import SAMPLES, Sample

FIXTURES: dict[str, str] = json.loads(Path(__file__).with_name("format1.json").read_text())
_VERSION = {row.name: row.version for row in FORMATS}


def _format(name: str) -> str:
    return name.rsplit(".", 1)[0]


def _comparable(value: Any) -> Any:
    if isinstance(value, LashError):
        return (type(value), value.wire_body())
    if isinstance(value, GroupHandle):
        return ("handle", value.to_bytes())
    return value


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_format_1_fixture_reads_as_its_sample(name: str) -> None:
    sample = SAMPLES[name]
    assert _comparable(sample.decode(FIXTURES[name].encode())) == _comparable(sample.value)


@pytest.mark.parametrize("name", sorted(n for n in FIXTURES if _VERSION[_format(n)] == 1))
def test_what_is_still_format_1_is_written_byte_for_byte(name: str) -> None:
    """A change here is a format change: give the record a new version (a new state key or handler,
    docs/compatibility.md) instead of altering what the release before reads."""
    sample = SAMPLES[name]
    assert sample.encode(sample.value).decode() == FIXTURES[name]


def test_every_sample_has_its_fixture_and_every_format_its_samples() -> None:
    # A new sample gets its fixture from `python -m tests.formats.make_fixtures`, which never rewrites.
    assert sorted(SAMPLES) == sorted(FIXTURES)
    rows = {row.name for row in FORMATS}
    assert {_format(name) for name in SAMPLES} == rows
    assert all(row.version <= FORMAT for row in FORMATS)


def test_every_engine_record_and_message_has_a_sample() -> None:
    reached: set[type] = set()

    def walk(value: Any) -> None:
        reached.add(type(value))
        if isinstance(value, msgspec.Struct):
            for field in msgspec.structs.fields(value):
                walk(getattr(value, field.name))
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    for sample in SAMPLES.values():
        walk(sample.value)
    # Every module of the engine: a record may be kept beside the code that owns it (`RankTail`).
    engine = importlib.import_module("lash_restate.engine")
    for module in [m.name for m in pkgutil.walk_packages(engine.__path__, "lash_restate.engine.")]:
        structs = {
            cls
            for _, cls in inspect.getmembers(importlib.import_module(module), inspect.isclass)
            # A private struct is how a reader decodes a public one (e.g. both formats of an open).
            if issubclass(cls, msgspec.Struct)
            and cls.__module__ == module
            and not cls.__name__.startswith("_")
        }
        assert structs <= reached, structs - reached


def test_every_route_taking_a_message_has_a_format_row() -> None:
    wheres = " ".join(row.where for row in FORMATS)
    for route in ROUTES:
        if route.input is not None:
            assert f"{{prefix}}{route.role}/{route.handler}" in wheres, route


def _with_unknown_field(sample: Sample) -> bytes | None:
    data = FIXTURES[sample.name].encode()
    if not data:
        return None  # nothing (a handler that answers nothing): no field to add
    decoded = msgspec.json.decode(data)
    if not isinstance(decoded, dict) or not isinstance(sample.value, msgspec.Struct):
        return None
    return msgspec.json.encode({**decoded, "added_by_a_later_release": [1, {"x": None}]})


_ENGINE = ("state.group.meta", "msg.group", "msg.child.run", "msg.pump")
# An operator's request must never be acted on half read: a close, a re-dispatch.
_STRICT = ("msg.group.operator_close.", "msg.group.operator_redispatch.", "msg.group.operator_resend.")


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n in SAMPLES
        if n.startswith(_ENGINE) and not n.startswith(_STRICT) and _with_unknown_field(SAMPLES[n])
    ),
)
def test_an_engine_record_reads_past_a_field_a_later_release_added(name: str) -> None:
    """What lets the next release add a field this one can do without (docs/compatibility.md)."""
    sample = SAMPLES[name]
    data = _with_unknown_field(sample)
    assert data is not None
    assert sample.decode(data) == sample.value


@pytest.mark.parametrize("name", sorted(n for n in SAMPLES if n.startswith(_STRICT)))
def test_an_operator_request_with_a_field_this_release_does_not_know_is_refused(name: str) -> None:
    data = _with_unknown_field(SAMPLES[name])
    assert data is not None
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        SAMPLES[name].decode(data)


def test_the_names_of_the_steps_lash_journals_are_pinned() -> None:
    """A `ctx.run` step's name is a command of its handler's journal, which an invocation in flight
    across an upgrade replays: renamed, a replay meets another name where its journal holds this one."""
    engine = Path(importlib.import_module("lash_restate.engine").__path__[0])
    named = {
        name
        for source in engine.rglob("*.py")
        for name in re.findall(r'run_typed\(\s*"([^"]+)"', source.read_text())
    }
    assert named == {"execute", "call_route", "route", "routable", "execute_effect"}, named
