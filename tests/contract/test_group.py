"""The group's one constructor, group keys, and the handle (ADR, "copies agree by construction")."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from lash_restate.contract import (
    AwaitEvent,
    CursorOverrun,
    DispositionDrift,
    DuplicateReplayKey,
    EmptyGroup,
    ForeignGroupKey,
    GroupHandle,
    GroupKey,
    GroupMembership,
    GroupShape,
    GroupShapeError,
    GroupWakePolicy,
    InvalidEnvelope,
    InvalidGroupKey,
    InvalidHandle,
    InvalidInput,
    LoserPolicy,
    PermutedPosition,
    ReplayMismatch,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ShapeMismatch,
    WakeRuleDrift,
)

KEY = "scope:group:batch:0"
ALL, RTC = GroupWakePolicy.ALL, LoserPolicy.RUN_TO_COMPLETION


def child(name: str, membership: GroupMembership | None = None) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(command=AwaitEvent(name=name), replay_key=f"r-{name}", membership=membership)


def member(**changes: Any) -> GroupMembership:
    fields: dict[str, Any] = {
        "group_key": KEY,
        "position": 0,
        "wake": GroupWakePolicy.ALL,
        "disposition": LoserPolicy.RUN_TO_COMPLETION,
    }
    fields.update(changes)
    return GroupMembership(**fields)


def make(*children: RuntimeEffectEnvelope, **kw: Any) -> RuntimeEffectGroup:
    kw.setdefault("wake", GroupWakePolicy.ALL)
    kw.setdefault("disposition", LoserPolicy.RUN_TO_COMPLETION)
    return RuntimeEffectGroup(KEY, list(children), **kw)


def test_constructor_stamps_unstamped_children_from_their_index() -> None:
    group = make(child("a"), child("b"), wake=GroupWakePolicy.FIRST, disposition=LoserPolicy.CANCEL)
    assert [c.membership for c in group.children] == [
        GroupMembership(group_key=KEY, position=i, wake=GroupWakePolicy.FIRST, disposition=LoserPolicy.CANCEL)
        for i in range(2)
    ]


def test_constructor_keeps_children_already_stamped_in_agreement() -> None:
    stamped = child("a", member())
    assert make(stamped, child("b")).children[0] is stamped


@pytest.mark.parametrize(
    ("membership", "error", "code"),
    [
        (member(group_key="scope:group:batch:1"), ForeignGroupKey, "foreign_group_key"),
        (member(position=1), PermutedPosition, "permuted_position"),
        (member(wake=GroupWakePolicy.FIRST_SUCCESS), WakeRuleDrift, "wake_rule_drift"),
        (member(disposition=LoserPolicy.CANCEL), DispositionDrift, "disposition_drift"),
    ],
)
def test_constructor_refuses_disagreeing_children(
    membership: GroupMembership, error: type[GroupShapeError], code: str
) -> None:
    with pytest.raises(error) as caught:
        make(child("a", membership), child("b"))
    assert caught.value.code == code
    assert caught.value.position == 0
    assert caught.value.replay_key == "r-a"
    assert caught.value.group_key == KEY


def test_empty_and_duplicate_groups_are_refused() -> None:
    with pytest.raises(EmptyGroup):
        make()
    with pytest.raises(DuplicateReplayKey) as caught:
        make(child("a"), child("a"))
    assert caught.value.position == 1


def test_group_wire_round_trip_goes_through_the_constructor() -> None:
    group = make(child("a"), child("b"), wake=GroupWakePolicy.FIRST_SUCCESS)
    again = RuntimeEffectGroup.from_wire(group.to_wire())
    assert again.children == group.children
    assert again.shape() == group.shape()
    tampered = group.to_wire()
    tampered["children"][1]["membership"]["position"] = 0
    with pytest.raises(PermutedPosition):
        RuntimeEffectGroup.from_wire(tampered)


@pytest.mark.parametrize(
    "wire",
    [
        None,
        [],
        {"key": KEY, "wake": "all", "disposition": "cancel"},
        {"key": KEY, "wake": "fourth", "disposition": "cancel", "children": []},
        {"key": KEY, "wake": "all", "disposition": "sometimes", "children": []},
        {"key": 7, "wake": "all", "disposition": "cancel", "children": []},
        {"key": KEY, "wake": "all", "disposition": "cancel", "children": [], "extra": True},
    ],
)
def test_group_wire_refuses_bad_input(wire: Any) -> None:
    with pytest.raises((InvalidEnvelope, InvalidGroupKey)):
        RuntimeEffectGroup.from_wire(wire)


def test_group_key_format_and_parse() -> None:
    key = GroupKey(scope_id="sess:42", batch_id="9f00", occurrence=3)
    assert str(key) == "sess:42:group:9f00:3"
    assert GroupKey.parse(str(key)) == key
    # Every key reads back from its text: a batch id "group", a scope that holds the separator.
    for scope, batch in [("s", "group"), ("a:group:x", "b"), ("a:group:", "group")]:
        key = GroupKey(scope_id=scope, batch_id=batch, occurrence=0)
        assert GroupKey.parse(str(key)) == key


@pytest.mark.parametrize(
    "text",
    [
        "",
        "scope:group:b",
        "scope:group::0",
        ":group:b:0",
        "scope:group:b:-1",
        "scope:group:b:01",
        "s:grp:b:0",
        "scope:group:b:x",
        "scope:group:b:0:extra",
        "scope:group:b:٣",
        "x:group:y:z:0",
    ],
)
def test_invalid_group_keys_are_refused(text: str) -> None:
    with pytest.raises(InvalidGroupKey):
        GroupKey.parse(text)


def test_handle_takes_its_count_from_the_group_and_refuses_overrun() -> None:
    handle = GroupHandle.opened(make(child("a"), child("b")))
    assert (handle.child_count, handle.consumed, handle.next_rank) == (2, 0, 1)
    handle.advance()
    handle.advance()
    assert handle.exhausted
    with pytest.raises(CursorOverrun):
        handle.advance()
    assert handle.consumed == 2  # refused, not clamped


def test_handle_serialises_and_restores() -> None:
    handle = GroupHandle(KEY, 3, 1)
    assert GroupHandle.from_bytes(handle.to_bytes()) == handle
    copy = handle.copy()
    copy.advance()
    assert handle.consumed == 1


def test_handle_is_the_callers_mutable_cursor_so_it_is_not_hashable() -> None:
    handle, same = GroupHandle(KEY, 2, 0), GroupHandle(KEY, 2, 0)
    assert handle == same
    with pytest.raises(TypeError):
        hash(handle)
    with pytest.raises(TypeError):
        {handle: "a hash over consumed would change under the dict"}  # noqa: B018
    handle.advance()  # the host advances the caller's own handle (ADR: taken by &mut)
    assert handle != same


@pytest.mark.parametrize(
    "raw",
    [
        b"{}",
        b"nope",
        b'{"group_key":"bad","child_count":1,"consumed":0}',
        b'{"group_key":"s:group:b:0","child_count":0,"consumed":0}',
        b'{"group_key":"s:group:b:0","child_count":2,"consumed":3}',
        b'{"group_key":"s:group:b:0","child_count":2,"consumed":-1}',
        b'{"group_key":"s:group:b:0","child_count":2,"consumed":0,"x":1}',
    ],
)
def test_bad_handles_are_refused(raw: bytes) -> None:
    with pytest.raises(InvalidHandle):
        GroupHandle.from_bytes(raw)


def test_a_saved_handle_reads_back_from_whatever_bytes_like_a_store_returns() -> None:
    """A database driver may return the saved bytes as a `memoryview` (psycopg's `bytea`) or a
    `bytearray`: the first release read those, as every buffer, so every later one does."""
    saved = GroupHandle("s:group:b:0", 3, 1)
    raw = saved.to_bytes()
    for given in (raw, bytearray(raw), memoryview(raw), raw.decode()):
        assert GroupHandle.from_bytes(given) == saved


def test_reopen_fence_checks_shape_before_hashes() -> None:
    recorded = make(child("a"), child("b")).shape()
    with pytest.raises(ShapeMismatch):
        recorded.fence_reopen(make(child("a")).shape(), KEY)
    with pytest.raises(ShapeMismatch):
        recorded.fence_reopen(make(child("a"), child("b"), wake=GroupWakePolicy.FIRST).shape(), KEY)
    with pytest.raises(ReplayMismatch) as caught:
        recorded.fence_reopen(make(child("a"), child("c")).shape(), KEY)
    assert caught.value.position == 1
    recorded.fence_reopen(make(child("a"), child("b")).shape(), KEY)


def test_a_shape_whose_lists_disagree_with_its_count_is_refused_as_it_is_read() -> None:
    """A shape reaches a group in messages (an open in parts, an operator's resend): one that does
    not name one replay key and one hash per child is refused where it is decoded, never compared."""
    good = msgspec.to_builtins(make(child("a"), child("b")).shape())
    msgspec.json.decode(msgspec.json.encode(good), type=GroupShape)
    keys = [*good["replay_keys"], "x"]
    for bad in ({"hashes": good["hashes"][:1]}, {"replay_keys": keys}, {"child_count": 3}):
        with pytest.raises(msgspec.ValidationError, match="one replay key and one hash per child"):
            msgspec.json.decode(msgspec.json.encode({**good, **bad}), type=GroupShape)
    with pytest.raises(InvalidInput):
        GroupShape(child_count=0, wake=ALL, disposition=RTC, replay_keys=(), hashes=())


def test_no_host_recovers_group_identity_from_its_first_child() -> None:
    """ADR, "a group's copies are made to agree by construction": hosts never read identity from
    ``children[0]``; they read the group's own key and shape."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "src/lash_restate"
    offenders = [
        str(path.relative_to(package))
        for tier in ("memory", "engine", "testing")
        for path in (package / tier).rglob("*.py")
        if "children[0]" in path.read_text()
    ]
    assert offenders == []


@pytest.mark.parametrize("bound", [0, -1, True, 1.5, "2"])
def test_a_bound_that_is_not_a_positive_integer_is_refused_naming_it(bound: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        RuntimeEffectGroup(KEY, [child("a"), child("b")], wake=ALL, disposition=RTC, max_in_flight=bound)
    assert refused.value.wire_body() == {
        "code": "invalid_input",
        "message": f"max_in_flight must be a positive integer or None; got {bound!r}",
        "group_key": KEY,
    }


def test_a_bound_below_the_width_is_kept_and_one_at_or_past_it_is_no_bound() -> None:
    children = [child("a"), child("b"), child("c")]
    bounded = RuntimeEffectGroup(KEY, children, wake=ALL, disposition=RTC, max_in_flight=2)
    assert bounded.max_in_flight == 2
    assert "max_in_flight=2" in repr(bounded)
    assert RuntimeEffectGroup.from_wire(bounded.to_wire()).max_in_flight == 2
    for bound in (3, 4, None):
        group = RuntimeEffectGroup(KEY, children, wake=ALL, disposition=RTC, max_in_flight=bound)
        assert group.max_in_flight is None
        assert "max_in_flight" not in group.to_wire()  # the wire form of an unbounded group is unchanged
    # How the group runs, not what it is: the shape a reopen is fenced on is the same.
    assert bounded.shape() == RuntimeEffectGroup(KEY, children, wake=ALL, disposition=RTC).shape()
