"""Every refusal of the contract with the code, message and location a caller sees.

An error is the caller's whole explanation of why nothing was recorded, so its
message and the group, position and replay key it names are part of the
contract: the wire body pinned here is what crosses handlers and what the turn
driver answers with (`LashError.wire_body`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lash_restate.contract import (
    AwaitEvent,
    EffectGroupDefaults,
    GroupHandle,
    GroupKey,
    GroupMembership,
    GroupNotOpen,
    GroupWakePolicy,
    LashError,
    LoserPolicy,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    Sleep,
    ToolCall,
    ToolFailure,
    decode_envelope,
    require_disposition,
    require_envelope,
    require_group,
    require_handle,
    require_ungrouped,
)

KEY = "scope:group:batch:0"
ALL, RTC = GroupWakePolicy.ALL, LoserPolicy.RUN_TO_COMPLETION
FORMAT = "'{scope_id}:group:{batch_id}:{occurrence}'"


def _itself() -> list[object]:
    value: list[object] = []
    value.append(value)
    return value


SLEEP_RANGE = "sleep duration_ms must be a non-negative integer (milliseconds)"


def wait(name: str, membership: GroupMembership | None = None) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(command=AwaitEvent(name=name), replay_key=f"r-{name}", membership=membership)


def group(*children: Any, key: Any = KEY, wake: Any = ALL, disposition: Any = RTC) -> RuntimeEffectGroup:
    return RuntimeEffectGroup(key, list(children), wake=wake, disposition=disposition)


def member(**changes: Any) -> GroupMembership:
    fields: dict[str, Any] = {"group_key": KEY, "position": 0, "wake": ALL, "disposition": RTC}
    return GroupMembership(**(fields | changes))


def body(code: str, message: str, **where: Any) -> dict[str, Any]:
    return {"code": code, "message": message, **where}


REFUSALS: list[tuple[str, Callable[[], object], dict[str, Any]]] = [
    # -- group keys
    (
        "empty scope",
        lambda: GroupKey(scope_id="", batch_id="b", occurrence=0),
        body("invalid_group_key", "scope_id must be non-empty printable text"),
    ),
    (
        "control character in scope",
        lambda: GroupKey(scope_id="s\x1f", batch_id="b", occurrence=0),
        body("invalid_group_key", "scope_id must be non-empty printable text"),
    ),
    (
        "colon in batch",
        lambda: GroupKey(scope_id="s", batch_id="a:b", occurrence=0),
        body("invalid_group_key", "batch_id must be non-empty printable text without ':'"),
    ),
    (
        "control character in batch",
        lambda: GroupKey(scope_id="s", batch_id="b\x1f", occurrence=0),
        body("invalid_group_key", "batch_id must be non-empty printable text without ':'"),
    ),
    (
        "negative occurrence",
        lambda: GroupKey(scope_id="s", batch_id="b", occurrence=-1),
        body("invalid_group_key", "occurrence must be a non-negative integer"),
    ),
    (
        "boolean occurrence",
        lambda: GroupKey(scope_id="s", batch_id="b", occurrence=True),
        body("invalid_group_key", "occurrence must be a non-negative integer"),
    ),
    (
        "text occurrence",
        lambda: GroupKey(scope_id="s", batch_id="b", occurrence="0"),  # type: ignore[arg-type]
        body("invalid_group_key", "occurrence must be a non-negative integer"),
    ),
    (
        "a scope that is no text",
        lambda: GroupKey(scope_id=5, batch_id="b", occurrence=0),  # type: ignore[arg-type]
        body("invalid_group_key", "scope_id and batch_id must be text"),
    ),
    (
        # Python's int() refuses so long a digit string with a plain ValueError, and str() so large an int.
        "an occurrence of 5000 digits, parsed",
        lambda: GroupKey.parse("s:group:b:" + "9" * 5000),
        body("invalid_group_key", "group key must be at most 512 characters"),
    ),
    (
        "an occurrence of 5000 digits",
        lambda: GroupKey(scope_id="s", batch_id="b", occurrence=10**5000),
        body("invalid_group_key", "group key must be at most 512 characters"),
    ),
    (
        "key of 513 characters",
        lambda: GroupKey(scope_id="s" * 503, batch_id="b", occurrence=0),  # 503 + len(":group:b:0")
        body("invalid_group_key", "group key must be at most 512 characters"),
    ),
    (
        "no group separator",
        lambda: GroupKey.parse("b:0"),
        body("invalid_group_key", f"'b:0' is not {FORMAT}"),
    ),
    (
        "a colon after the occurrence",
        lambda: GroupKey.parse("s:group:b:1:2"),
        body("invalid_group_key", f"'s:group:b:1:2' is not {FORMAT}"),
    ),
    (
        "leading zero",
        lambda: GroupKey.parse("s:group:b:01"),
        body("invalid_group_key", "'s:group:b:01': occurrence must not have leading zeros"),
    ),
    # -- the group's constructor
    (
        "key neither a GroupKey nor text",
        lambda: group(wait("a"), key=7),
        body("invalid_group_key", "key must be a GroupKey or its string form"),
    ),
    (
        "unknown wake rule",
        lambda: group(wait("a"), wake="fourth"),
        body("invalid_envelope", "wake must be one of first, first_success, all; got 'fourth'"),
    ),
    (
        "unknown disposition",
        lambda: group(wait("a"), disposition="sometimes"),
        body("invalid_envelope", "disposition must be one of run_to_completion, cancel; got 'sometimes'"),
    ),
    (
        "a child that is no envelope",
        lambda: group(wait("a"), "b"),
        body("invalid_envelope", "child 1 is a str, not an envelope"),
    ),
    (
        "repeated replay key",
        lambda: group(wait("a"), wait("b"), wait("a")),
        body(
            "duplicate_replay_key",
            "child 2 repeats the replay key of child 0",
            group_key=KEY,
            position=2,
            replay_key="r-a",
        ),
    ),
    (
        "no children",
        lambda: group(),
        body("empty_group", "a group needs at least one child", group_key=KEY),
    ),
    (
        "child of another group",
        lambda: group(wait("a", member(group_key="scope:group:batch:1"))),
        body(
            "foreign_group_key",
            "child claims group 'scope:group:batch:1'",
            group_key=KEY,
            position=0,
            replay_key="r-a",
        ),
    ),
    (
        "child at another position",
        lambda: group(wait("a", member(position=1))),
        body(
            "permuted_position",
            "child claims position 1 at index 0",
            group_key=KEY,
            position=0,
            replay_key="r-a",
        ),
    ),
    (
        "child with another wake rule",
        lambda: group(wait("a", member(wake=GroupWakePolicy.FIRST_SUCCESS))),
        body(
            "wake_rule_drift",
            "child claims wake first_success, group is all",
            group_key=KEY,
            position=0,
            replay_key="r-a",
        ),
    ),
    (
        "child with another disposition",
        lambda: group(wait("a", member(disposition=LoserPolicy.CANCEL))),
        body(
            "disposition_drift",
            "child claims disposition cancel, group is run_to_completion",
            group_key=KEY,
            position=0,
            replay_key="r-a",
        ),
    ),
    # -- a group's wire form
    (
        "wire group not an object",
        lambda: RuntimeEffectGroup.from_wire([]),
        body("invalid_envelope", "a group must be a JSON object"),
    ),
    (
        "wire group with unknown fields",
        lambda: RuntimeEffectGroup.from_wire({"key": KEY, "children": [], "zeta": 1, "alpha": 2}),
        body("invalid_envelope", "unknown group fields: ['alpha', 'zeta']"),
    ),
    (
        "wire children not a list",
        lambda: RuntimeEffectGroup.from_wire({"key": KEY, "children": {}}),
        body("invalid_envelope", "group children must be a list"),
    ),
    (
        "wire key not text",
        lambda: RuntimeEffectGroup.from_wire({"key": 7, "children": []}),
        body("invalid_group_key", "group key must be a string"),
    ),
    (
        "wire wake rule unknown",
        lambda: RuntimeEffectGroup.from_wire(
            {"key": KEY, "children": [], "wake": "fourth", "disposition": "cancel"}
        ),
        body("invalid_envelope", "wake must be one of first, first_success, all; got 'fourth'"),
    ),
    (
        "wire disposition missing",
        lambda: RuntimeEffectGroup.from_wire({"key": KEY, "children": [], "wake": "all"}),
        body("invalid_envelope", "disposition must be one of run_to_completion, cancel; got None"),
    ),
    # -- the reopen fence
    (
        "reopen with another child count",
        lambda: group(wait("a"), wait("b")).shape().fence_reopen(group(wait("a")).shape(), KEY),
        body("shape_mismatch", "recorded child count is 2, reopen passed 1", group_key=KEY),
    ),
    (
        "reopen with another wake rule",
        lambda: group(wait("a")).shape().fence_reopen(group(wait("a"), wake="first").shape(), KEY),
        body("shape_mismatch", "recorded wake rule is all, reopen passed first", group_key=KEY),
    ),
    (
        "reopen with another disposition",
        lambda: group(wait("a")).shape().fence_reopen(group(wait("a"), disposition="cancel").shape(), KEY),
        body(
            "shape_mismatch", "recorded disposition is run_to_completion, reopen passed cancel", group_key=KEY
        ),
    ),
    (
        "reopen with another child",
        lambda: group(wait("a"), wait("b")).shape().fence_reopen(group(wait("a"), wait("c")).shape(), KEY),
        body(
            "replay_mismatch",
            "child envelope differs from the recorded one",
            group_key=KEY,
            position=1,
            replay_key="r-c",
        ),
    ),
    # -- envelopes and commands
    (
        "empty tool name",
        lambda: ToolCall(tool=""),
        body("invalid_envelope", "tool name must be 1..512 characters"),
    ),
    (
        "tool name of 513 characters",
        lambda: ToolCall(tool="t" * 513),
        body("invalid_envelope", "tool name must be 1..512 characters"),
    ),
    (
        "NUL in a tool name",
        lambda: ToolCall(tool="a\x00b"),
        body("invalid_envelope", "tool name contains a control character"),
    ),
    (
        "DEL in a tool name",
        lambda: ToolCall(tool="a\x7fb"),
        body("invalid_envelope", "tool name contains a control character"),
    ),
    (
        "empty event name",
        lambda: AwaitEvent(name=""),
        body("invalid_envelope", "event name must be 1..512 characters"),
    ),
    (
        "control character in a replay key",
        lambda: RuntimeEffectEnvelope(command=AwaitEvent(name="e"), replay_key="r\n"),
        body("invalid_envelope", "replay key contains a control character"),
    ),
    (
        "non-finite float in args",
        lambda: ToolCall(tool="t", args={"x": float("nan")}),
        body("invalid_envelope", "tool args holds a non-finite float, which JSON cannot carry"),
    ),
    (
        "non-finite float inside a list",
        lambda: ToolCall(tool="t", args=[1, [float("inf")]]),
        body("invalid_envelope", "tool args holds a non-finite float, which JSON cannot carry"),
    ),
    (
        "non-text object key inside a list",
        lambda: ToolCall(tool="t", args=[{1: "x"}]),
        body("invalid_envelope", "tool args has a non-string object key 1"),
    ),
    (
        "a set in args",
        lambda: ToolCall(tool="t", args={"s": {1}}),
        body("invalid_envelope", "tool args holds a set, which is not a JSON value"),
    ),
    (
        "args that hold themselves",
        lambda: ToolCall(tool="t", args=_itself()),
        body("invalid_envelope", "tool args holds itself, or is nested too deeply to be JSON"),
    ),
    (
        "an envelope's text with a lone surrogate",
        lambda: decode_envelope('{"replay_key": "\ud800"}'),
        body("invalid_envelope", "envelope is not text: it holds a lone surrogate (\\ud800-\\udfff)"),
    ),
    (
        "negative sleep",
        lambda: Sleep(duration_ms=-1),
        body(
            "invalid_envelope",
            SLEEP_RANGE + "; got -1",
        ),
    ),
    (
        # A float is refused where its JSON form is read (the Restate host's open): refused here too.
        "fractional sleep",
        lambda: Sleep(duration_ms=2.0),  # type: ignore[arg-type]
        body(
            "invalid_envelope",
            SLEEP_RANGE + "; got 2.0",
        ),
    ),
    (
        "sleep of a string",
        lambda: Sleep(duration_ms="5"),  # type: ignore[arg-type]
        body(
            "invalid_envelope",
            SLEEP_RANGE + "; got '5'",
        ),
    ),
    (
        "negative membership position",
        lambda: wait("a", member(position=-1)),
        body("invalid_envelope", "membership position must be non-negative", replay_key="r-a"),
    ),
    # -- handles
    (
        "a saved handle's text with a lone surrogate",
        lambda: GroupHandle.from_bytes('{"group_key": "\ud800"}'),
        body("invalid_handle", "malformed handle: it holds a lone surrogate (\\ud800-\\udfff)"),
    ),
    (
        "handle of an invalid key",
        lambda: GroupHandle("bad", 1, 0),
        body("invalid_handle", f"handle names an invalid group key: 'bad' is not {FORMAT}"),
    ),
    (
        "handle of no children",
        lambda: GroupHandle(KEY, 0, 0),
        body("invalid_handle", "handle child_count must be a positive integer", group_key=KEY),
    ),
    (
        "handle with a boolean child count",
        lambda: GroupHandle(KEY, True, 0),
        body("invalid_handle", "handle child_count must be a positive integer", group_key=KEY),
    ),
    (
        "handle consumed past its children",
        lambda: GroupHandle(KEY, 2, 3),
        body("invalid_handle", "handle consumed=3 is outside 0..2", group_key=KEY),
    ),
    (
        "handle with a boolean consumed",
        lambda: GroupHandle(KEY, 2, True),
        body("invalid_handle", "handle consumed=True is outside 0..2", group_key=KEY),
    ),
    (
        "advancing an exhausted handle",
        lambda: GroupHandle(KEY, 2, 2).advance(),
        body("cursor_overrun", "all 2 settlements were already consumed", group_key=KEY),
    ),
    # -- arguments a host checks at run time
    (
        "not a group",
        lambda: require_group({"key": KEY}),
        body("invalid_input", "expected a RuntimeEffectGroup, got dict"),
    ),
    (
        "not an envelope",
        lambda: require_envelope("x"),
        body("invalid_envelope", "expected a RuntimeEffectEnvelope, got str"),
    ),
    (
        "not a handle",
        lambda: require_handle(KEY),
        body("invalid_handle", "expected a GroupHandle, got str"),
    ),
    (
        "unknown close disposition",
        lambda: require_disposition("sometimes"),
        body("invalid_input", "disposition must be one of run_to_completion, cancel; got 'sometimes'"),
    ),
    (
        "grouped envelope on the ungrouped path",
        lambda: require_ungrouped(group(wait("a"), wait("b")).children[1]),
        body(
            "membership_unsupported",
            "execute_effect has no slot for group membership; open a group instead",
            group_key=KEY,
            position=1,
            replay_key="r-b",
        ),
    ),
    (
        "closed while awaiting",
        lambda: GroupNotOpen.closed_while_awaiting(group_key=KEY),
        body("group_not_open", "the group was closed while awaiting", group_key=KEY),
    ),
]


@pytest.mark.parametrize(("make", "expected"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_each_refusal_carries_its_code_message_and_location(
    make: Callable[[], object], expected: dict[str, Any]
) -> None:
    error: LashError
    try:
        made = make()
    except LashError as raised:
        error = raised
    else:
        assert isinstance(made, LashError), f"nothing was refused: {made!r}"
        error = made
    assert error.wire_body() == expected
    assert error.code == expected["code"]


@pytest.mark.parametrize(
    ("raw", "prefix"),
    [
        (b"not json", "envelope is not JSON: "),
        (b"[]", "malformed envelope: "),
    ],
)
def test_an_undecodable_envelope_says_whether_it_was_json(raw: bytes, prefix: str) -> None:
    with pytest.raises(LashError) as caught:
        decode_envelope(raw)
    assert caught.value.message.startswith(prefix)
    assert len(caught.value.message) > len(prefix)  # the decoder's reason follows


def test_an_undecodable_handle_says_why() -> None:
    with pytest.raises(LashError) as caught:
        GroupHandle.from_bytes(b"nope")
    assert caught.value.code == "invalid_handle"
    assert caught.value.message.startswith("malformed handle: ")


# -- what is accepted at the edges of those rules ------------------------------------------------


def test_keys_at_the_length_limit_and_with_spaces_are_accepted() -> None:
    longest = GroupKey(scope_id="s" * 502, batch_id="b", occurrence=0)
    assert len(str(longest)) == 512
    assert GroupKey.parse(str(longest)) == longest
    assert ToolCall(tool="t" * 512).tool == "t" * 512
    # Printable includes the space: only control characters are refused.
    spaced = GroupKey(scope_id="my scope", batch_id="batch one", occurrence=2)
    assert GroupKey.parse(str(spaced)) == spaced
    assert ToolCall(tool="look up").tool == "look up"
    assert RuntimeEffectEnvelope(command=AwaitEvent(name="paid order"), replay_key="r 1").replay_key == "r 1"


def test_a_scope_may_itself_contain_the_group_separator() -> None:
    # A scope id is the caller's text and may hold colons, even ':group:'; parse splits at the last
    # separator, so parse stays the inverse of str for every key the constructor accepts.
    key = GroupKey(scope_id="outer:group:b:0", batch_id="inner", occurrence=1)
    assert str(key) == "outer:group:b:0:group:inner:1"
    assert GroupKey.parse(str(key)) == key


def test_a_group_takes_a_group_key_as_well_as_its_text() -> None:
    key = GroupKey(scope_id="scope", batch_id="batch", occurrence=0)
    assert group(wait("a"), key=key).key == group(wait("a")).key == key
    assert repr(group(wait("a"), wait("b"), disposition="cancel")) == (
        "RuntimeEffectGroup('scope:group:batch:0', 2 children, wake=all, disposition=cancel)"
    )


# -- how errors read ------------------------------------------------------------------------------


def test_an_error_reads_as_code_message_and_only_the_locations_it_has() -> None:
    located = LashError("no runner", group_key=KEY, position=1, replay_key="k")
    assert str(located) == f"[invalid_input] no runner (group_key='{KEY}', position=1, replay_key='k')"
    assert str(GroupNotOpen("gone")) == "[group_not_open] gone"
    assert (
        repr(GroupNotOpen("gone", group_key=KEY)) == "GroupNotOpen('gone')"
    )  # as tracebacks and logs show it
    assert str(ToolFailure("card declined", code="E42")) == "card declined"


async def test_an_out_of_tree_controller_names_itself_and_the_group_it_refuses() -> None:
    class Legacy(EffectGroupDefaults):
        pass

    g = group(wait("a"))
    handle = GroupHandle.opened(g)
    for call in (
        Legacy().open_effect_group(g),
        Legacy().await_next_settlement(handle),
        Legacy().close_effect_group(handle),
    ):
        with pytest.raises(LashError) as caught:
            await call
        assert caught.value.wire_body() == body(
            "effect_group_unsupported", "Legacy does not implement effect groups", group_key=KEY
        )
