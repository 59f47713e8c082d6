"""How an error lash raises ends a Restate invocation: terminally, with a status and a plain message.

Uncaught in a handler, a rejection ends the invocation as its child ended: a call child's own status,
message and metadata (a callee's ``TerminalError("carrier b refuses", 409)`` reaches the caller's client as
409 ``carrier b refuses``), as if the caller had awaited the call itself. An error of the contract
ends it with its own status (404 for a group or a child that is not there) and ``str(error)``. Never
with lash's wire form, which is between lash's own handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, ParamSpec, TypeVar

import restate

from ..combinators import (
    AggregateRejection,
    ChildRejected,
    Rejected,
    child_message,
    child_metadata,
    child_status,
    describe_rejection,
)
from ..contract import LashError
from ..engine import terminal_status

_P = ParamSpec("_P")
_R = TypeVar("_R")

# How many children an aggregate's message names, and how much of each one's message it keeps.
_NAMED, _EACH = 10, 200


class _Ending(restate.TerminalError):
    """The TerminalError chained to an uncaught lash error (the SDK ends the invocation with it)."""


def ending(error: LashError) -> restate.TerminalError:
    """The TerminalError ``error``, uncaught in a handler, ends its invocation with."""
    if isinstance(error, Rejected | ChildRejected):
        position, outcome = (
            (error.settlement.position, error.settlement.outcome)
            if isinstance(error, Rejected)
            else (error.position, error.outcome)
        )
        return _Ending(child_message(position, outcome), child_status(outcome), child_metadata(outcome))
    if isinstance(error, AggregateRejection):
        named = [
            f"child {child.position}: {describe_rejection(child.outcome)[:_EACH]}"
            for child in error.exceptions[:_NAMED]
        ]
        more = len(error.exceptions) - _NAMED
        message = f"{error.message}: {'; '.join(named)}" + (f"; and {more} more" if more > 0 else "")
        # One status (and metadata) when every child ended alike; children that disagree have nothing
        # better than 500 (and none).
        return _Ending(message, error.status_code, error.metadata)
    return _Ending(str(error), terminal_status(error))


# A coroutine, not any awaitable: mypy and pyright flag a coroutine left unused (a forgotten await).
def terminal(fn: Callable[_P, Coroutine[Any, Any, _R]]) -> Callable[_P, Coroutine[Any, Any, _R]]:
    """A rejection or contract error left uncaught in a handler ends the invocation, not a retry.

    Restate retries any exception but a `TerminalError` (or one caused by it); these are facts of
    the journal that a retry would only meet again, so each is chained to one (ADR: typed errors),
    with the status and message of `ending`. The SDK ends the invocation with the first TerminalError
    of the chain, so one chained already (the wire form the error was decoded from) stays below it.
    """

    @wraps(fn)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with terminal_here():
            return await fn(*args, **kwargs)

    return wrapper


@contextmanager
def terminal_here() -> Iterator[None]:
    """`terminal` for a block of a handler's own code, such as building a child (`lash.call(...)`):
    a lash error raised in it ends the invocation as `terminal` says, never a retry of bad input."""
    try:
        yield
    except LashError as error:
        if not isinstance(error, restate.TerminalError) and not isinstance(error.__cause__, _Ending):
            shown = ending(error)
            shown.__cause__ = error.__cause__
            error.__cause__ = shown
        raise
