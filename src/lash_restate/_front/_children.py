"""The children as an application writes them: a call, a tool, a timer, an event."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeAlias

from ..contract import (
    AwaitEvent,
    Call,
    Command,
    RuntimeEffectEnvelope,
    Sleep,
    ToolCall,
)

Child: TypeAlias = Command | RuntimeEffectEnvelope
"""A child as an application writes it: a command (its replay key follows from the group key and
its position) or a whole envelope with a replay key of its own."""


def call(service: str, handler: str, arg: Any = None, *, key: str | None = None) -> Call:
    """A child that invokes the Restate handler ``service/handler`` with JSON ``arg`` (``key`` for a
    virtual object or workflow); it settles with the handler's output or its terminal error."""
    return Call(service=service, handler=handler, arg=arg, key=key)


def tool(name: str, args: Any = None) -> ToolCall:
    """A child that runs the tool ``name`` (registered in the endpoint's `ToolRegistry`) with ``args``."""
    return ToolCall(tool=name, args=args)


def sleep(duration: timedelta) -> Sleep:
    """A child that is a durable timer: it fulfils with ``None`` after ``duration``."""
    return Sleep(duration_ms=int(duration / timedelta(milliseconds=1)))


def event(name: str) -> AwaitEvent:
    """A child that waits for the durable event ``name`` and fulfils with its payload."""
    return AwaitEvent(name=name)
