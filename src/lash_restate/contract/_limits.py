"""How large a message may be, and how large each one a host builds will be: the one place that knows.

Restate refuses any protocol message an invocation sends whose encoded body reaches its
``worker.invoker.message-size-limit`` (32 MiB by default; the server counts the protobuf message
after the 8-byte frame header, and allows a quarter of its 1 MiB internal overhead on top, so the
default's effective bound is 33816576 bytes). A handler whose message is refused is retried, and
meets the same refusal every time: an oversized argument or result is an endless retry loop unless
it is refused where it is built. So every message lash builds is sized here first:

- a group's open carries every child, each as the base64 of its canonical envelope (format 1), with
  the group's shape (replay keys and hashes) and a few awakeable ids: `check_open_size` refuses a
  child that could not ride it even alone; a group whose children together would not is opened in
  parts (`opens_in_parts`: the shape in one message, each `PART_CHILDREN` children in another), and
  refused only when a part or the shape would not fit either;
- an outcome (a tool's result or rejection, a call's answer, an event's payload, wrapped as the
  `Outcome` a host stores) is stored and served in messages of its own: `fit_outcome` turns one past
  `OUTCOME_LIMIT` into ``Err(code="too_large")``.

Both hosts apply the same checks, so a child the reference host accepts is one Restate accepts.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ._envelope import canonical_bytes
from ._errors import PayloadTooLarge
from ._group import RuntimeEffectGroup
from ._settlement import Err, Ok, Outcome

__all__ = [
    "BODY_LIMIT",
    "FRAMING",
    "MESSAGE_LIMIT",
    "OPEN_ALLOWANCE",
    "OUTCOME_LIMIT",
    "PART_CHILDREN",
    "TOO_LARGE",
    "carried_size",
    "check_open_size",
    "fit_outcome",
    "ok_size",
    "open_size",
    "opens_in_parts",
    "outcome_size",
    "too_large",
]

# Restate's default `worker.invoker.message-size-limit` (= `networking.message-size-limit`).
MESSAGE_LIMIT = 32 * 1024 * 1024
# Headroom for the protocol message around a body lash builds: the command's protobuf tags and
# lengths, service and handler names, the target key (at most 512 characters), headers. A few KiB
# at most; 64 KiB leaves room without relying on the server's own slack above its limit.
FRAMING = 64 * 1024
# The largest body (a call's argument, a handler's output, a state value) lash builds.
BODY_LIMIT = MESSAGE_LIMIT - FRAMING
# The largest encoded outcome: a bulk read of a pump's store answers it inside a JSON array.
OUTCOME_LIMIT = BODY_LIMIT - 16
# An open too large for one message goes in parts of at most this many children each (as raw
# envelopes, not base64), and the shape in a message of its own (decision 65).
PART_CHILDREN = 256
# An open request's fields besides its children and shape: the reply awakeable, the opener's
# invocation id and the wakes for the first ranks (at most 32 ids of well under 100 characters).
OPEN_ALLOWANCE = 8 * 1024

TOO_LARGE = "too_large"  # the `Err` code of an outcome past OUTCOME_LIMIT (stable)

_ENCODER = msgspec.json.Encoder()
_OK_WRAP = len(_ENCODER.encode(Ok(value=None))) - len(b"null")  # {"type":"ok","value":…}
# A child's entry in the shape: its replay key and 64-hex hash, each quoted, each followed by a comma.
_SHAPE_ENTRY = 64 + 6


def carried_size(canonical: int) -> int:
    """Bytes a child of ``canonical`` encoded bytes takes in an open request: base64, quoted, a comma."""
    return 4 * ((canonical + 2) // 3) + 3


def open_size(group_shape: bytes, carried: Sequence[int]) -> int:
    """An upper bound of an open request's encoded size, from its shape and its children's shares."""
    return len(group_shape) + sum(carried) + OPEN_ALLOWANCE


def check_open_size(group: RuntimeEffectGroup, *, reopen: bool = False) -> None:
    """Refuse, before anything is sent or recorded, a group that no open could carry.

    A child that could not ride the open even alone is named with its encoded size. A group whose
    children together do not fit one open request is opened in parts (`opens_in_parts`): refused
    only when a part of `PART_CHILDREN` children, or the shape alone, would not fit one message either,
    naming the first position past one open request. A group with ``max_in_flight`` is never opened
    in parts: one that does not fit one open request is refused (one run holds the bound), unless
    this is a ``reopen``, which keeps the bound the group was opened with (none, if it was opened in
    parts).
    """
    refusal = _one_open_refusal(group)
    if refusal is not None and group.max_in_flight is not None and not reopen:
        raise PayloadTooLarge(
            f"{refusal.message}; a group with max_in_flight is opened in one message",
            group_key=refusal.group_key,
            position=refusal.position,
            replay_key=refusal.replay_key,
        )
    if refusal is not None and (in_parts := _parts_refusal(group, refusal)) is not None:
        raise in_parts


def opens_in_parts(group: RuntimeEffectGroup) -> bool:
    """Whether ``group``'s children do not fit one open request together (each fits alone, or this
    refuses it as `check_open_size` does)."""
    return _one_open_refusal(group) is not None


def _one_open_refusal(group: RuntimeEffectGroup) -> PayloadTooLarge | None:
    group_key, children = str(group.key), group.children
    sizes = [len(canonical_bytes(child)) for child in children]
    carried = [carried_size(size) for size in sizes]
    for position, (child, size, share) in enumerate(zip(children, sizes, carried, strict=True)):
        alone = share + OPEN_ALLOWANCE + len(child.replay_key) + _SHAPE_ENTRY
        if alone > BODY_LIMIT:
            raise PayloadTooLarge(
                f"child {position} is {size} bytes encoded, {share} as the open request carries it "
                f"(base64), over the limit of {BODY_LIMIT} bytes for one message",
                group_key=group_key,
                position=position,
                replay_key=child.replay_key,
            )
    total = open_size(_ENCODER.encode(group.shape()), carried)
    if total <= BODY_LIMIT:
        return None
    running = total - sum(carried)
    for position, share in enumerate(carried):
        running += share
        if running > BODY_LIMIT:
            return PayloadTooLarge(
                f"the open request is {total} bytes, over the limit of {BODY_LIMIT} bytes for one "
                f"message; child {position} is the first past it",
                group_key=group_key,
                position=position,
                replay_key=children[position].replay_key,
            )
    return PayloadTooLarge(  # the shape alone is past it (a very wide group of very long keys)
        f"the open request is {total} bytes, over the limit of {BODY_LIMIT} bytes for one message",
        group_key=group_key,
    )


def _parts_refusal(group: RuntimeEffectGroup, one_open: PayloadTooLarge) -> PayloadTooLarge | None:
    """Why the open in parts cannot carry ``group`` either (``one_open``: why one open cannot), or
    None when it can: the shape must fit one message, and each part of `PART_CHILDREN` children one."""
    shape = len(_ENCODER.encode(group.shape())) + OPEN_ALLOWANCE
    if shape > BODY_LIMIT:
        return PayloadTooLarge(
            f"{one_open.message}; opened in parts, the group's shape ({len(group.children)} replay keys) "
            f"is {shape} bytes, over that limit too",
            group_key=one_open.group_key,
        )
    children = group.children
    for first in range(0, len(children), PART_CHILDREN):
        running = len(str(group.key)) + OPEN_ALLOWANCE
        for position in range(first, min(first + PART_CHILDREN, len(children))):
            running += len(canonical_bytes(children[position])) + 1
            if running > BODY_LIMIT:
                return PayloadTooLarge(
                    f"{one_open.message}; opened in parts of {PART_CHILDREN} children, the part from "
                    f"child {first} is over that limit too, and child {position} is the first past it",
                    group_key=one_open.group_key,
                    position=position,
                    replay_key=children[position].replay_key,
                )
    return None


def ok_size(value_bytes: int) -> int:
    """The encoded size of ``Ok(value)`` for a value of ``value_bytes`` encoded bytes."""
    return value_bytes + _OK_WRAP


def outcome_size(outcome: Outcome) -> int:
    return len(_ENCODER.encode(outcome))


def too_large(size: int) -> Err:
    """The terminal of an outcome of ``size`` encoded bytes past `OUTCOME_LIMIT`."""
    return Err(
        message=f"result of {size} bytes encoded exceeds the limit of {OUTCOME_LIMIT} bytes for one message",
        code=TOO_LARGE,
    )


def fit_outcome(outcome: Outcome, size: int | None = None) -> Outcome:
    """``outcome``, or `too_large` if its encoding (``size``, when known) is past `OUTCOME_LIMIT`.

    A rejection past it because of its metadata keeps its message and code and drops the metadata
    (which an endpoint may not even write), as a too-large answer would lose more."""
    size = outcome_size(outcome) if size is None else size
    if size <= OUTCOME_LIMIT:
        return outcome
    if isinstance(outcome, Err) and outcome.metadata is not msgspec.UNSET:
        return fit_outcome(msgspec.structs.replace(outcome, metadata=msgspec.UNSET))
    return too_large(size)
