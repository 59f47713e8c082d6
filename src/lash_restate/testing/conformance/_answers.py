"""What a `Turn`'s steps answer: `Answer`, a typed placeholder known once the turn ran, and the shapes
of a step's result (`Combined`, `Selected`, `Iterated`) and of its error (`ErrorBody`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

import msgspec

from ...contract import STRUCT_OPTIONS, GroupHandle, Outcome, Settlement

__all__ = [
    "Answer",
    "Combined",
    "ErrorBody",
    "Iterated",
    "Selected",
    "decode_handle",
    "decode_none",
    "decode_settlement",
]

T = TypeVar("T")


class ErrorBody(msgspec.Struct, **STRUCT_OPTIONS):
    """A step's error as every host answers it: the `LashError`'s code and message, and each
    location that is set."""

    code: str
    message: str
    group_key: str | None = None
    position: int | None = None
    replay_key: str | None = None


class Combined(msgspec.Struct, **STRUCT_OPTIONS):
    """A combinator's result: ``fulfilled`` with ``value``, ``rejected`` with ``reason`` (the rejecting
    settlement, or for ``any`` every error in input order), or ``suspended`` with ``handle`` (stopped
    after ``stop_after`` settlements). ``order`` is the positions in the order they were consumed."""

    status: Literal["fulfilled", "rejected", "suspended"]
    group_key: str
    order: list[int]
    value: Any = msgspec.UNSET
    reason: Settlement | list[Outcome] | msgspec.UnsetType = msgspec.UNSET
    handle: str | msgspec.UnsetType = msgspec.UNSET

    @property
    def rejection(self) -> Settlement:
        """The settlement that rejected it (``all``, ``race``); fails the test if it has none."""
        assert isinstance(self.reason, Settlement), f"expected a rejecting settlement, got {self}"
        return self.reason

    @property
    def errors(self) -> list[Outcome]:
        """Every error, in input order (``any`` rejected); fails the test if it has none."""
        assert isinstance(self.reason, list), f"expected an aggregate rejection, got {self}"
        return self.reason

    @property
    def saved(self) -> GroupHandle:
        """The cursor of a suspended combinator; fails the test if it did not suspend."""
        assert isinstance(self.handle, str), f"expected a suspended result, got {self}"
        return GroupHandle.from_bytes(self.handle)


class Selected(msgspec.Struct, **STRUCT_OPTIONS):
    """`signal_or_deadline`'s answer: which arm won and its value, or the event's rejection."""

    winner: Literal["event", "deadline"]
    value: Any = msgspec.UNSET
    rejected: Settlement | msgspec.UnsetType = msgspec.UNSET


class Iterated(msgspec.Struct, **STRUCT_OPTIONS):
    """What ``async with lash.open(...) as g: async for s in g`` received, and the cursor it saved."""

    settlements: list[Settlement]
    saved: str | None = None

    @property
    def saved_handle(self) -> GroupHandle | None:
        return GroupHandle.from_bytes(self.saved) if self.saved is not None else None


class Answer(Generic[T]):
    """One step's answer, known once its turn has run."""

    __slots__ = ("_decode", "_what", "_wire")

    def __init__(self, what: str, decode: Callable[[Any], T]) -> None:
        self._what, self._decode = what, decode
        self._wire: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<{self._what}: {'not run' if self._wire is None else self._wire}>"

    @property
    def wire(self) -> dict[str, Any]:
        """The step's answer as the tier gave it: ``{"ok": ...}`` or ``{"error": {...}}``."""
        assert self._wire is not None, f"{self._what}: its turn has not run yet"
        return self._wire

    @property
    def ok(self) -> T:
        """The step's value; fails the test if the step ended in an error."""
        wire = self.wire
        assert "ok" in wire, f"{self._what}: expected ok, got {wire}"
        return self._decode(wire["ok"])

    @property
    def error(self) -> ErrorBody:
        """The error the step ended in; fails the test if it succeeded."""
        wire = self.wire
        assert "error" in wire, f"{self._what}: expected an error, got {wire}"
        return msgspec.convert(wire["error"], ErrorBody)

    def _resolve(self, wire: dict[str, Any]) -> None:
        self._wire = wire


def decode_handle(value: Any) -> GroupHandle:
    return GroupHandle.from_bytes(value)


def decode_settlement(value: Any) -> Settlement:
    return msgspec.convert(value, Settlement)


def decode_none(value: Any) -> None:
    assert value is None, f"expected null, got {value!r}"
