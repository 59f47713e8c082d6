"""The demo tools `echo`, `fail`, `blob`, `echo_size`, `count` and `flaky`, for the dev stack and tests."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from ..contract import ToolFailure
from ..tools import Tool, ToolRegistry

__all__ = ["append_line", "arg_of", "blob", "count_path", "demo_tools", "size_of"]


def arg_of(args: Any, name: str, default: Any = None) -> Any:
    return args.get(name, default) if isinstance(args, dict) else default


async def _echo(args: Any) -> Any:
    """``{"value": V, "delay_ms": N}`` → V after N ms."""
    await asyncio.sleep(int(arg_of(args, "delay_ms", 0)) / 1000)
    return arg_of(args, "value")


async def _fail(args: Any) -> Any:
    """``{"message": M, "delay_ms": N}`` → rejects with M after N ms (and ``code``, ``metadata`` if given)."""
    await asyncio.sleep(int(arg_of(args, "delay_ms", 0)) / 1000)
    message, metadata = str(arg_of(args, "message", "failed")), arg_of(args, "metadata")
    raise ToolFailure(message, code=arg_of(args, "code"), metadata=metadata)


def blob(args: Any) -> str:
    """``{"size": N}`` → a string of N characters (for payload-size tests)."""
    return "x" * int(arg_of(args, "size", 0))


def size_of(arg: Any) -> int:
    """How many characters the string ``arg`` (or ``arg["value"]``) has (for argument-size tests)."""
    return len(arg if isinstance(arg, str) else str(arg_of(arg, "value", "")))


async def _blob(args: Any) -> Any:
    """``{"size": N, "delay_ms": D, "after": PATH}`` → a string of N characters after D ms, and once
    the file PATH exists if one is named (a test opens the gate when it is ready for the answer)."""
    await asyncio.sleep(int(arg_of(args, "delay_ms", 0)) / 1000)
    await _gate(args)
    return blob(args)


async def _gate(args: Any) -> None:
    """Once the file ``args["after"]`` exists, if one is named: a test opens the gate when it is
    ready for the answer, however long that takes on a busy machine."""
    gate = arg_of(args, "after")
    while gate is not None:
        if await asyncio.to_thread(Path(str(gate)).exists):
            break
        await asyncio.sleep(0.05)  # a file another process creates: there is nothing to await


async def _echo_size(args: Any) -> Any:
    return size_of(args)


def _counter(path: Path | None) -> Tool:
    async def count(args: Any) -> Any:
        """``{"name": X, "value": V, "delay_ms": N, "after": PATH}``: after N ms (and once the file
        PATH exists, if one is named) append X to the count file, → V.

        The count file is the side-effect witness: a child that must run once shows up once. With
        ``"slow_once": true`` the first run under X writes ``started:X`` there before it waits, and a
        later run (the child run again, after the first was cut off) answers without waiting.
        """
        name = str(arg_of(args, "name", ""))
        if not (arg_of(args, "slow_once", False) and path is not None and await _ran_before(path, name)):
            await asyncio.sleep(int(arg_of(args, "delay_ms", 0)) / 1000)
            await _gate(args)
        if path is not None:
            await asyncio.to_thread(append_line, path, name)
        return arg_of(args, "value")

    return count


async def _ran_before(path: Path, name: str) -> bool:
    """Whether a run under ``name`` started before (``started:name`` in the count file); if not, it
    has now: the line is written."""
    started = f"started:{name}"

    def seen_else_mark() -> bool:
        if path.exists() and started in path.read_text(encoding="utf-8").splitlines():
            return True
        append_line(path, started)
        return False

    return await asyncio.to_thread(seen_else_mark)


def _flaky(path: Path | None) -> Tool:
    attempts: dict[str, int] = {}  # without a count file: this process's own tally

    async def flaky(args: Any) -> Any:
        """``{"name": X, "failures": N, "value": V}``: the first N attempts under X fail, then → V.

        A failure is a plain exception, i.e. a transient fault the host retries with a fresh executor.
        Each attempt appends X to the count file first, so the attempts are counted across processes
        (an endpoint restart included) and a test can see how many ran.
        """
        name = str(arg_of(args, "name", ""))
        failures = int(arg_of(args, "failures", 0))
        if path is not None:
            await asyncio.to_thread(append_line, path, name)
            attempt = (await asyncio.to_thread(path.read_text, "utf-8")).splitlines().count(name)
        else:
            attempt = attempts[name] = attempts.get(name, 0) + 1
        if attempt <= failures:
            raise RuntimeError(f"transient fault {attempt} of {failures}")
        return arg_of(args, "value")

    return flaky


def count_path(count_file: str | Path | None) -> Path | None:
    """The side-effect witness file: ``count_file``, else ``$LASH_COUNT_FILE``, else none."""
    path = count_file if count_file is not None else os.environ.get("LASH_COUNT_FILE")
    return Path(path) if path else None


def append_line(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")


def demo_tools(count_file: str | Path | None = None) -> ToolRegistry:
    """`echo`, `fail`, `blob`, `echo_size`, `count` and `flaky`: the dev stack's and the tests' tools.

    ``count_file`` defaults to ``$LASH_COUNT_FILE``; without either, `count` only returns and
    `flaky` counts its attempts in memory.
    """
    file = count_path(count_file)
    tools = {
        "echo": _echo,
        "fail": _fail,
        "blob": _blob,
        "echo_size": _echo_size,
        "count": _counter(file),
        "flaky": _flaky(file),
    }
    # $LASH_DEMO_TOOLS_OFF names tools this deployment no longer has (how tests model a deployment change).
    for name in os.environ.get("LASH_DEMO_TOOLS_OFF", "").split(","):
        tools.pop(name.strip(), None)
    return ToolRegistry(tools)
