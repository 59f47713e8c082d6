"""A resolver with a bug of its own (``LASH_RESOLVER``): resolving the tool ``explodes`` raises, and
the tool ``explodes_on_retry`` resolves once (an executor whose run fails, a transient fault) and
raises each time after, as a resolver whose own state broke between a child's attempts."""

from __future__ import annotations

from typing import Any

from lash_restate.contract import GroupExecutor, RuntimeEffectEnvelope, ToolCall
from lash_restate.testing import demo_tools

_TOOLS = demo_tools()


class _Flaky:
    async def execute(self) -> Any:
        raise ConnectionError("the backend is away")


class Raising:
    """The demo tools, but ``explodes`` raises `KeyError` where a resolver answers None for a miss,
    and ``explodes_on_retry`` does so from its second resolve on (by replay key)."""

    def __init__(self) -> None:
        self.resolved: dict[str, int] = {}

    def resolve(self, envelope: RuntimeEffectEnvelope) -> GroupExecutor | None:
        command = envelope.command
        if isinstance(command, ToolCall) and command.tool == "explodes":
            raise KeyError("explodes")
        if isinstance(command, ToolCall) and command.tool == "explodes_on_retry":
            seen = self.resolved[envelope.replay_key] = self.resolved.get(envelope.replay_key, 0) + 1
            if seen > 1:
                raise KeyError("explodes_on_retry")
            return _Flaky()
        return _TOOLS.resolve(envelope)


resolver = Raising()
