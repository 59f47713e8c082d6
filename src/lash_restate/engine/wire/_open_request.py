"""`LashGroup/open`'s request, and how the group reads it: a child as format 1 writes it (the base64
of its canonical envelope) or as a raw envelope (raw JSON), which the group reads and no release
writes. The open is a command of the caller's journal, replayed byte for byte by every later
release: a release can write the raw form only under a new handler, never through `open`."""

from __future__ import annotations

import msgspec
from restate.serde import Serde

from ...contract import GroupShape
from ._records import RECORD_OPTIONS

__all__ = ["OpenRequest", "OpenRequestSerde", "decode_open"]


# See decision 25 (its docstring is what Restate's UI shows).
class OpenRequest(msgspec.Struct, **RECORD_OPTIONS):
    """Sent, not called: the group answers on the caller's awakeable ``reply_to``."""

    reply_to: str
    shape: GroupShape
    children: list[bytes]  # canonical envelopes, stamped with membership
    caller: str | None = None  # the opener's invocation id, watched under a declared Cancel
    wakes: list[str] = msgspec.field(default_factory=list)  # first open: awakeables for ranks 1, 2, …
    reopen_only: bool = False  # a resume: refuse rather than record a group that is not (decision 41)
    # `max_in_flight` (decision 81): a first open records it in the group's incarnation; absent, unbounded.
    window: int | msgspec.UnsetType = msgspec.UNSET
    # A resume's: the incarnation its cursor names (decision 124); a group opened under the key since
    # is refused. Omitted when unset: every open of a cursor naming none is encoded as before.
    reopens: str | msgspec.UnsetType = msgspec.UNSET


class _OpenRequestIn(msgspec.Struct, **RECORD_OPTIONS):
    """How `LashGroup/open` reads an `OpenRequest`: its children either as format 1 writes them (a
    JSON string, the base64 of the canonical envelope) or as the envelope itself, raw JSON (no
    base64, so no third over the argument's size; read since decision 46, written by no release,
    and only ever under a new handler, as the module says)."""

    reply_to: str
    shape: GroupShape
    children: list[msgspec.Raw]
    caller: str | None = None
    wakes: list[str] = msgspec.field(default_factory=list)
    reopen_only: bool = False
    window: int | msgspec.UnsetType = msgspec.UNSET
    reopens: str | msgspec.UnsetType = msgspec.UNSET


_OPEN_IN = msgspec.json.Decoder(_OpenRequestIn)
_BASE64 = msgspec.json.Decoder(bytes)


def decode_open(data: bytes) -> OpenRequest:
    """An `OpenRequest` from either format: each child becomes its canonical envelope's bytes."""
    read = _OPEN_IN.decode(data)
    # Field for field (a test holds the two structs to the same fields): only the children differ.
    fields = {name: getattr(read, name) for name in _OpenRequestIn.__struct_fields__}
    fields["children"] = [_child_bytes(bytes(raw)) for raw in read.children]
    return OpenRequest(**fields)


def _child_bytes(raw: bytes) -> bytes:
    return _BASE64.decode(raw) if raw[:1] == b'"' else raw  # format 1: a base64 string; 2: the envelope


class OpenRequestSerde(Serde[OpenRequest]):
    """The open handler's input: both child formats read, format 1 written."""

    def deserialize(self, buf: bytes) -> OpenRequest | None:
        return decode_open(buf) if buf else None

    def serialize(self, obj: OpenRequest | None) -> bytes:
        return msgspec.json.encode(obj) if obj is not None else b""
