"""Loser dispositions as every tier shows them (ADR, "Loser disposition is declared at open"): the
`dispositions` scenarios of `lash_restate.testing.conformance`, on every tier through the suite's
public entry point, and what every host receives at open, recorded on the reference host."""

from __future__ import annotations

from lash_restate.combinators import all_, all_settled, any_, race, signal_or_deadline
from lash_restate.contract import (
    GroupHandle,
    LoserPolicy,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ToolCall,
)
from lash_restate.memory import MemoryHost
from lash_restate.testing import demo_tools
from lash_restate.testing.conformance import SCENARIOS, pytest_tests

globals().update(pytest_tests(s for s in SCENARIOS if s.topic == "dispositions"))


async def test_the_combinators_declare_the_adrs_dispositions() -> None:
    """ADR: `all` and `allSettled` declare `RunToCompletion`; `race` and `any` default to it (ECMA-262)
    and may declare `Cancel`; a signal/deadline `select` declares `Cancel`.

    Recorded where every host receives it: the group handed to `open_effect_group`.
    """
    declared: dict[str, tuple[str, LoserPolicy]] = {}

    class Recording(MemoryHost):
        async def open_effect_group(self, group: RuntimeEffectGroup) -> GroupHandle:
            declared[str(group.key).split(":")[2]] = (group.wake.value, group.disposition)
            return await super().open_effect_group(group)

    def arms(batch: str) -> list[RuntimeEffectEnvelope]:
        return [RuntimeEffectEnvelope(command=ToolCall(tool="echo", args={"value": batch}), replay_key=batch)]

    host = Recording(resolver=demo_tools())
    try:
        await all_(host, "s:group:all:0", arms("all"))
        await all_(host, "s:group:all_fail_fast:0", arms("all_fail_fast"), on_reject=LoserPolicy.CANCEL)
        await all_settled(host, "s:group:all_settled:0", arms("all_settled"))
        await race(host, "s:group:race:0", arms("race"))
        await any_(host, "s:group:any:0", arms("any"))
        await race(host, "s:group:race_cancel:0", arms("race_cancel"), losers=LoserPolicy.CANCEL)
        await any_(host, "s:group:any_cancel:0", arms("any_cancel"), losers=LoserPolicy.CANCEL)
        await signal_or_deadline(host, "s:group:select:0", event="e", deadline_ms=0, replay_key_prefix="sel")
    finally:
        await host.aclose()
    rtc, cancel = LoserPolicy.RUN_TO_COMPLETION, LoserPolicy.CANCEL
    assert declared == {
        "all": ("all", rtc),
        "all_fail_fast": ("all", rtc),  # fail fast narrows at the close, never at the open
        "all_settled": ("all", rtc),
        "race": ("first", rtc),
        "any": ("first_success", rtc),
        "race_cancel": ("first", cancel),
        "any_cancel": ("first_success", cancel),
        "select": ("first", cancel),
    }
