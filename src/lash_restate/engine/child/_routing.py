"""Where a child can run: the routing check of a first open and of every child run (decision 37).

The check is made on the endpoint that runs the children, with the resolver it registered and the
call targets it knows, so a caller needs only its context and every caller gets the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, assert_never

from ...calls import CallTargets
from ...contract import (
    AwaitEvent,
    Call,
    GroupExecutors,
    RuntimeEffectEnvelope,
    Sleep,
    ToolCall,
    describe_miss,
    resolve_or_none,
    resolver_fault,
)
from ..wire._routes import GROUP, named
from ._lookup import served_elsewhere, unregistered

__all__ = ["Miss", "Routing", "replaying"]


@dataclass(frozen=True, slots=True)
class Miss:
    """The first child a first open cannot route: it refuses the open (a reopen refuses nothing)."""

    position: int
    replay_key: str
    what: str


@dataclass(frozen=True, slots=True)
class Routing:
    """The endpoint's resolver (tools and any other in-process executors) and its call targets."""

    resolver: GroupExecutors
    targets: CallTargets = field(default_factory=CallTargets)

    def routes(self, envelope: RuntimeEffectEnvelope) -> bool:
        command = envelope.command
        match command:
            case Sleep() | AwaitEvent():
                return True  # durable waits run on the Restate host's own durable-wait services
            case Call():
                return self.targets.miss(command) is None
            case ToolCall():
                return resolve_or_none(self.resolver, envelope) is not None
            case _:
                assert_never(command)

    def miss_reason(self, envelope: RuntimeEffectEnvelope) -> str | None:
        command = envelope.command
        if isinstance(command, ToolCall):
            return resolver_fault(self.resolver, envelope)
        return self.targets.miss(command) if isinstance(command, Call) else None

    async def first_unregistered(self, children: Sequence[RuntimeEffectEnvelope]) -> Miss | None:
        """The first call child whose target is only declared external and that no deployment of the
        cluster serves, as the admin API answers (decision 47): a first open refuses it, as it refuses
        a child this endpoint cannot run, instead of recording a group around a child that never
        settles. None when the admin API is not configured, or does not answer (the declaration is
        trusted then, as a child's own run trusts it)."""
        for position, child in enumerate(children):
            command = child.command
            if isinstance(command, Call) and self.targets.is_external(command.service):
                why = await unregistered(command)
                if why is not None:
                    what = f"{describe_miss(self, child)} ({why})"
                    return Miss(position=position, replay_key=child.replay_key, what=what)
        return None

    async def first_refusal(self, children: Sequence[RuntimeEffectEnvelope]) -> Miss | None:
        """What refuses a first open: the first child this endpoint cannot run (`first_miss`), else the
        first call to a declared target no deployment serves (`first_unregistered`).

        A call this endpoint neither binds nor declares, which another deployment of the cluster
        serves (when the admin API can tell), most often means lash's services under this prefix
        run on another application's deployment, which took the prefix over: the refusal says so.
        """
        miss = self.first_miss(children)
        if miss is None:
            return await self.first_unregistered(children)
        command = children[miss.position].command
        if (
            isinstance(command, Call)
            and command.service not in self.targets.services
            and await served_elsewhere(command)
        ):
            return replace(miss, what=f"{miss.what}; {_elsewhere(command)}")
        return miss

    def first_miss(self, children: Sequence[RuntimeEffectEnvelope]) -> Miss | None:
        """ADR: a first open resolves all N before recording; the first child nobody can run refuses it."""
        for position, child in enumerate(children):
            if not self.routes(child):
                return Miss(position=position, replay_key=child.replay_key, what=describe_miss(self, child))
        return None


def _elsewhere(call: Call) -> str:
    group = named(GROUP)
    return (
        f"another deployment of this cluster serves {call.target}, but lash's services ({group}, ...) "
        f"run on this one: if another application's deployment took them over, give each application "
        "a prefix of its own (lash.app(..., prefix=...)), or register yours again"
    )


def replaying(ctx: Any) -> bool:
    """Whether the handler is replaying its journal (restate-sdk 1.3 keeps that on its context's VM).

    A routing answer is the endpoint's, not the journal's: a handler that suspended after acting on
    one and resumed on a process that routes differently must follow what it journaled, not ask again.
    """
    vm = getattr(ctx, "vm", None)
    answer = getattr(vm, "is_replaying", None)
    return bool(answer()) if callable(answer) else False
