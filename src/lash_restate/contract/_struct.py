"""The one msgspec configuration of every record the project encodes.

Frozen (a decoded record is a fact, not a scratchpad), keyword-only (a field
added later cannot shift a positional caller), and ``forbid_unknown_fields``
(a peer's drifted or forged message is refused, not half read).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["STRUCT_OPTIONS"]

STRUCT_OPTIONS: Final[Mapping[str, bool]] = MappingProxyType(
    {"frozen": True, "kw_only": True, "forbid_unknown_fields": True}
)
"""Pass as ``class Message(msgspec.Struct, **STRUCT_OPTIONS)``."""
