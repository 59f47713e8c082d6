"""The step language's wire forms: children, groups and steps as the JSON every tier receives.

`Scope` gives one scenario its own group keys, replay keys and event names. The child builders
(`echo`, `fail`, `tool`, `event`, `sleep`, `call`, `typed`) are the children the scenarios use; the
step builders (`open_`, `next_`, `close`, `save`, `use`, `combine`, ...) are what `Turn` compiles to,
and what a `Tier.sever` is handed.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from ._tier import ChildKind

__all__ = [
    "Scope",
    "call",
    "close",
    "combine",
    "count",
    "echo",
    "err",
    "event",
    "fail",
    "fresh_scope",
    "front",
    "iterate",
    "next_",
    "ok",
    "open_",
    "save",
    "select",
    "sleep",
    "supports",
    "tool",
    "typed",
    "use",
]

_counter = itertools.count()


def fresh_scope() -> str:
    """A scope id no other test uses, so groups and events never collide across tests or runs."""
    return f"t{uuid.uuid4().hex[:12]}"


def echo(value: Any, delay_ms: int = 0, *, kind: ChildKind = "tools") -> dict[str, Any]:
    """A child that fulfils with ``value`` after ``delay_ms``: the demo tool ``echo``, or (``kind="calls"``)
    a call of the demo handler ``DemoCalls/echo``, which answers the same."""
    args = {"value": value, "delay_ms": delay_ms}
    if kind == "calls":
        return {"type": "call", "service": "DemoCalls", "handler": "echo", "arg": args}
    return {"type": "tool_call", "tool": "echo", "args": args}


def call(service: str, handler: str, arg: Any = None, key: str | None = None) -> dict[str, Any]:
    """A child that calls the Restate handler ``service/handler`` (keyed by ``key`` on a virtual object)."""
    command: dict[str, Any] = {"type": "call", "service": service, "handler": handler, "arg": arg}
    if key is not None:
        command["key"] = key
    return command


def count(name: str, value: Any = None, delay_ms: int = 0, *, slow_once: bool = False) -> dict[str, Any]:
    """The demo tool ``count``: writes ``name`` to its witness (`Tier.counts`), fulfils with ``value``,
    after ``delay_ms``. With ``slow_once`` only its first run under ``name`` waits, and that run
    writes ``started:name`` to the witness first."""
    args: dict[str, Any] = {"name": name, "value": value, "delay_ms": delay_ms}
    if slow_once:
        args["slow_once"] = True
    return tool("count", args)


def fail(message: str, code: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"message": message}
    if code is not None:
        args["code"] = code
    return {"type": "tool_call", "tool": "fail", "args": args}


def tool(name: str, args: Any = None) -> dict[str, Any]:
    return {"type": "tool_call", "tool": name, "args": args}


def event(name: str) -> dict[str, Any]:
    return {"type": "await_event", "name": name}


def sleep(ms: int) -> dict[str, Any]:
    return {"type": "sleep", "duration_ms": ms}


class Scope:
    """One scenario's namespace: group keys, replay keys and event names under a fresh scope id.

    ``children`` is how its `echo` children are written (`Scope.echo`).
    """

    def __init__(self, children: ChildKind = "tools") -> None:
        self.id = fresh_scope()
        self.children: ChildKind = children

    def echo(self, value: Any, delay_ms: int = 0) -> dict[str, Any]:
        """An `echo` child of this scope's child kind."""
        return echo(value, delay_ms, kind=self.children)

    def key(self, batch: str = "b", occurrence: int = 0) -> str:
        return f"{self.id}:group:{batch}:{occurrence}"

    def event(self, name: str) -> str:
        return f"{self.id}.{name}"

    def group(
        self,
        commands: list[dict[str, Any]],
        *,
        wake: str = "all",
        disposition: str = "run_to_completion",
        batch: str = "b",
        occurrence: int = 0,
        replay_keys: list[str] | None = None,
        memberships: list[dict[str, Any] | None] | None = None,
        max_in_flight: int | None = None,
    ) -> dict[str, Any]:
        """A group of ``commands`` under this scope's key ``batch``/``occurrence``, as a step takes it.

        Args:
            commands: the children's commands (`echo`, `tool`, `call`, ...), in position order.
            wake: the wake rule: ``all``, ``first`` or ``first_success``.
            disposition: the losers' policy: ``run_to_completion`` or ``cancel``.
            batch: the key's batch id.
            occurrence: the key's occurrence.
            replay_keys: the children's replay keys (default: ``{key}/c{position}``).
            memberships: per child, a membership to stamp it with (None: none), for the scenarios
                of a child that disagrees with its group.
            max_in_flight: at most this many children run at once (None: all).
        """
        key = self.key(batch, occurrence)
        keys = replay_keys or [f"{key}/c{i}" for i in range(len(commands))]
        children = []
        for i, command in enumerate(commands):
            child: dict[str, Any] = {"command": command, "replay_key": keys[i]}
            if memberships is not None and memberships[i] is not None:
                child["membership"] = memberships[i]
            children.append(child)
        group: dict[str, Any] = {"key": key, "wake": wake, "disposition": disposition, "children": children}
        if max_in_flight is not None:
            group["max_in_flight"] = max_in_flight
        return group


def open_(group: dict[str, Any]) -> dict[str, Any]:
    return {"type": "open", "group": group}


def next_(cancel_after_ms: int | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"type": "next"}
    if cancel_after_ms is not None:
        step["cancel_after_ms"] = cancel_after_ms
    return step


def close(disposition: str | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"type": "close"}
    if disposition is not None:
        step["disposition"] = disposition
    return step


def save() -> dict[str, Any]:
    return {"type": "save"}


def use(handle: str) -> dict[str, Any]:
    return {"type": "use", "handle": handle}


def supports() -> dict[str, Any]:
    return {"type": "supports"}


def combine(
    kind: str,
    group: dict[str, Any],
    *,
    stop_after: int | None = None,
    handle: str | None = None,
    on_reject: str | None = None,
) -> dict[str, Any]:
    step: dict[str, Any] = {"type": "combine", "kind": kind, "group": group}
    if on_reject is not None:
        step["on_reject"] = on_reject
    if stop_after is not None:
        step["stop_after"] = stop_after
    if handle is not None:
        step["handle"] = handle
    return step


def typed(handler: str, arg: Any, *, key: str | None = None, raw: bool = False) -> dict[str, Any]:
    """``lash.call(handler, Model(**arg), key=key)`` of a typed demo handler (``quote``: pydantic,
    ``weigh``: a msgspec Struct, keyed); ``raw`` passes ``arg`` as it is instead of its model."""
    child: dict[str, Any] = {"type": "typed", "handler": handler, "arg": arg, "raw": raw}
    if key is not None:
        child["key"] = key
    return child


def front(
    entry: str,
    key: str,
    children: list[dict[str, Any]] | dict[str, dict[str, Any]],
    *,
    losers: str | None = None,
) -> dict[str, Any]:
    """``lash.<entry>(controller, children, key=key)`` through the front door (``select``: named)."""
    step: dict[str, Any] = {"type": "front", "entry": entry, "key": key, "children": children}
    if losers is not None:
        step["losers"] = losers
    return step


def ok(result: dict[str, Any]) -> Any:
    assert "ok" in result, f"expected ok, got {result}"
    return result["ok"]


def err(result: dict[str, Any]) -> dict[str, Any]:
    assert "error" in result, f"expected an error, got {result}"
    return result["error"]  # type: ignore[no-any-return]


def select(key: str, name: str, deadline_ms: int, replay_key_prefix: str) -> dict[str, Any]:
    """`combinators.signal_or_deadline`: the event ``name`` against a deadline, as group ``key``."""
    return {
        "type": "select",
        "key": key,
        "event": name,
        "deadline_ms": deadline_ms,
        "replay_key_prefix": replay_key_prefix,
    }


def iterate(
    group: dict[str, Any],
    *,
    resume: bool = False,
    save_after: int | None = None,
    raise_after: int | None = None,
) -> dict[str, Any]:
    """``async with lash.open(group) as g: async for s in g`` (see `IterateStep`)."""
    step: dict[str, Any] = {"type": "iterate", "group": group, "resume": resume}
    if save_after is not None:
        step["save_after"] = save_after
    if raise_after is not None:
        step["raise_after"] = raise_after
    return step
