"""The caller's cursor: the sole cursor of record (ADR, Decision, `await_next_settlement`).

A host advances it on exactly the settlements it returns and keeps no
per-caller consumption state, so awaiting rank ``consumed + 1`` before and
after a crash yields the same settlement. It takes its child count from the
group, and advancing past the last child is refused rather than clamped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import msgspec

from ._errors import CursorOverrun, HandleMismatch, InvalidGroupKey, InvalidHandle, InvalidInput, a_kind
from ._group import GroupKey, RuntimeEffectGroup
from ._struct import STRUCT_OPTIONS

__all__ = ["GroupHandle", "check_child_count"]


class _HandleWire(msgspec.Struct, omit_defaults=True, **STRUCT_OPTIONS):
    group_key: str
    child_count: int
    consumed: int
    # Omitted when None: a cursor that names no incarnation is the bytes it always was.
    incarnation: str | None = None


_INCARNATION_MAX = 256  # characters: a host's incarnation is an id, far shorter


class GroupHandle:
    """Which group, how many children it has, and how many settlements this caller consumed.

    ``incarnation``, when the host gives one, names the group its key held when the cursor was made:
    a key can name another group once its group is closed, and the host refuses this cursor there
    (`GroupNotOpen`) rather than serve it another group's ranks. A handle made with none reads
    whichever group the key holds.

    Mutable, because the host advances the caller's own handle in place (each settlement it returns
    adds one to ``consumed``), and therefore not hashable: a hash over ``consumed`` would change
    under a dict or set holding it. Equality compares every field.
    """

    __slots__ = ("_awaited", "_child_count", "_consumed", "_group_key", "_incarnation")

    def __init__(
        self, group_key: str, child_count: int, consumed: int, *, incarnation: str | None = None
    ) -> None:
        try:
            GroupKey.parse(group_key)
        except InvalidGroupKey as exc:
            raise InvalidHandle(f"handle names an invalid group key: {exc.message}") from None
        if isinstance(child_count, bool) or not isinstance(child_count, int) or child_count < 1:
            raise InvalidHandle("handle child_count must be a positive integer", group_key=group_key)
        if isinstance(consumed, bool) or not isinstance(consumed, int) or not 0 <= consumed <= child_count:
            raise InvalidHandle(
                f"handle consumed={consumed!r} is outside 0..{child_count}", group_key=group_key
            )
        if incarnation is not None and (
            not isinstance(incarnation, str) or not 0 < len(incarnation) <= _INCARNATION_MAX
        ):
            raise InvalidHandle(
                f"handle incarnation must be text of 1 to {_INCARNATION_MAX} characters, or absent",
                group_key=group_key,
            )
        self._group_key = group_key
        self._child_count = child_count
        self._consumed = consumed
        self._incarnation = incarnation
        self._awaited = False  # a host serves its next rank now (`awaiting`); never saved or compared

    @classmethod
    def opened(cls, group: RuntimeEffectGroup, *, incarnation: str | None = None) -> GroupHandle:
        """The handle a host returns from open: ``consumed = 0``, child count taken from the group,
        and the ``incarnation`` the host recorded it as, if it names one."""
        return cls(str(group.key), len(group), 0, incarnation=incarnation)

    @property
    def group_key(self) -> str:
        return self._group_key

    @property
    def child_count(self) -> int:
        return self._child_count

    @property
    def consumed(self) -> int:
        return self._consumed

    @property
    def incarnation(self) -> str | None:
        """The group this cursor reads, as its host recorded it; None: whichever the key holds."""
        return self._incarnation

    @property
    def exhausted(self) -> bool:
        """Every settlement was consumed; this is caller arithmetic, not a host round trip."""
        return self._consumed == self._child_count

    @property
    def next_rank(self) -> int:
        """The rank the next await serves: ``consumed + 1``."""
        return self._consumed + 1

    def check_can_advance(self) -> None:
        if self.exhausted:
            raise CursorOverrun(
                f"all {self._child_count} settlements were already consumed", group_key=self._group_key
            )

    def advance(self) -> None:
        """Consume one settlement. Hosts call this only on a settlement they return."""
        self.check_can_advance()
        self._consumed += 1

    @contextlib.contextmanager
    def awaiting(self) -> Iterator[None]:
        """Held by a host while it serves this handle's next rank. A cursor reads one rank at a time:
        a second await of it at once would serve the same rank and advance the cursor twice, the
        next rank never read, so it is refused `InvalidInput` (a copy is a cursor of its own)."""
        if self._awaited:
            raise InvalidInput(
                f"group {self._group_key!r}: its next settlement is already awaited; a cursor reads one "
                "rank at a time (await each next() before the next one)",
                group_key=self._group_key,
            )
        self._awaited = True
        try:
            yield
        finally:
            self._awaited = False

    def copy(self) -> GroupHandle:
        return GroupHandle(self._group_key, self._child_count, self._consumed, incarnation=self._incarnation)

    def to_bytes(self) -> bytes:
        wire = _HandleWire(
            group_key=self._group_key,
            child_count=self._child_count,
            consumed=self._consumed,
            incarnation=self._incarnation,
        )
        return msgspec.json.encode(wire)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview | str) -> GroupHandle:
        """Restore a saved cursor, refusing anything inconsistent with `InvalidHandle`."""
        # Any bytes-like store's answer (a database's `memoryview`, say) reads as it did; anything
        # else would raise a plain TypeError below, which Restate retries for ever.
        if not isinstance(data, bytes | bytearray | memoryview | str):
            raise InvalidHandle(f"a saved handle is the text save() gave, not {a_kind(data)}")
        try:
            wire = msgspec.json.decode(data, type=_HandleWire)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise InvalidHandle(f"malformed handle: {exc}") from None
        except UnicodeError:  # text holding a lone surrogate, which has no UTF-8 form
            raise InvalidHandle("malformed handle: it holds a lone surrogate (\\ud800-\\udfff)") from None
        return cls(wire.group_key, wire.child_count, wire.consumed, incarnation=wire.incarnation)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupHandle):
            return NotImplemented
        return (self._group_key, self._child_count, self._consumed, self._incarnation) == (
            other._group_key,
            other._child_count,
            other._consumed,
            other._incarnation,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable: see the class docstring

    def __repr__(self) -> str:
        named = f", incarnation={self._incarnation!r}" if self._incarnation is not None else ""
        cursor = f"child_count={self._child_count}, consumed={self._consumed}"
        return f"GroupHandle({self._group_key!r}, {cursor}{named})"


def check_child_count(recorded: int, claimed: int, *, group_key: str) -> None:
    """Refuse a handle whose child count is not the recorded group's: it belongs to another shape.

    Args:
        recorded: the child count the group recorded.
        claimed: the handle's ``child_count``.
        group_key: the group's key, for the refusal.

    Raises:
        HandleMismatch: the two counts differ.
    """
    if recorded != claimed:
        raise HandleMismatch(f"handle has {claimed} children, group has {recorded}", group_key=group_key)
