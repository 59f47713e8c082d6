"""Envelopes and groups for the reference-host tests, under one group key."""

from __future__ import annotations

from typing import Any

from lash_restate.contract import (
    AwaitEvent,
    GroupWakePolicy,
    LoserPolicy,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ToolCall,
)

KEY = "scope:group:batch:0"


def tool(name: str, replay_key: str, args: Any = None) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(command=ToolCall(tool=name, args=args), replay_key=replay_key)


def wait(name: str, replay_key: str) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(command=AwaitEvent(name=name), replay_key=replay_key)


def group(
    *children: RuntimeEffectEnvelope,
    disposition: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    wake: GroupWakePolicy = GroupWakePolicy.ALL,
) -> RuntimeEffectGroup:
    return RuntimeEffectGroup(KEY, children, wake=wake, disposition=disposition)
