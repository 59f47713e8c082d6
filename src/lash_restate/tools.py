"""A `GroupExecutors` resolver over named async tools.

A tool is ``async def tool(args) -> JSON``; raising `ToolFailure` rejects the
child, any other exception is a transient fault the host retries.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .contract import GroupExecutor, InvalidInput, RuntimeEffectEnvelope, ToolCall

__all__ = ["Tool", "ToolRegistry"]

Tool = Callable[[Any], Awaitable[Any]]


class _ToolExecutor:
    """Runs one tool call once (ADR: `execute` consumes the executor)."""

    __slots__ = ("_args", "_fn", "_spent")

    def __init__(self, fn: Tool, args: Any) -> None:
        self._fn = fn
        self._args = args
        self._spent = False

    async def execute(self) -> Any:
        if self._spent:
            raise RuntimeError("an executor runs once; resolve a fresh one to retry")
        self._spent = True
        return await self._fn(self._args)


class ToolRegistry:
    """Resolves `ToolCall` envelopes by tool name; None for any tool it does not know."""

    def __init__(self, tools: Mapping[str, Tool] | None = None) -> None:
        """Raises `InvalidInput` for a tool that is a plain (not ``async``) function."""
        self._tools: dict[str, Tool] = {}
        for name, fn in (tools or {}).items():
            self.register(name, fn)

    def register(self, name: str, fn: Tool) -> None:
        """Register ``fn`` as tool ``name``; a plain (not ``async``) function is refused, `InvalidInput`,
        here rather than when a child runs it (awaiting its result would fail at each retry)."""
        if inspect.isfunction(fn) and not inspect.iscoroutinefunction(fn):
            raise InvalidInput(
                f"tool {name!r} is {fn.__name__!r}, a plain function: a tool is an async function "
                f"(async def {name}(args): ...), awaited when its child runs"
            )
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
        return _ToolExecutor(fn, command.args) if fn is not None else None
