"""Messages between the controller and the tier's handlers, and where each service is bound."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from restate.serde import Serde

from ..contract import GroupShape, LoserPolicy, Outcome

__all__ = [
    "CHILD",
    "GROUP",
    "SIGNAL",
    "TURN",
    "CloseRequest",
    "Miss",
    "OpenReply",
    "OpenRequest",
    "Ref",
    "SettleRequest",
    "WaitReply",
    "WaitRequest",
    "Waiter",
    "MsgspecSerde",
    "POSITIONS",
    "SHAPE",
    "STRINGS",
    "WAITERS",
    "decode",
    "decode_outcome",
    "encode",
]

GROUP = "LashGroup"  # virtual object keyed by group key: the rank authority
CHILD = "LashChild"  # virtual object keyed by replay key: child-as-invocation and its outcome store
SIGNAL = "LashSignal"  # virtual object keyed by event name: the durable-wait service for AwaitEvent
TURN = "LashTurn"  # driver service: runs a caller's turn (dev stack and tests)

_T = TypeVar("_T")

_STRUCT = {"frozen": True, "kw_only": True, "forbid_unknown_fields": True}


class Miss(msgspec.Struct, **_STRUCT):
    """The first child the caller's resolver could not route (refuses a first open, ignored by a reopen)."""

    position: int
    replay_key: str
    what: str


class OpenRequest(msgspec.Struct, **_STRUCT):
    shape: GroupShape
    children: list[bytes]  # canonical envelopes, stamped with membership
    miss: Miss | None = None
    caller: str | None = None  # the opener's invocation id, watched under a declared Cancel


class OpenReply(msgspec.Struct, **_STRUCT):
    reopened: bool


class SettleRequest(msgspec.Struct, **_STRUCT):
    """A child's one-way settlement: a reference (its position and replay key), never the payload."""

    position: int
    replay_key: str


class WaitRequest(msgspec.Struct, **_STRUCT):
    """Serve ranks after ``consumed``; if none is recorded yet, resolve ``awakeable`` when one is."""

    consumed: int
    child_count: int
    awakeable: str | None = None


class Ref(msgspec.Struct, **_STRUCT):
    """Where a rank's payload lives: the `LashChild` object keyed by ``replay_key``."""

    position: int
    replay_key: str


class WaitReply(msgspec.Struct, **_STRUCT):
    """References for ranks ``consumed + 1``, ``consumed + 2``, … as recorded right now."""

    refs: list[Ref]


class Waiter(msgspec.Struct, **_STRUCT):
    awakeable: str
    consumed: int


class CloseRequest(msgspec.Struct, **_STRUCT):
    child_count: int
    disposition: LoserPolicy | None = None


class MsgspecSerde(Serde[_T]):
    """State and awakeable values as msgspec JSON of a declared type (the SDK default is json.dumps)."""

    def __init__(self, kind: Any) -> None:
        self._decoder: msgspec.json.Decoder[_T] = msgspec.json.Decoder(kind)

    def deserialize(self, buf: bytes) -> _T | None:
        return self._decoder.decode(buf) if buf else None

    def serialize(self, obj: _T | None) -> bytes:
        return msgspec.json.encode(obj) if obj is not None else b""


SHAPE: MsgspecSerde[GroupShape] = MsgspecSerde(GroupShape)
POSITIONS: MsgspecSerde[list[int]] = MsgspecSerde(list[int])
STRINGS: MsgspecSerde[list[str]] = MsgspecSerde(list[str])
WAITERS: MsgspecSerde[list[Waiter]] = MsgspecSerde(list[Waiter])


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


def decode(data: bytes, kind: type[_T]) -> _T:
    return msgspec.json.decode(data, type=kind)


def decode_outcome(data: bytes) -> Outcome:
    return msgspec.json.decode(data, type=Outcome)
