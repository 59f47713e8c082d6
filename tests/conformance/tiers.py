"""The tiers the conformance suite runs on, behind one small interface (the anyio pattern).

A tier runs a *turn* (one caller invocation executing steps against its
controller), emits events from outside, lists open groups, and can restart the
process that runs children and callers.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import msgspec

from lash_restate.memory import MemoryHost, MemoryStore
from lash_restate.tools import demo_tools
from lash_restate.turn import decode_turn, run_turn


class Tier(Protocol):
    name: str

    async def turn(self, *steps: dict[str, Any]) -> list[dict[str, Any]]: ...

    async def emit(self, name: str, value: Any = None) -> None: ...

    async def open_groups(self) -> set[str]: ...

    async def restart(self) -> None: ...

    async def wait_child_finished(self, replay_key: str) -> None:
        """Return once the child with ``replay_key`` has finished running (its terminal is known)."""
        ...


class MemoryTier:
    """The reference host; a restart is a new host over the same store (the runtime's life)."""

    name = "memory"

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.host = MemoryHost(self.store, demo_tools())

    async def turn(self, *steps: dict[str, Any]) -> list[dict[str, Any]]:
        request = decode_turn(msgspec.json.encode({"steps": list(steps)}))
        return await run_turn(self.host, request.steps, lambda ms: asyncio.sleep(ms / 1000))

    async def emit(self, name: str, value: Any = None) -> None:
        self.store.emit_event(name, value)

    async def open_groups(self) -> set[str]:
        return set(self.store.open_group_keys())

    async def restart(self) -> None:
        await self.host.crash()
        self.host = MemoryHost(self.store, demo_tools())

    async def wait_child_finished(self, replay_key: str) -> None:
        async with asyncio.timeout(10):
            while replay_key in self.host.live_replay_keys():
                await asyncio.sleep(0.005)
