"""Settlements: which child holds a rank, and how it ended."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["Cancelled", "Err", "Ok", "Outcome", "Settlement"]

_STRUCT = {"frozen": True, "kw_only": True, "forbid_unknown_fields": True}


class Ok(msgspec.Struct, tag="ok", **_STRUCT):
    """The child fulfilled with a JSON ``value``."""

    value: Any = None


class Err(msgspec.Struct, tag="err", **_STRUCT):
    """The child rejected; ``code`` is the tool's own error code, if it gave one."""

    message: str
    code: str | None = None


class Cancelled(msgspec.Struct, tag="cancelled", **_STRUCT):
    """The child was cancelled (a `Cancel` loser) before it settled on its own."""


Outcome = Ok | Err | Cancelled


class Settlement(msgspec.Struct, **_STRUCT):
    """Rank ``rank`` (1-based, durable) of a group is the child at ``position``, ending in ``outcome``."""

    rank: int
    position: int
    replay_key: str
    outcome: Outcome
