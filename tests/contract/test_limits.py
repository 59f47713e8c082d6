"""What each message lash builds weighs, exactly, and where a too-large one is refused.

`tests/memory/test_limits.py` opens such groups on the reference host and `tests/engine/test_sizes.py`
against a real server; here each size is pinned to the byte, with no host and no server: a child's
share of an open request (its canonical envelope in base64, quoted, then a comma), the open's total,
the boundary at `BODY_LIMIT` and one byte past it, which child a refusal names and what it says, and
the same for an outcome at `OUTCOME_LIMIT`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import msgspec
import pytest

import lash_restate.contract._limits as limits
from lash_restate.contract import (
    BODY_LIMIT,
    MAX_KEY_LENGTH,
    OUTCOME_LIMIT,
    Call,
    Cancelled,
    Err,
    Ok,
    PayloadTooLarge,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    canonical_bytes,
    check_open_size,
    fit_outcome,
    ok_size,
    outcome_size,
)
from lash_restate.contract._limits import (
    OPEN_ALLOWANCE,
    PART_CHILDREN,
    _one_open_refusal,
    carried_size,
    open_size,
    opens_in_parts,
    too_large,
)
from tests.memory.builders import KEY, group


def child(position: int, arg: str, *, key_length: int = 2) -> RuntimeEffectEnvelope:
    """A call child whose replay key is ``key_length`` characters, ``r<position>`` padded with dots."""
    replay_key = f"r{position}".ljust(key_length, ".")
    return RuntimeEffectEnvelope(command=Call(service="S", handler="h", arg=arg), replay_key=replay_key)


def share(envelope: RuntimeEffectEnvelope) -> int:
    """What the child costs in the open's list of children: its base64, quoted, then a comma."""
    return len(base64.b64encode(canonical_bytes(envelope))) + len('"",')  # base64 needs no escapes


def shape_size(group: RuntimeEffectGroup) -> int:
    return len(msgspec.json.encode(group.shape()))


def request_size(group: RuntimeEffectGroup) -> int:
    """The open request's bound, built from the parts the request carries (not from `carried_size`)."""
    return shape_size(group) + sum(share(c) for c in group.children) + OPEN_ALLOWANCE


def through(position: int) -> Callable[[RuntimeEffectGroup], int]:
    """The open request's bound counting children up to ``position`` only."""
    return lambda group: (
        shape_size(group) + sum(share(c) for c in group.children[: position + 1]) + (OPEN_ALLOWANCE)
    )


def alone(position: int) -> Callable[[RuntimeEffectGroup], int]:
    """What child ``position`` adds to any open: its share, its shape entry (replay key and hash, each
    quoted and followed by a comma) and the allowance for the open's other fields."""

    def size(group: RuntimeEffectGroup) -> int:
        envelope = group.children[position]
        entry = len(json.dumps(envelope.replay_key)) + len(",") + len(json.dumps("0" * 64)) + len(",")
        return share(envelope) + entry + OPEN_ALLOWANCE

    return size


def tuned(
    children: list[RuntimeEffectEnvelope],
    position: int,
    target: int,
    measure: Callable[[RuntimeEffectGroup], int],
) -> RuntimeEffectGroup:
    """``children`` with child ``position`` replaced by one that makes ``measure`` of the group ``target``.

    A share grows by 4 for every 3 encoded bytes, so the child's replay key is lengthened (one byte in
    the shape, one in the envelope) until the target is reachable to the byte.
    """
    for key_length in range(2, 10):
        probe = group(
            *children[:position], child(position, "", key_length=key_length), *children[position + 1 :]
        )
        base = len(canonical_bytes(probe.children[position]))
        missing = target - measure(probe)
        # `base + extra` bytes, a multiple of 3, take a share exactly `missing` larger than `base` do.
        if missing >= 0 and missing % 4 == 0:
            extra = 3 * ((base + 2) // 3 + missing // 4) - base
            built = child(position, "x" * extra, key_length=key_length)
            result = group(*children[:position], built, *children[position + 1 :])
            assert measure(result) == target
            return result
    raise AssertionError(f"no child makes {target} bytes")


def test_a_childs_share_is_its_base64_quoted_and_a_comma() -> None:
    for size in range(13):
        assert carried_size(size) == len(json.dumps(base64.b64encode(b"x" * size).decode())) + 1, size
    assert [carried_size(n) for n in (0, 1, 2, 3, 4, 6, 7)] == [3, 7, 7, 7, 11, 11, 15]


def test_an_open_is_its_shape_its_shares_and_the_allowance() -> None:
    assert open_size(b"{}", []) == 2 + OPEN_ALLOWANCE
    assert open_size(b'{"a":1}', [7, 11, 15]) == 7 + 33 + OPEN_ALLOWANCE
    wide = group(*(child(p, "x" * p) for p in range(5)))
    shares = [carried_size(len(canonical_bytes(c))) for c in wide.children]
    assert shares == [share(c) for c in wide.children]
    assert open_size(msgspec.json.encode(wide.shape()), shares) == request_size(wide)


def test_ok_size_is_the_encoded_ok_around_the_value() -> None:
    for value in (None, 0, "", "x" * 10, [1, 2], {"a": "b"}):
        encoded = len(msgspec.json.encode(value))
        assert ok_size(encoded) == len(msgspec.json.encode(Ok(value=value))) == outcome_size(Ok(value=value))


def test_an_open_at_the_limit_passes_and_one_byte_past_it_names_the_child_that_crossed() -> None:
    # One byte past one open request, the group opens in parts; the refusal it would meet in one
    # open (what `check_open_size` raises when no part could carry it either) names the child.
    small = child(0, "x" * 100)
    at = tuned([small, small], 1, BODY_LIMIT, request_size)
    check_open_size(at)
    assert not opens_in_parts(at) and _one_open_refusal(at) is None
    past = tuned([small, small], 1, BODY_LIMIT + 1, request_size)
    check_open_size(past)  # carried by an open in parts
    assert opens_in_parts(past)
    refused = _one_open_refusal(past)
    assert refused is not None
    assert refused.wire_body() == {
        "code": "too_large",
        "message": f"the open request is {BODY_LIMIT + 1} bytes, over the limit of {BODY_LIMIT} bytes "
        "for one message; child 1 is the first past it",
        "group_key": KEY,
        "position": 1,
        "replay_key": past.children[1].replay_key,
    }


def test_a_group_no_part_can_carry_is_refused_naming_the_part_and_the_child_past_it() -> None:
    # Each child rides an open alone, and all do not fit one: the open in parts sends them 256 to a
    # message, and here the first part is past the limit too. The refusal says so, where it spoke of
    # the one-message open alone.
    each = BODY_LIMIT // 100
    wide = group(*[child(p, "x" * each) for p in range(120)])
    running, first_past = len(KEY) + OPEN_ALLOWANCE, None
    for position, envelope in enumerate(wide.children):  # a part as it is staged: raw envelopes
        running += len(canonical_bytes(envelope)) + 1
        if running > BODY_LIMIT and first_past is None:
            first_past = position
    assert first_past is not None and first_past < PART_CHILDREN
    one_open = _one_open_refusal(wide)
    assert one_open is not None
    with pytest.raises(PayloadTooLarge) as refused:
        check_open_size(wide)
    assert refused.value.wire_body() == {
        "code": "too_large",
        "message": f"{one_open.message}; opened in parts of {PART_CHILDREN} children, the part from child 0 "
        f"is over that limit too, and child {first_past} is the first past it",
        "group_key": KEY,
        "position": first_past,
        "replay_key": wide.children[first_past].replay_key,
    }
    # One child fewer than the first past it, and the open in parts carries the group.
    check_open_size(group(*wide.children[:first_past]))


def test_a_group_whose_shape_alone_is_past_one_message_is_refused_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Replay keys of the longest kind, so many that the shape (every replay key and its hash), which
    # the open in parts sends in a message of its own, does not fit one; each child rides an open
    # alone. Under a limit of 20,000 bytes: at the real one, 57,000 children took seconds to build.
    limit = 20_000
    monkeypatch.setattr(limits, "BODY_LIMIT", limit)
    count = limit // (MAX_KEY_LENGTH + 64 + len('"","",')) + 1
    long = group(*[child(p, "", key_length=MAX_KEY_LENGTH) for p in range(count)])
    one_open = _one_open_refusal(long)
    assert one_open is not None and f"limit of {limit} bytes" in one_open.message
    with pytest.raises(PayloadTooLarge) as refused:
        check_open_size(long)
    assert refused.value.wire_body() == {
        "code": "too_large",
        "message": f"{one_open.message}; opened in parts, the group's shape ({count} replay keys) is "
        f"{shape_size(long) + OPEN_ALLOWANCE} bytes, over that limit too",
        "group_key": KEY,
    }
    quarter = group(*long.children[: count // 4])
    check_open_size(quarter)  # carried in parts
    assert opens_in_parts(quarter)


def test_a_bounded_group_past_one_open_is_refused_not_opened_in_parts() -> None:
    small = child(0, "x" * 100)
    past = tuned([small, small], 1, BODY_LIMIT + 1, request_size)
    bounded = RuntimeEffectGroup(
        past.key, past.children, wake=past.wake, disposition=past.disposition, max_in_flight=1
    )
    with pytest.raises(PayloadTooLarge) as refused:
        check_open_size(bounded)
    assert refused.value.wire_body() == {
        "code": "too_large",
        "message": f"the open request is {BODY_LIMIT + 1} bytes, over the limit of {BODY_LIMIT} bytes "
        "for one message; child 1 is the first past it; a group with max_in_flight is opened in one message",
        "group_key": KEY,
        "position": 1,
        "replay_key": past.children[1].replay_key,
    }
    check_open_size(bounded, reopen=True)  # a resume keeps the group's own bound: none, in parts


def test_the_first_child_past_the_limit_is_named_not_the_last() -> None:
    children = [child(0, "x" * (BODY_LIMIT // 4)), child(1, ""), child(2, "y"), child(3, "z")]
    # Children 0 and 1 end exactly at the limit: child 2 is the first past it, though 3 is past too.
    at = tuned(children, 1, BODY_LIMIT, through(1))
    refused = _one_open_refusal(at)
    assert refused is not None
    assert (refused.position, refused.replay_key) == (2, "r2")
    assert refused.message == (
        f"the open request is {request_size(at)} bytes, over the limit of {BODY_LIMIT} bytes for one "
        "message; child 2 is the first past it"
    )
    # One byte more in child 1 and it is the one that crosses.
    over = tuned(children, 1, BODY_LIMIT + 1, through(1))
    refused = _one_open_refusal(over)
    assert refused is not None
    assert (refused.position, refused.replay_key) == (1, over.children[1].replay_key)


def test_a_child_too_large_to_ride_any_open_is_named_with_its_sizes() -> None:
    # At the limit alone the child could ride an open, but not with this group's shape around it:
    # the refusal is the whole open's.
    at = tuned([child(0, "")], 0, BODY_LIMIT, alone(0))
    refused = _one_open_refusal(at)
    assert refused is not None
    assert refused.message == (
        f"the open request is {request_size(at)} bytes, over the limit of {BODY_LIMIT} bytes for one "
        "message; child 0 is the first past it"
    )
    # One byte more and it is refused alone, with its encoded size and its share.
    past = tuned([child(0, "small"), child(1, "")], 1, BODY_LIMIT + 1, alone(1))
    with pytest.raises(PayloadTooLarge) as raised:
        check_open_size(past)  # no part carries it either: refused whatever the open
    big = past.children[1]
    assert raised.value.wire_body() == {
        "code": "too_large",
        "message": f"child 1 is {len(canonical_bytes(big))} bytes encoded, {share(big)} as the open "
        f"request carries it (base64), over the limit of {BODY_LIMIT} bytes for one message",
        "group_key": KEY,
        "position": 1,
        "replay_key": big.replay_key,
    }


def test_a_rejection_past_the_limit_by_its_metadata_drops_the_metadata_and_keeps_its_message() -> None:
    """The message and status are what a caller reads first; the metadata, which an endpoint may
    not even write, goes before they do."""
    heavy = Err(message="out of stock", code="409", metadata={"blob": "x" * OUTCOME_LIMIT})
    assert fit_outcome(heavy) == Err(message="out of stock", code="409")
    both = Err(message="x" * OUTCOME_LIMIT, code="409", metadata={"k": "v"})
    assert fit_outcome(both) == too_large(outcome_size(Err(message="x" * OUTCOME_LIMIT, code="409")))
    light = Err(message="out of stock", code="409", metadata={"left": "5"})
    assert fit_outcome(light) is light


def test_an_outcome_at_the_limit_is_kept_and_one_byte_past_it_is_too_large() -> None:
    assert fit_outcome(Ok(value=1), OUTCOME_LIMIT) == Ok(value=1)
    assert fit_outcome(Ok(value=1), OUTCOME_LIMIT + 1) == too_large(OUTCOME_LIMIT + 1)
    assert fit_outcome(Cancelled(), 0) == Cancelled()
    at = Ok(value="x" * (OUTCOME_LIMIT - ok_size(2)))
    assert outcome_size(at) == OUTCOME_LIMIT and fit_outcome(at) is at
    past = Err(message="x" * OUTCOME_LIMIT)
    assert fit_outcome(past) == Err(
        message=f"result of {outcome_size(past)} bytes encoded exceeds the limit of {OUTCOME_LIMIT} "
        "bytes for one message",
        code="too_large",
    )
