"""The front door: what a Restate application needs, from ``import lash_restate as lash``.

Inside a handler, ``await lash.race(ctx, [lash.call("Payments", "charge", order), lash.sleep(...)])``
opens a durable group of those children under a key derived the ADR's way, consumes it and closes
it. The key is ``{invocation id}:group:{content hash}:{occurrence}`` (decision 38): the scope is the
invocation, the batch is a hash of the children, and the occurrence counts the groups with the same
children this invocation has opened before, in the order the handler runs (replay-stable).
"""

from __future__ import annotations

from ..contract import Child
from ._children import TypedCall, call, event, sleep, tool
from ._combinators import all, all_settled
from ._endpoint import app, external, serve, services, use_prefix
from ._events import clear_event, emit, reject_event
from ._first import any, race, select
from ._group import Group, Opening, open
from ._invocation import controller

__all__ = [
    "Child",
    "Group",
    "Opening",
    "TypedCall",
    "all",
    "all_settled",
    "any",
    "app",
    "call",
    "clear_event",
    "controller",
    "emit",
    "event",
    "external",
    "open",
    "race",
    "reject_event",
    "select",
    "serve",
    "services",
    "sleep",
    "tool",
    "use_prefix",
]
