"""Wire-form builders for conformance steps: every tier receives the same JSON."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

_counter = itertools.count()


def fresh_scope() -> str:
    """A scope id no other test uses, so groups and events never collide across tests or runs."""
    return f"t{uuid.uuid4().hex[:12]}"


class Children:
    """How `echo` children are written: ``"tools"`` (the demo tool) or ``"calls"`` (a `Call` to the
    demo handler `DemoCalls/echo`, which answers the same), so the whole suite runs with each."""

    echo_as = "tools"


def echo(value: Any, delay_ms: int = 0) -> dict[str, Any]:
    args = {"value": value, "delay_ms": delay_ms}
    if Children.echo_as == "calls":
        return {"type": "call", "service": "DemoCalls", "handler": "echo", "arg": args}
    return {"type": "tool_call", "tool": "echo", "args": args}


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
    """One test's namespace: group keys, replay keys and event names under a fresh scope id."""

    def __init__(self) -> None:
        self.id = fresh_scope()

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
    ) -> dict[str, Any]:
        key = self.key(batch, occurrence)
        keys = replay_keys or [f"{key}/c{i}" for i in range(len(commands))]
        children = []
        for i, command in enumerate(commands):
            child: dict[str, Any] = {"command": command, "replay_key": keys[i]}
            if memberships is not None and memberships[i] is not None:
                child["membership"] = memberships[i]
            children.append(child)
        return {"key": key, "wake": wake, "disposition": disposition, "children": children}


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
