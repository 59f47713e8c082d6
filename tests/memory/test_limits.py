"""Message-size limits on the reference host, which refuses and settles exactly as the Restate host does.

A child that would not fit Restate's open message is refused at open, typed, recording nothing; an
outcome past the limit for one message settles ``Err(code="too_large")``; both at the limit and one
byte past it. (`tests/engine/test_sizes.py` runs the same edges against a real server.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lash_restate.contract import (
    BODY_LIMIT,
    OUTCOME_LIMIT,
    Call,
    Err,
    GroupWakePolicy,
    LoserPolicy,
    Ok,
    PayloadTooLarge,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ToolCall,
    ToolFailure,
    check_open_size,
    ok_size,
)
from lash_restate.memory import MemoryHost, first_of
from lash_restate.testing import demo_calls, demo_tools
from lash_restate.tools import ToolRegistry
from tests.memory.builders import KEY, group

MiB = 1024 * 1024


def _host() -> MemoryHost:
    return MemoryHost(resolver=first_of(demo_tools(), demo_calls()))


def _tool(position: int, args: Any) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(command=ToolCall(tool="echo_size", args=args), replay_key=f"r{position}")


def _call(position: int, arg: Any) -> RuntimeEffectEnvelope:
    command = Call(service="DemoCalls", handler="echo_size", arg=arg)
    return RuntimeEffectEnvelope(command=command, replay_key=f"r{position}")


Child = Callable[[int, Any], RuntimeEffectEnvelope]


def largest_argument(child: Child) -> int:
    """The longest string argument a one-child group of ``child`` may carry (by bisection)."""
    low, high = 0, BODY_LIMIT
    while low < high:
        mid = (low + high + 1) // 2
        try:
            check_open_size(group(child(0, "x" * mid)))
            low = mid
        except PayloadTooLarge:
            high = mid - 1
    return low


@pytest.mark.parametrize("child", [_tool, _call], ids=["tool", "call"])
async def test_a_child_at_the_limit_opens_and_one_byte_past_it_is_refused_naming_it(child: Child) -> None:
    largest = largest_argument(child)
    # The open carries each child base64-encoded (format 1): about three quarters of the limit.
    assert 0.74 * BODY_LIMIT < largest < 0.75 * BODY_LIMIT
    host = _host()
    fits = group(child(0, "x" * largest))
    handle = await host.open_effect_group(fits)
    assert (await host.await_next_settlement(handle)).outcome == Ok(value=largest)
    await host.close_effect_group(handle)

    past = group(child(0, "small"), child(1, "x" * (largest + 1)))
    refusals = []
    for _ in range(2):  # nothing was recorded: a second identical open is refused identically
        with pytest.raises(PayloadTooLarge) as refused:
            await host.open_effect_group(past)
        assert host.store.groups == {}
        refusals.append(str(refused.value))
    error = refused.value
    assert (error.code, error.position, error.replay_key, error.group_key) == ("too_large", 1, "r1", KEY)
    assert f"limit of {BODY_LIMIT} bytes" in error.message and "child 1 is" in error.message
    assert refusals[0] == refusals[1]


async def test_children_that_fit_alone_but_not_together_are_refused_naming_the_first_past_it() -> None:
    third = 8 * MiB  # 10.7 MiB each in one open: two fit, the third crosses the limit
    wide = group(*(_call(p, "x" * third) for p in range(4)))
    host = _host()
    with pytest.raises(PayloadTooLarge) as refused:
        await host.open_effect_group(wide)
    # In parts, as raw JSON (8 MiB each), three fit one message and the fourth is the first past it.
    assert (refused.value.position, refused.value.replay_key) == (3, "r3")
    assert (
        "the open request is" in refused.value.message
        and "child 2 is the first past it" in refused.value.message
    )
    assert "opened in parts of 256 children, the part from child 0" in refused.value.message
    assert f"limit of {BODY_LIMIT} bytes" in refused.value.message
    assert host.store.groups == {}
    # Each alone is fine: the refusal is the sum's.
    check_open_size(group(_call(0, "x" * third)))


def _blob_tool(position: int, size: int) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(
        command=ToolCall(tool="blob", args={"size": size}), replay_key=f"r{position}"
    )


def _blob_call(position: int, size: int) -> RuntimeEffectEnvelope:
    command = Call(service="DemoCalls", handler="blob", arg={"size": size})
    return RuntimeEffectEnvelope(command=command, replay_key=f"r{position}")


@pytest.mark.parametrize("child", [_blob_tool, _blob_call], ids=["tool", "call"])
async def test_an_outcome_at_the_limit_is_served_and_one_byte_past_it_settles_too_large(
    child: Child,
) -> None:
    at = OUTCOME_LIMIT - ok_size(2)  # a string of `at` characters encodes to OUTCOME_LIMIT as an Ok
    host = _host()
    handle = await host.open_effect_group(group(child(0, at), child(1, at + 1)))
    outcomes = {}
    for _ in range(2):
        settlement = await host.await_next_settlement(handle)
        outcomes[settlement.position] = settlement.outcome
    await host.close_effect_group(handle)
    assert outcomes[0] == Ok(value="x" * at)
    past = outcomes[1]
    assert isinstance(past, Err) and past.code == "too_large"
    assert f"result of {OUTCOME_LIMIT + 1} bytes" in past.message
    assert f"limit of {OUTCOME_LIMIT} bytes" in past.message


async def test_a_rejection_whose_message_is_past_the_limit_settles_too_large() -> None:
    async def shout(args: Any) -> Any:
        raise ToolFailure("x" * OUTCOME_LIMIT, code="declined")

    host = MemoryHost(resolver=ToolRegistry({"shout": shout}))
    handle = await host.open_effect_group(
        group(RuntimeEffectEnvelope(command=ToolCall(tool="shout"), replay_key="r0"))
    )
    outcome = (await host.await_next_settlement(handle)).outcome
    assert isinstance(outcome, Err) and outcome.code == "too_large"


async def test_a_bounded_open_too_large_for_one_message_is_refused_though_the_group_is_recorded() -> None:
    """A group too large for one message opens in parts; an open of it again with `max_in_flight`
    (which no open in parts carries) is refused as on Restate, whose caller cannot know the group is
    recorded: judged by the call, not by the store. A resume's reopen keeps the group's own bound."""
    children = [_call(p, "x" * 90_000) for p in range(300)]  # each part of 256 fits; all 300 do not
    host = _host()
    recorded = await host.open_effect_group(group(*children))
    bounded = RuntimeEffectGroup(
        KEY, children, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.RUN_TO_COMPLETION, max_in_flight=2
    )
    with pytest.raises(PayloadTooLarge, match="a group with max_in_flight is opened in one message"):
        await host.open_effect_group(bounded)
    assert await host.reopen_effect_group(bounded) == recorded
    await host.aclose()
