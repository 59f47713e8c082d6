"""Settlements: which child holds a rank, and how it ended."""

from __future__ import annotations

from typing import Any, Generic

import msgspec
from typing_extensions import TypeVar as DefaultedTypeVar

from ._struct import STRUCT_OPTIONS

__all__ = ["Cancelled", "Err", "Ok", "Outcome", "Settlement"]


# A settlement's value type, to a type checker: `Any` (JSON) unless its group's children say more.
V = DefaultedTypeVar("V", covariant=True, default=Any)


class Ok(msgspec.Struct, Generic[V], tag="ok", **STRUCT_OPTIONS):
    """The child fulfilled with a JSON ``value``; ``Ok[T]`` where its child's type is known (a typed
    call's value, as its handler's output serde reads it)."""

    value: V = None  # type: ignore[assignment]  # a child that answers nothing fulfils with None


class Err(msgspec.Struct, tag="err", **STRUCT_OPTIONS):
    """The child rejected: ``message`` is its own; ``code`` is a call child's callee's status as a
    string (``"409"``), a tool's own error code if it gave one, or lash's (``"too_large"``, say);
    ``metadata`` is what its callee's ``TerminalError.metadata`` (or its tool's `ToolFailure`) gave,
    ``msgspec.UNSET`` when it gave none or the endpoint that settled it does not write it."""

    message: str
    code: str | None = None
    # Omitted when unset, so an Err without it is written as format 1 (decision 118).
    metadata: dict[str, str] | msgspec.UnsetType = msgspec.UNSET


class Cancelled(msgspec.Struct, tag="cancelled", **STRUCT_OPTIONS):
    """The child was cancelled (a `Cancel` loser) before it settled on its own."""


Outcome = Ok[Any] | Err | Cancelled


class Settlement(msgspec.Struct, Generic[V], **STRUCT_OPTIONS):
    """Rank ``rank`` (1-based, durable) of a group is the child at ``position``, ending in ``outcome``.

    ``Settlement[T]`` where its group's children's value type is known (typed calls of one type: their
    handler's output); a bare ``Settlement`` is ``Settlement[Any]``."""

    rank: int
    position: int
    replay_key: str
    outcome: Ok[V] | Err | Cancelled
