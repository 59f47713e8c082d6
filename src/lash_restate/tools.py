"""A `GroupExecutors` resolver over named async tools.

A tool is ``async def tool(args) -> JSON``; raising `ToolFailure` rejects the
child, any other exception is a transient fault the host retries.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .contract import GroupExecutor, RuntimeEffectEnvelope, ToolCall, ToolFailure
from .contract._errors import a_kind

__all__ = ["Tool", "ToolRegistry"]

Tool = Callable[[Any], Awaitable[Any]]


class _ToolExecutor:
    """Runs one tool call once (ADR: `execute` consumes the executor)."""

    __slots__ = ("_args", "_fn", "_name", "_spent")

    def __init__(self, fn: Tool, args: Any, name: str) -> None:
        self._fn = fn
        self._args = args
        self._name = name
        self._spent = False

    async def execute(self) -> Any:
        if self._spent:
            raise RuntimeError("an executor runs once; resolve a fresh one to retry")
        self._spent = True
        result = self._fn(self._args)
        if not inspect.isawaitable(result):
            # A plain function given as a tool: retrying would only meet it again, so the child rejects.
            raise ToolFailure(
                f"tool {self._name!r} returned {a_kind(result)}, not an awaitable: a tool is an "
                f"async function (async def {self._name}(args): ...)"
            )
        return await result


class ToolRegistry:
    """Resolves `ToolCall` envelopes by tool name; None for any tool it does not know."""

    def __init__(self, tools: Mapping[str, Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = dict(tools or {})

    def register(self, name: str, fn: Tool) -> None:
        self._tools[name] = fn

    def tool(self, name: str) -> Callable[[Tool], Tool]:
        def decorate(fn: Tool) -> Tool:
            self.register(name, fn)
            return fn

        return decorate

    @property
    def names(self) -> list[str]:
        return sorted(self._tools)

    def resolve(self, envelope: RuntimeEffectEnvelope) -> GroupExecutor | None:
        command = envelope.command
        if not isinstance(command, ToolCall):
            return None  # durable waits are the host's own (Sleep, AwaitEvent)
        fn = self._tools.get(command.tool)
        return _ToolExecutor(fn, command.args, command.tool) if fn is not None else None
