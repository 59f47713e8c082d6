"""Property: for any settlement timeline, ranks follow settlement order and each combinator's
verdict is the one ECMA-262 gives (the reference host is the conformance definition)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lash_restate.combinators import Combinator, RejectedResult, run_combinator
from lash_restate.contract import (
    AwaitEvent,
    Err,
    GroupHandle,
    LoserPolicy,
    Ok,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    Settlement,
)
from lash_restate.memory import MemoryHost
from lash_restate.testing import demo_tools


def oracle(kind: Combinator, fulfils: list[bool], order: list[int]) -> tuple[str, Any]:
    """ECMA-262 over a settlement order: (status, value or the deciding position / errors)."""
    n = len(fulfils)
    if kind is Combinator.ALL:
        for p in order:
            if not fulfils[p]:
                return "rejected", p
        return "fulfilled", [f"v{p}" for p in range(n)]
    if kind is Combinator.ALL_SETTLED:
        return "fulfilled", [fulfils[p] for p in range(n)]
    if kind is Combinator.RACE:
        first = order[0]
        return ("fulfilled", f"v{first}") if fulfils[first] else ("rejected", first)
    for p in order:
        if fulfils[p]:
            return "fulfilled", f"v{p}"
    return "rejected", [f"e{p}" for p in range(n)]


@st.composite
def timelines(draw: st.DrawFn) -> tuple[Combinator, list[bool], list[int]]:
    fulfils = draw(st.lists(st.booleans(), min_size=1, max_size=6))
    order = draw(st.permutations(range(len(fulfils))))
    return draw(st.sampled_from(list(Combinator))), fulfils, order


@settings(max_examples=150, deadline=None, database=None)
@given(timelines())
def test_ranks_follow_settlement_order_and_verdicts_match_ecma(
    case: tuple[Combinator, list[bool], list[int]],
) -> None:
    kind, fulfils, order = case

    async def run() -> None:
        host = MemoryHost(resolver=demo_tools())
        key = "prop:group:b:0"
        children = [
            RuntimeEffectEnvelope(command=AwaitEvent(name=f"e{p}"), replay_key=f"r{p}")
            for p in range(len(fulfils))
        ]
        group = RuntimeEffectGroup(key, children, wake=kind.wake, disposition=LoserPolicy.RUN_TO_COMPLETION)
        handle = await host.open_effect_group(group)
        for p in order:  # settle one child at a time, in the drawn order
            if fulfils[p]:
                host.store.emit_event(f"e{p}", f"v{p}")
            else:
                host.store.reject_event(f"e{p}", f"e{p}")
            await host.join_child(f"r{p}")
        ranks = [
            await host.await_next_settlement(GroupHandle(key, len(fulfils), r)) for r in range(len(fulfils))
        ]
        assert [s.position for s in ranks] == order
        assert [s.rank for s in ranks] == list(range(1, len(fulfils) + 1))
        result = await run_combinator(host, kind, group, handle=handle)
        status, expected = oracle(kind, fulfils, order)
        assert result.status == status
        if result.status == "fulfilled" and kind is Combinator.ALL_SETTLED:
            assert [isinstance(o, Ok) for o in result.value] == expected
        elif result.status == "fulfilled":
            assert result.value == expected
        elif isinstance(expected, int):
            assert isinstance(result, RejectedResult) and isinstance(result.reason, Settlement)
            assert result.reason.position == expected
        else:
            assert isinstance(result, RejectedResult) and isinstance(result.reason, tuple)
            assert [e.message for e in result.reason if isinstance(e, Err)] == expected
        assert key not in host.store.groups  # the combinator closed it
        await host.aclose()

    asyncio.run(run())
