"""The `Tier` protocol: what a host gives the conformance suite to run its scenarios on."""

from __future__ import annotations

from typing import Any, Literal, Protocol

__all__ = ["CHILD_KINDS", "ChildKind", "Tier"]

ChildKind = Literal["tools", "calls"]
"""How a scenario writes its `echo` children: as the demo tool ``echo``, or as calls of the demo
handler ``DemoCalls/echo``, which answers the same."""

CHILD_KINDS: tuple[ChildKind, ...] = ("tools", "calls")
"""Every child kind: run each scenario once with each."""


class Tier(Protocol):
    """One configuration of a host, as the conformance suite drives it.

    A tier runs a *turn* (one caller invocation executing the steps of
    `lash_restate.testing.turn` against its controller), emits events from outside, lists open
    groups, and can restart the process that runs children and callers. The host behind it must
    resolve the demo tools (`lash_restate.testing.demo_tools`) and the demo call targets
    (`lash_restate.testing.demo_calls`), which the scenarios' children use.
    """

    name: str

    async def turn(self, *steps: dict[str, Any]) -> list[dict[str, Any]]:
        """Run ``steps`` as one caller's turn; one ``{"ok": ...}`` or ``{"error": {...}}`` per step."""
        ...

    async def emit(self, name: str, value: Any = None) -> None:
        """Resolve the durable event ``name`` with ``value``."""
        ...

    async def reject(self, name: str, message: str) -> None:
        """Reject the durable event ``name`` with ``message``."""
        ...

    async def clear(self, name: str) -> None:
        """Forget the durable event ``name``'s payload or rejection: waiters wait for its next one."""
        ...

    async def open_groups(self) -> set[str]:
        """The group keys the host's inspection lists as open."""
        ...

    async def wait_closed(self, group_key: str) -> None:
        """Return once inspection no longer lists ``group_key``; fail if it stays listed.

        A host that delivers a close as a message (Restate) lists the group a moment after the
        close returned; one that closes in place (the reference host) returns at once.
        """
        ...

    async def restart(self, without: str = "") -> None:
        """Restart the process that runs children and callers; ``without`` names tools (comma
        separated) that it lacks until the next restart."""
        ...

    async def wait_child_ended(self, replay_key: str) -> None:
        """Return once every run of the child ``replay_key`` has ended, settled or not."""
        ...

    async def sever(self, group_key: str, *steps: dict[str, Any]) -> None:
        """Run ``steps`` as a turn and sever it once rank 1 of ``group_key`` is recorded.

        Severed is how the suite crashes a caller mid-turn: on the reference host its process dies
        and the drain runs; on Restate the turn's invocation is killed. Return once the group has
        noted how its opener ended.
        """
        ...

    async def wait_missed(self, group_key: str, position: int) -> None:
        """Return once inspection lists the child at ``position`` of ``group_key`` as missed: its
        runner was missing, its run ended with no outcome, and nothing runs it."""
        ...

    async def drain(self) -> None:
        """Run again each child whose runner was missing, where the process can route it now: the
        reference host's drain; on Restate, the operator's `lash-restate groups redispatch --all`."""
        ...

    async def kill_child(self, replay_key: str) -> None:
        """An operator's kill of the running child ``replay_key`` (on Restate, of its invocation, or
        of its callee's for a call child), once it runs."""
        ...

    async def wait_child_finished(self, replay_key: str) -> None:
        """Return once the child with ``replay_key`` has finished running (its terminal is known), or,
        in a group with ``max_in_flight``, once nothing of its group is left to start it."""
        ...

    async def counts(self) -> list[str]:
        """Every name the `count` tool has written: the side-effect witness."""
        ...
