"""How an error lash raises ends a Restate invocation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import restate

from ..combinators import AggregateRejection, Rejected
from ..contract import (
    LashError,
)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def terminal(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """A rejection or contract error left uncaught in a handler ends the invocation, not a retry.

    Restate retries any exception but a `TerminalError` (or one caused by it); these are facts of
    the journal that a retry would only meet again, so each is chained to one (ADR: typed errors).
    """

    @wraps(fn)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await fn(*args, **kwargs)
        except (LashError, Rejected, AggregateRejection) as error:
            if not isinstance(error.__cause__, restate.TerminalError):
                error.__cause__ = restate.TerminalError(str(error), 500)
            raise

    return wrapper
