"""Each contract rule written once: the checks and refusals every host calls, with their exact messages.

The hosts call these instead of spelling the rule themselves, so the codes and
messages pinned here are the ones a caller sees on every tier.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from lash_restate.contract import (
    STRUCT_OPTIONS,
    AwaitCancelled,
    AwaitEvent,
    Cancelled,
    ChildUnroutable,
    Command,
    CursorOverrun,
    DispositionWidening,
    EffectGroupUnsupported,
    Err,
    GroupHandle,
    GroupKey,
    GroupMembership,
    GroupNotOpen,
    GroupShape,
    HandleMismatch,
    InvalidHandle,
    InvalidInput,
    LoserPolicy,
    Ok,
    RuntimeEffectEnvelope,
    Settlement,
    Sleep,
    ToolCall,
    check_await,
    check_child_count,
    check_close,
    describe_command,
    effective_disposition,
    error_from_wire,
    require_groups,
)

KEY = "scope:group:batch:0"
RTC, CANCEL = LoserPolicy.RUN_TO_COMPLETION, LoserPolicy.CANCEL


# -- the handle's child count -------------------------------------------------------------------


def test_a_matching_child_count_passes() -> None:
    check_child_count(3, 3, group_key=KEY)


def test_a_differing_child_count_is_a_handle_mismatch() -> None:
    with pytest.raises(HandleMismatch) as caught:
        check_child_count(2, 3, group_key=KEY)
    assert caught.value.code == "handle_mismatch"
    assert caught.value.message == "handle has 3 children, group has 2"
    assert caught.value.group_key == KEY


# -- close may only narrow ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "requested", "effective"),
    [
        (RTC, None, RTC),  # no request: the declared disposition applies
        (CANCEL, None, CANCEL),
        (RTC, RTC, RTC),
        (CANCEL, CANCEL, CANCEL),
        (RTC, CANCEL, CANCEL),  # narrowing
    ],
)
def test_the_effective_disposition_is_the_request_when_it_narrows(
    declared: LoserPolicy, requested: LoserPolicy | None, effective: LoserPolicy
) -> None:
    assert effective_disposition(declared, requested, group_key=KEY) is effective


def test_widening_cancel_back_to_run_to_completion_is_refused() -> None:
    with pytest.raises(DispositionWidening) as caught:
        effective_disposition(CANCEL, RTC, group_key=KEY)
    assert caught.value.code == "disposition_widening"
    assert caught.value.message == "group declared cancel; close may only narrow it"
    assert caught.value.group_key == KEY


# -- naming a child and refusing one nobody can run ---------------------------------------------


@pytest.mark.parametrize(
    ("command", "text"),
    [
        (ToolCall(tool="echo", args={"value": 1}), "tool 'echo'"),
        (AwaitEvent(name="paid"), "event 'paid'"),
        (Sleep(duration_ms=50), "sleep of 50 ms"),
    ],
)
def test_describe_command_names_the_command(command: Command, text: str) -> None:
    assert describe_command(command) == text


def test_the_unroutable_refusal_names_the_child_and_where_it_is() -> None:
    error = ChildUnroutable.no_executor("tool 'nope'", group_key=KEY, position=2, replay_key="r2")
    assert type(error) is ChildUnroutable
    assert error.code == "child_unroutable"
    assert error.message == "no executor is registered for tool 'nope'"
    assert (error.group_key, error.position, error.replay_key) == (KEY, 2, "r2")


def test_the_shared_refusals_carry_their_messages() -> None:
    assert GroupNotOpen.not_recorded(group_key=KEY).message == (
        "no such group is recorded (never opened, or closed)"
    )
    assert GroupNotOpen.closed_while_awaiting(group_key=KEY).message == "the group was closed while awaiting"
    cancelled = AwaitCancelled.at_rank(3, group_key=KEY)
    assert cancelled.message == "cancelled while awaiting rank 3"
    for error in (GroupNotOpen.not_recorded(group_key=KEY), cancelled):
        assert error.group_key == KEY


# -- the checks a host makes before asking its group anything ------------------------------------


def test_no_resolver_means_no_groups() -> None:
    with pytest.raises(EffectGroupUnsupported) as caught:
        require_groups(False, group_key=KEY)
    assert caught.value.message == "no GroupExecutors resolver is registered"
    assert caught.value.group_key == KEY
    require_groups(True, group_key=KEY)


def test_check_await_refuses_in_order_no_handle_no_groups_no_rank_left() -> None:
    resolver = True
    with pytest.raises(InvalidHandle):
        check_await(KEY, resolver)  # type: ignore[arg-type]
    with pytest.raises(EffectGroupUnsupported):
        check_await(GroupHandle(KEY, 2, 2), False)  # groups are refused before the cursor is looked at
    with pytest.raises(CursorOverrun) as caught:
        check_await(GroupHandle(KEY, 2, 2), resolver)
    assert caught.value.message == "all 2 settlements were already consumed"
    check_await(GroupHandle(KEY, 2, 1), resolver)


def test_check_close_returns_the_requested_disposition_typed() -> None:
    resolver = True
    handle = GroupHandle(KEY, 2, 2)  # an exhausted cursor may still close
    assert check_close(handle, None, resolver) is None
    assert check_close(handle, "cancel", resolver) is CANCEL  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        check_close(handle, "sometimes", resolver)  # type: ignore[arg-type]
    with pytest.raises(InvalidHandle):
        check_close(None, None, resolver)  # type: ignore[arg-type]
    with pytest.raises(EffectGroupUnsupported):
        check_close(handle, None, False)


# -- one JSON body for an error -----------------------------------------------------------------


def test_the_wire_body_has_code_message_and_only_the_locations_set() -> None:
    located = ChildUnroutable("m", group_key=KEY, position=0, replay_key="r0")
    assert located.wire_body() == {
        "code": "child_unroutable",
        "message": "m",
        "group_key": KEY,
        "position": 0,
        "replay_key": "r0",
    }
    assert GroupNotOpen("gone").wire_body() == {"code": "group_not_open", "message": "gone"}


def test_the_wire_line_carries_the_wire_body() -> None:
    error = HandleMismatch("handle has 3 children, group has 2", group_key=KEY)
    line = error.to_wire()
    assert line == "lash-error:" + json.dumps(error.wire_body(), sort_keys=True, separators=(",", ":"))
    assert line == (
        'lash-error:{"code":"handle_mismatch","group_key":"scope:group:batch:0",'
        '"message":"handle has 3 children, group has 2"}'
    )
    back = error_from_wire(line)
    assert isinstance(back, HandleMismatch)
    assert back.wire_body() == error.wire_body()


# -- one struct configuration -------------------------------------------------------------------


def test_struct_options_are_the_three_and_read_only() -> None:
    assert dict(STRUCT_OPTIONS) == {"frozen": True, "kw_only": True, "forbid_unknown_fields": True}
    with pytest.raises(TypeError):
        STRUCT_OPTIONS["frozen"] = False  # type: ignore[index]


_RECORDS: list[type[msgspec.Struct]] = [
    Ok,
    Err,
    Cancelled,
    Settlement,
    ToolCall,
    Sleep,
    AwaitEvent,
    GroupMembership,
    RuntimeEffectEnvelope,
    GroupKey,
    GroupShape,
]


@pytest.mark.parametrize("record", _RECORDS, ids=lambda r: r.__name__)
def test_every_record_is_built_with_the_struct_options(record: type[msgspec.Struct]) -> None:
    config = record.__struct_config__
    assert config.frozen
    assert config.forbid_unknown_fields
    # kw_only has no config flag: a positional argument is what it refuses.
    width = len(msgspec.structs.fields(record))
    if width:
        with pytest.raises(TypeError, match="Extra positional arguments"):
            record(*[None] * width)


def test_only_the_envelope_family_omits_defaults() -> None:
    # ADR, "ungrouped effects stay hash-identical": absent membership is omitted, not null.
    envelope_family: list[type[msgspec.Struct]] = [
        ToolCall,
        Sleep,
        AwaitEvent,
        GroupMembership,
        RuntimeEffectEnvelope,
    ]
    assert all(record.__struct_config__.omit_defaults for record in envelope_family)
    others: list[type[msgspec.Struct]] = [Ok, Err, Settlement, GroupShape]
    assert not any(record.__struct_config__.omit_defaults for record in others)
