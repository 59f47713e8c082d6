"""The demo tools: `echo`, `fail`, `blob` and `count`, for the dev stack, the demo and the tests."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from ..contract import ToolFailure
from ..tools import Tool, ToolRegistry

__all__ = ["demo_tools"]


def _arg(args: Any, name: str, default: Any = None) -> Any:
    return args.get(name, default) if isinstance(args, dict) else default


async def _echo(args: Any) -> Any:
    """``{"value": V, "delay_ms": N}`` → V after N ms."""
    await asyncio.sleep(int(_arg(args, "delay_ms", 0)) / 1000)
    return _arg(args, "value")


async def _fail(args: Any) -> Any:
    """``{"message": M, "delay_ms": N}`` → rejects with M after N ms."""
    await asyncio.sleep(int(_arg(args, "delay_ms", 0)) / 1000)
    raise ToolFailure(str(_arg(args, "message", "failed")), code=_arg(args, "code"))


async def _blob(args: Any) -> Any:
    """``{"size": N}`` → a string of N characters (for payload-size tests)."""
    return "x" * int(_arg(args, "size", 0))


def _counter(path: Path | None) -> Tool:
    async def count(args: Any) -> Any:
        """``{"name": X, "value": V, "delay_ms": N}``: after N ms append X to the count file, → V.

        The count file is the side-effect witness: a child that must run once shows up once.
        """
        await asyncio.sleep(int(_arg(args, "delay_ms", 0)) / 1000)
        if path is not None:
            await asyncio.to_thread(_append_line, path, str(_arg(args, "name", "")))
        return _arg(args, "value")

    return count


def _append_line(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")


def demo_tools(count_file: str | Path | None = None) -> ToolRegistry:
    """`echo`, `fail`, `blob` and `count`: the tools the dev stack, the demo and the tests use.

    ``count_file`` defaults to ``$LASH_COUNT_FILE``; without either, `count` only returns.
    """
    path = count_file if count_file is not None else os.environ.get("LASH_COUNT_FILE")
    tools = {"echo": _echo, "fail": _fail, "blob": _blob, "count": _counter(Path(path) if path else None)}
    # $LASH_DEMO_TOOLS_OFF names tools this deployment no longer has (how tests model a deployment change).
    for name in os.environ.get("LASH_DEMO_TOOLS_OFF", "").split(","):
        tools.pop(name.strip(), None)
    return ToolRegistry(tools)
