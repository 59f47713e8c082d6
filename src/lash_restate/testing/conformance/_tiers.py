"""This repository's tiers: the reference host in process, and the Restate host on a `LocalStack`.

Each is a `Tier` (the anyio pattern: one interface, several backends, one suite).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import msgspec

from ..._http import tls
from ...contract import GroupExecutor, GroupExecutors, RuntimeEffectEnvelope, ToolCall
from ...inspection import quote as quote_sql
from ...inspection import redispatch_missed, show_group, sql
from ...memory import MemoryHost, MemoryStore, first_of
from ..driver import TURN
from ..stack import LocalStack
from ..targets import demo_calls
from ..tools import demo_tools
from ..turn import decode_turn, run_turn

__all__ = ["MemoryTier", "RestateTier"]


def _callee(replay_key: str) -> str:
    """The SQL condition for a call child's own invocation: the callee, keyed by its replay key."""
    return f"starts_with(idempotency_key, {quote_sql(replay_key + '@')})"


class _Without:
    """A resolver that has lost the tools ``names`` (a deployment that briefly lacks them)."""

    def __init__(self, resolver: GroupExecutors, names: set[str]) -> None:
        self.resolver, self.names = resolver, names

    def resolve(self, envelope: RuntimeEffectEnvelope) -> GroupExecutor | None:
        command = envelope.command
        if isinstance(command, ToolCall) and command.tool in self.names:
            return None
        return self.resolver.resolve(envelope)


class MemoryTier:
    """The reference host as a tier; a restart is a new host over the same store (the runtime's life).

    ``count_file`` is where the demo `count` tool writes its witness lines.
    """

    name = "memory"

    def __init__(self, count_file: Path) -> None:
        self.count_file = count_file
        self.store = MemoryStore()
        self.host = MemoryHost(self.store, self.resolver())

    def resolver(self, without: str = "") -> GroupExecutors:
        """The demo tools and the demo call targets, as a ``--with-turn`` endpoint serves them."""
        resolver = first_of(demo_tools(self.count_file), demo_calls(self.count_file))
        return _Without(resolver, set(without.split(","))) if without else resolver

    async def turn(self, *steps: dict[str, Any]) -> list[dict[str, Any]]:
        """One turn is one caller, in a task of its own: how it ends is how its caller ended."""
        request = decode_turn(msgspec.json.encode({"steps": list(steps)}))
        return await asyncio.create_task(
            run_turn(self.host, request.steps, lambda ms: asyncio.sleep(ms / 1000))
        )

    async def emit(self, name: str, value: Any = None) -> None:
        self.store.emit_event(name, value)

    async def reject(self, name: str, message: str) -> None:
        self.store.reject_event(name, message)

    async def clear(self, name: str) -> None:
        self.store.clear_event(name)

    async def open_groups(self) -> set[str]:
        return set(self.store.open_group_keys())

    async def wait_closed(self, group_key: str) -> None:
        assert group_key not in await self.open_groups()

    async def restart(self, without: str = "") -> None:
        """The process dies (its runners and running callers with it); the next one runs the drain."""
        await self.host.crash()
        self.host = MemoryHost(self.store, self.resolver(without))
        self.host.drain()

    async def wait_child_ended(self, replay_key: str) -> None:
        await self.host.join_child(replay_key)

    async def counts(self) -> list[str]:
        return self.count_file.read_text().splitlines() if self.count_file.exists() else []

    async def wait_child_finished(self, replay_key: str) -> None:
        await self.host.join_child(replay_key)

    async def wait_missed(self, group_key: str, position: int) -> None:
        record = self.store.groups[group_key]
        assert position not in record.sequences and position not in record.live

    async def drain(self) -> None:
        self.host.drain()

    async def kill_child(self, replay_key: str) -> None:
        await self.host.kill_child(replay_key)

    async def sever(self, group_key: str, *steps: dict[str, Any]) -> None:
        turn = asyncio.create_task(self.turn(*steps))
        while not (record := self.store.groups.get(group_key)) or not record.order:
            if turn.done():
                raise AssertionError(f"the turn ended before rank 1 of {group_key}: {turn.result()}")
            if record is None:
                await asyncio.sleep(0)  # the turn has not opened the group yet
            else:
                await record.changed.wait()
        turn.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await turn
        await self.restart()


class RestateTier:
    """The Restate host as a tier: a started `LocalStack` whose endpoint serves the demo (``--with-turn``)
    and writes a rejection's metadata (``LASH_ERROR_METADATA=1`` in its environment, which a scenario
    checks); each turn is a fresh `LashTurn/run` invocation."""

    def __init__(self, name: str, stack: LocalStack) -> None:
        self.name = name
        self.stack = stack

    async def counts(self) -> list[str]:
        return self.stack.counts()

    async def turn(self, *steps: dict[str, Any]) -> list[dict[str, Any]]:
        return await self.stack.turn(*steps)

    async def emit(self, name: str, value: Any = None) -> None:
        await self.stack.emit(name, value)

    async def reject(self, name: str, message: str) -> None:
        await self.stack.reject(name, message)

    async def clear(self, name: str) -> None:
        await self.stack.clear(name)

    async def open_groups(self) -> set[str]:
        # The groups holding a record, as `lash-restate groups list` lists them, in one query where the
        # listing makes eight (what holds each group): a scenario polls this until its group closes.
        query = "SELECT service_key FROM state WHERE service_name = 'LashGroup' AND key = 'meta'"
        rows = await self.sql(query)
        return {row["service_key"] for row in rows}

    async def wait_closed(self, group_key: str) -> None:
        async with asyncio.timeout(30):
            while True:
                if group_key not in await self.open_groups():
                    return
                await asyncio.sleep(0.05)

    async def sql(self, query: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(sql, self.stack.admin_url, query)

    async def restart(self, without: str = "") -> None:
        await asyncio.to_thread(self.stack.restart_endpoint, LASH_DEMO_TOOLS_OFF=without)

    async def wait_child_ended(self, replay_key: str) -> None:
        key = quote_sql(replay_key)
        async with asyncio.timeout(60):
            while True:
                rows = await self.sql(
                    "SELECT status FROM sys_invocation WHERE (target_service_name = 'LashChild' AND "
                    f"target_handler_name IN ('run', 'execute', 'execute2') AND target_service_key = {key}) "
                    f"OR {_callee(replay_key)}"
                )
                if rows and all(row["status"] == "completed" for row in rows):
                    return
                await asyncio.sleep(0.05)

    async def wait_missed(self, group_key: str, position: int) -> None:
        async with asyncio.timeout(30):
            while True:
                view = await asyncio.to_thread(show_group, self.stack.admin_url, group_key)
                assert view is not None, f"{group_key} is not open"
                if view.children[position].missed:
                    return
                await asyncio.sleep(0.05)

    async def drain(self) -> None:
        await asyncio.to_thread(redispatch_missed, self.stack.admin_url, ingress=self.stack.ingress_url)

    async def kill_child(self, replay_key: str) -> None:
        key = quote_sql(replay_key)
        query = (
            "SELECT id FROM sys_invocation WHERE status != 'completed' AND ((target_service_name = "
            "'LashChild' AND target_handler_name IN ('run', 'execute', 'execute2') "
            f"AND target_service_key = {key}) "
            f"OR {_callee(replay_key)})"
        )
        async with asyncio.timeout(30), httpx.AsyncClient(verify=tls(), timeout=30) as client:
            while True:
                rows = await self.sql(query)
                if rows:
                    break
                await asyncio.sleep(0.05)
            [row] = rows
            killed = await client.patch(f"{self.stack.admin_url}/invocations/{row['id']}/kill")
            assert killed.status_code in (200, 202), killed.text

    async def sever(self, group_key: str, *steps: dict[str, Any]) -> None:
        marker = f"sever-{uuid.uuid4()}"  # the turn's idempotency key: how its invocation is found
        async with httpx.AsyncClient(verify=tls(), timeout=60) as client:
            turn = asyncio.create_task(
                client.post(
                    f"{self.stack.ingress_url}/{TURN}/run",
                    json={"steps": list(steps)},
                    headers={"idempotency-key": marker},
                )
            )
            async with asyncio.timeout(30):
                while True:
                    # Rank 1 is recorded: in `meta`'s order, or in a paged group's `ranked` tail.
                    rows = await self.sql(
                        "SELECT (SELECT id FROM sys_invocation WHERE idempotency_key = "
                        f"{quote_sql(marker)}) AS id, (SELECT value_utf8 FROM state WHERE "
                        f"service_name = 'LashGroup' AND service_key = {quote_sql(group_key)} "
                        "AND key = 'meta') AS meta, (SELECT value_utf8 FROM state WHERE "
                        f"service_name = 'LashGroup' AND service_key = {quote_sql(group_key)} "
                        "AND key = 'ranked') AS ranked"
                    )
                    row = rows[0]
                    ranked = row.get("ranked") and json.loads(row["ranked"])
                    first = ranked and (ranked.get("pages") or ranked.get("tail"))
                    if row.get("id") and row.get("meta") and (json.loads(row["meta"]).get("order") or first):
                        break
                    assert not turn.done(), (await turn).text
                    await asyncio.sleep(0.05)
            killed = await client.patch(f"{self.stack.admin_url}/invocations/{row['id']}/kill")
            assert killed.status_code in (200, 202), killed.text
            assert (await turn).status_code != 200  # the turn ended in failure
        # Severed once the group has noted how its opener ended (and applied a declared Cancel), as
        # the reference host's drain has when `sever` returns: a resumer reopening before that would
        # be one more live opener, which keeps the losers running (decision 13). A `RunToCompletion`
        # group watches no opener (nothing applies when one ends): the kill itself severs it.
        async with asyncio.timeout(30):
            while True:
                [row] = await self.sql(
                    "SELECT value_utf8 AS meta FROM state WHERE service_name = 'LashGroup' AND "
                    f"service_key = {quote_sql(group_key)} AND key = 'meta'"
                )
                openers = json.loads(row["meta"]).get("openers", [])
                if all(o.get("ended") or not o.get("watcher") for o in openers):
                    break
                await asyncio.sleep(0.05)

    async def wait_child_finished(self, replay_key: str) -> None:
        """The child's invocations all completed and its outcome store was released (or never written).

        A batched group's store is its pump (keyed by incarnation and group key, the replay key's
        prefix here). A call child that lash calls itself is the callee's invocation, found by its
        idempotency key.
        """
        # decision 61: a call child costs its handler's invocation, no LashChild of its own
        key = quote_sql(replay_key)
        group = quote_sql(replay_key.rsplit("/", 1)[0])
        async with asyncio.timeout(30):
            while True:
                [row] = await self.sql(
                    "SELECT "
                    "(SELECT count(*) FROM sys_invocation WHERE status != 'completed' AND ("
                    f"(target_service_name = 'LashChild' AND target_service_key = {key}) OR "
                    f"{_callee(replay_key)} OR "
                    "(target_service_name = 'LashPump' AND "
                    f"ends_with(target_service_key, {group})))) AS pending, "
                    "(SELECT count(*) FROM state WHERE "
                    f"(service_name = 'LashChild' AND service_key = {key}) OR "
                    f"(service_name = 'LashPump' AND ends_with(service_key, {group}))) AS stored, "
                    "(SELECT count(*) FROM sys_invocation WHERE ((target_service_name = 'LashChild' "
                    f"AND target_service_key = {key} "
                    "AND target_handler_name IN ('run', 'execute', 'execute2')) "
                    f"OR {_callee(replay_key)}) AND status = 'completed') AS done, "
                    "(SELECT count(*) FROM sys_invocation WHERE (target_service_name = 'LashChild' "
                    f"AND target_service_key = {key}) OR {_callee(replay_key)}) AS started, "
                    "(SELECT count(*) FROM sys_invocation WHERE target_service_name = 'LashPump' AND "
                    f"ends_with(target_service_key, {group}) AND status = 'completed') AS pumped"
                )
                # A child a bounded group never started: every pump of its group ended without it.
                never = row["started"] == 0 and row["pumped"] > 0
                if row["pending"] == 0 and row["stored"] == 0 and (row["done"] > 0 or never):
                    return
                await asyncio.sleep(0.05)
