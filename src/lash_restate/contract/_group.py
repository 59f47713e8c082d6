"""Group identity and the group itself, which has exactly one constructor.

ADR, "Normative: a group's copies are made to agree by construction": the
constructor stamps unstamped children from their own index and refuses any
child that disagrees with the group it claims. Hosts never read group identity
from ``children[0]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import msgspec

from ._envelope import (
    GroupMembership,
    RuntimeEffectEnvelope,
    canonical_bytes,
    decode_envelope,
    envelope_hash,
    has_surrogate,
)
from ._errors import (
    DispositionDrift,
    DuplicateReplayKey,
    EmptyGroup,
    ForeignGroupKey,
    GroupShapeError,
    InvalidEnvelope,
    InvalidGroupKey,
    InvalidInput,
    PermutedPosition,
    ReplayMismatch,
    ShapeMismatch,
    WakeRuleDrift,
    a_kind,
)
from ._policies import GroupWakePolicy, LoserPolicy
from ._struct import STRUCT_OPTIONS

__all__ = ["GroupKey", "GroupShape", "RuntimeEffectGroup"]

_E = TypeVar("_E", GroupWakePolicy, LoserPolicy)

_SEPARATOR = ":group:"


# An occurrence this large spells a key past 512 characters (and `str()` of a larger one may raise).
_PAST_ANY_KEY = 10**512


class GroupKey(msgspec.Struct, **STRUCT_OPTIONS):
    """A group's identity, spelled `{scope_id}:group:{batch_id}:{occurrence}`.

    ``occurrence`` comes from the caller's deterministic effect sequence (it rides
    the continuation), never from host memory: two identical calls in one
    iteration share a ``batch_id`` and differ only here.
    """

    scope_id: str
    batch_id: str
    occurrence: int

    def __post_init__(self) -> None:
        if not isinstance(self.scope_id, str) or not isinstance(self.batch_id, str):
            raise InvalidGroupKey("scope_id and batch_id must be text")
        if isinstance(self.occurrence, int) and self.occurrence >= _PAST_ANY_KEY:
            raise InvalidGroupKey("group key must be at most 512 characters")
        if not self.scope_id or any(ord(c) < 0x20 for c in self.scope_id):
            raise InvalidGroupKey("scope_id must be non-empty printable text")
        if not self.batch_id or ":" in self.batch_id or any(ord(c) < 0x20 for c in self.batch_id):
            raise InvalidGroupKey("batch_id must be non-empty printable text without ':'")
        if has_surrogate(self.scope_id + self.batch_id):
            raise InvalidGroupKey("a group key must be text: it holds a lone surrogate (\\ud800-\\udfff)")
        if isinstance(self.occurrence, bool) or not isinstance(self.occurrence, int) or self.occurrence < 0:
            raise InvalidGroupKey("occurrence must be a non-negative integer")
        if len(str(self)) > 512:
            raise InvalidGroupKey("group key must be at most 512 characters")

    def __str__(self) -> str:
        return f"{self.scope_id}{_SEPARATOR}{self.batch_id}:{self.occurrence}"

    @classmethod
    def parse(cls, text: str) -> GroupKey:
        """The key ``text`` spells, or `InvalidGroupKey`."""
        if not isinstance(text, str):  # an untyped caller's mistake, named rather than crashed on
            raise InvalidGroupKey(f"a group key is a GroupKey or its text; got {type(text).__name__}")
        # From the right: the occurrence, then the batch id (it has no ':'), then the separator, so
        # a batch id that is itself "group" reads back too.
        rest, colon, occurrence = text.rpartition(":")
        front, _, batch_id = rest.rpartition(":")
        head, sep, after = (front + ":").rpartition(_SEPARATOR)
        if len(text) > 512:  # before `int()`, which refuses a long digit string with a ValueError
            raise InvalidGroupKey("group key must be at most 512 characters")
        if not sep or after or not colon or not occurrence.isdigit() or not occurrence.isascii():
            raise InvalidGroupKey(f"{text!r} is not '{{scope_id}}:group:{{batch_id}}:{{occurrence}}'")
        if occurrence != str(int(occurrence)):
            raise InvalidGroupKey(f"{text!r}: occurrence must not have leading zeros")
        return cls(scope_id=head, batch_id=batch_id, occurrence=int(occurrence))


class GroupShape(msgspec.Struct, **STRUCT_OPTIONS):
    """What a reopen is fenced on: count, wake rule, disposition, and each child's hash and replay key."""

    child_count: int
    wake: GroupWakePolicy
    disposition: LoserPolicy
    replay_keys: tuple[str, ...]
    hashes: tuple[str, ...]

    def __post_init__(self) -> None:
        # A shape arrives in messages too (an open in parts, an operator's resend): one whose lists
        # disagree with its count is refused as it is read, never compared child by child.
        count = self.child_count
        lengths = {len(self.replay_keys), len(self.hashes)}
        if isinstance(count, bool) or count < 1 or lengths != {count}:
            raise InvalidInput(
                f"a group's shape must name one replay key and one hash per child; got child_count "
                f"{count!r}, {len(self.replay_keys)} replay keys and {len(self.hashes)} hashes"
            )

    def fence_reopen(self, offered: GroupShape, group_key: str) -> None:
        """Refuse a reopen whose shape or any child's envelope hash differs from this recorded one.

        Count, wake rule and disposition are compared first (`ShapeMismatch`): a group reopened
        with fewer children under the same key would silently renumber every rank above the cut,
        which comparing the children's hashes one by one cannot see. Then each child's hash
        (`ReplayMismatch`, naming the child).
        """
        for what, was, now in (
            ("child count", self.child_count, offered.child_count),
            ("wake rule", self.wake, offered.wake),
            ("disposition", self.disposition, offered.disposition),
        ):
            if was != now:
                raise ShapeMismatch(f"recorded {what} is {was}, reopen passed {now}", group_key=group_key)
        for position, (was_hash, now_hash) in enumerate(zip(self.hashes, offered.hashes, strict=True)):
            if was_hash != now_hash:
                raise ReplayMismatch(
                    "child envelope differs from the recorded one",
                    group_key=group_key,
                    position=position,
                    replay_key=offered.replay_keys[position],
                )


class RuntimeEffectGroup:
    """A group of N >= 1 child envelopes under one key, wake rule and disposition.

    The one way in is this constructor; every child comes out stamped with a
    membership that agrees with the group, or the constructor raises.
    ``max_in_flight`` bounds how many children run at once: the host starts the
    first ones in position order and the next each time one settles; ranks are
    still by settlement. It is how the group runs, not what it is: a reopen is not
    fenced on it, and the bound recorded at the first open stays the group's.
    """

    __slots__ = ("_children", "_disposition", "_key", "_max_in_flight", "_wake")

    def __init__(
        self,
        key: GroupKey | str,
        children: Iterable[RuntimeEffectEnvelope],
        *,
        wake: GroupWakePolicy,
        disposition: LoserPolicy,
        max_in_flight: int | None = None,
    ) -> None:
        group_key = GroupKey.parse(key) if isinstance(key, str) else key
        if not isinstance(group_key, GroupKey):
            raise InvalidGroupKey("key must be a GroupKey or its string form")
        wake = _coerce(GroupWakePolicy, wake, "wake")
        disposition = _coerce(LoserPolicy, disposition, "disposition")
        key_text = str(group_key)
        stamped: list[RuntimeEffectEnvelope] = []
        seen: dict[str, int] = {}
        for index, child in enumerate(children):
            if not isinstance(child, RuntimeEffectEnvelope):
                raise InvalidEnvelope(f"child {index} is {a_kind(child)}, not an envelope")
            stamped.append(_stamp(child, index, key_text, wake, disposition))
            if child.replay_key in seen:
                raise DuplicateReplayKey(
                    f"child {index} repeats the replay key of child {seen[child.replay_key]}",
                    group_key=key_text,
                    position=index,
                    replay_key=child.replay_key,
                )
            seen[child.replay_key] = index
        if not stamped:
            # ADR: all([]) resolves locally; race([]) never settles and must not become a durable await.
            raise EmptyGroup("a group needs at least one child", group_key=key_text)
        self._key = group_key
        self._wake = wake
        self._disposition = disposition
        self._children = tuple(stamped)
        self._max_in_flight = _window(max_in_flight, len(stamped), key_text)

    @property
    def key(self) -> GroupKey:
        return self._key

    @property
    def wake(self) -> GroupWakePolicy:
        return self._wake

    @property
    def disposition(self) -> LoserPolicy:
        return self._disposition

    @property
    def children(self) -> tuple[RuntimeEffectEnvelope, ...]:
        return self._children

    @property
    def max_in_flight(self) -> int | None:
        """How many children may run at once (the next starts as one settles); None: all at once.

        A bound of the group's width or more is no bound, and reads None."""
        return self._max_in_flight

    def __len__(self) -> int:
        return len(self._children)

    def __repr__(self) -> str:
        return (
            f"RuntimeEffectGroup({str(self._key)!r}, {len(self)} children, "
            f"wake={self._wake.value}, disposition={self._disposition.value}"
            + (f", max_in_flight={self._max_in_flight})" if self._max_in_flight is not None else ")")
        )

    def shape(self) -> GroupShape:
        return GroupShape(
            child_count=len(self._children),
            wake=self._wake,
            disposition=self._disposition,
            replay_keys=tuple(c.replay_key for c in self._children),
            hashes=tuple(envelope_hash(c) for c in self._children),
        )

    def to_wire(self) -> dict[str, Any]:
        """A JSON-ready form; :meth:`from_wire` rebuilds it through the one constructor."""
        return {
            "key": str(self._key),
            "wake": self._wake.value,
            "disposition": self._disposition.value,
            "children": [msgspec.json.decode(canonical_bytes(c)) for c in self._children],
            **({"max_in_flight": self._max_in_flight} if self._max_in_flight is not None else {}),
        }

    @classmethod
    def from_wire(cls, data: Any) -> RuntimeEffectGroup:
        """Rebuild a group from :meth:`to_wire` output (or hand-written JSON), refusing bad input."""
        if not isinstance(data, dict):
            raise InvalidEnvelope("a group must be a JSON object")
        unknown = set(data) - {"key", "wake", "disposition", "children", "max_in_flight"}
        if unknown:
            raise InvalidEnvelope(f"unknown group fields: {sorted(unknown)}")
        children = data.get("children")
        if not isinstance(children, list):
            raise InvalidEnvelope("group children must be a list")
        key = data.get("key")
        if not isinstance(key, str):
            raise InvalidGroupKey("group key must be a string")
        return cls(
            key,
            [decode_envelope(msgspec.json.encode(c)) for c in children],
            wake=_coerce(GroupWakePolicy, data.get("wake"), "wake"),
            disposition=_coerce(LoserPolicy, data.get("disposition"), "disposition"),
            max_in_flight=data.get("max_in_flight"),
        )


def _window(max_in_flight: object, width: int, group_key: str) -> int | None:
    """``max_in_flight`` checked: a positive int, or None; one of ``width`` or more is no bound (None)."""
    if max_in_flight is None:
        return None
    if not isinstance(max_in_flight, int) or isinstance(max_in_flight, bool) or max_in_flight < 1:
        raise InvalidInput(
            f"max_in_flight must be a positive integer or None; got {max_in_flight!r}", group_key=group_key
        )
    return None if max_in_flight >= width else max_in_flight


def _coerce(enum: type[_E], value: object, what: str) -> _E:
    try:
        return enum(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise InvalidEnvelope(f"{what} must be one of {allowed}; got {value!r}") from None


def _stamp(
    child: RuntimeEffectEnvelope,
    index: int,
    key: str,
    wake: GroupWakePolicy,
    disposition: LoserPolicy,
) -> RuntimeEffectEnvelope:
    m = child.membership
    if m is None:
        membership = GroupMembership(group_key=key, position=index, wake=wake, disposition=disposition)
        return msgspec.structs.replace(child, membership=membership)
    refusal: tuple[type[GroupShapeError], str] | None = None
    if m.group_key != key:
        refusal = ForeignGroupKey, f"child claims group {m.group_key!r}"
    elif m.position != index:
        refusal = PermutedPosition, f"child claims position {m.position} at index {index}"
    elif m.wake != wake:
        refusal = WakeRuleDrift, f"child claims wake {m.wake.value}, group is {wake.value}"
    elif m.disposition != disposition:
        refusal = (
            DispositionDrift,
            f"child claims disposition {m.disposition.value}, group is {disposition.value}",
        )
    if refusal is not None:
        cls, message = refusal
        raise cls(message, group_key=key, position=index, replay_key=child.replay_key)
    return child
