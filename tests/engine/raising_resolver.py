"""A resolver with a bug of its own: resolving the tool ``explodes`` raises (``LASH_RESOLVER``)."""

from __future__ import annotations

from lash_restate.contract import GroupExecutor, RuntimeEffectEnvelope, ToolCall
from lash_restate.testing import demo_tools

_TOOLS = demo_tools()


class Raising:
    """The demo tools, but ``explodes`` raises `KeyError` where a resolver answers None for a miss."""

    def resolve(self, envelope: RuntimeEffectEnvelope) -> GroupExecutor | None:
        if isinstance(envelope.command, ToolCall) and envelope.command.tool == "explodes":
            raise KeyError("explodes")
        return _TOOLS.resolve(envelope)


resolver = Raising()
