"""The step language's builders, for the engine tests that drive `LashTurn` with steps directly.

They are `lash_restate.testing.conformance`'s (`_steps`); `echo` here is always the demo tool (the
conformance scenarios choose tools or calls through their `children` fixture, `Scope.echo`).
"""

from __future__ import annotations

from lash_restate.testing.conformance._steps import (
    Scope,
    call,
    close,
    combine,
    count,
    echo,
    err,
    event,
    fail,
    fresh_scope,
    front,
    iterate,
    next_,
    ok,
    open_,
    save,
    select,
    sleep,
    supports,
    tool,
    typed,
    use,
)

__all__ = [
    "Scope",
    "call",
    "close",
    "combine",
    "count",
    "echo",
    "err",
    "event",
    "fail",
    "fresh_scope",
    "front",
    "iterate",
    "next_",
    "ok",
    "open_",
    "save",
    "select",
    "sleep",
    "supports",
    "tool",
    "typed",
    "use",
]
