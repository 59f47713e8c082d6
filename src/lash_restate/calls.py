"""Which Restate handlers a `Call` child may call, by service.

A `Call` child is routable when its target is known: its service binds the handler, and the call
carries a key exactly when the service is keyed (a virtual object or a workflow). What is known is
a deployment fact, so a miss refuses a first open (ADR, "resolve all N before recording") and is
never turned into an outcome.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from .contract import Call, InvalidInput

__all__ = ["CallTargets", "Target"]


@dataclass(frozen=True, slots=True)
class Target:
    """A service a child may call: its name, its handlers (None: any) and whether it is keyed.

    A service bound in the app gives its handlers as they stand when a child is routed (the live
    set of its definition), so a handler defined after `lash.app(...)` is reached, as Restate
    reaches it."""

    service: str
    handlers: AbstractSet[str] | None = field(default=None, hash=False)
    keyed: bool = False


class CallTargets:
    """The handlers children may call, by service."""

    def __init__(self, targets: Iterable[Target] = (), *, external: Iterable[Target] = ()) -> None:
        self._by_service: dict[str, Target] = {}
        self._external: set[str] = set()
        for target in targets:
            self.add(target)
        for target in external:
            self.add(target, external=True)

    def add(self, target: Target, *, external: bool = False) -> None:
        """Add a target; ``external``: declared, served by another deployment (not bound here)."""
        known = self._by_service.get(target.service)
        if known is not None and known != target:
            raise InvalidInput(f"service {target.service!r} is declared twice, differently")
        self._by_service[target.service] = target
        if external and known is None:
            self._external.add(target.service)
        elif not external:
            self._external.discard(target.service)  # bound here after all

    def is_external(self, service: str) -> bool:
        """Whether ``service`` is only declared (served elsewhere, if anywhere), not bound here."""
        return service in self._external

    @property
    def services(self) -> list[str]:
        return sorted(self._by_service)

    def miss(self, call: Call) -> str | None:
        """Why ``call`` cannot be routed here, or None when it can."""
        target = self._by_service.get(call.service)
        if target is None:
            return (
                f"service {call.service!r} is not bound here and not declared: serve it in this app, "
                f"or declare it served by another deployment with lash.external({call.service!r})"
            )
        if target.handlers is not None and call.handler not in target.handlers:
            return f"service {call.service!r} has no handler {call.handler!r}"
        if target.keyed and call.key is None:
            return f"service {call.service!r} is keyed: the call needs a key"
        if not target.keyed and call.key is not None:
            # A declaration by name says less than the callee is: say how to declare a keyed one.
            hint = (
                f" (declared with lash.external({call.service!r}): declare a virtual object or a "
                "workflow with keyed=True, or pass lash.external its definition)"
                if self.is_external(call.service)
                else ""
            )
            return f"service {call.service!r} is not keyed: the call must not carry a key{hint}"
        return None
