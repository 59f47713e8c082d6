"""Deliberate failure mapping at every handler boundary.

Restate retries an ordinary exception (forever by default; lash's own objects pause after
`HANDLER_RETRY`'s budget, their key held until an operator resumes it), so contract errors leave a
handler as `TerminalError` carrying the error's wire form, and come back out of
a call as the same typed exception (the Temporal-style converter pair).

The wire form is between lash's own handlers: where a failure leaves lash (the caller's handler, a
handler the ingress calls), it is a plain message and the error's status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import wraps
from typing import ParamSpec, TypeVar

import restate
from restate.exceptions import RetryableError, TerminalError

from ...contract import (
    ChildUnroutable,
    EffectGroupUnsupported,
    GroupNotOpen,
    InvalidInput,
    LashError,
    PayloadTooLarge,
    error_from_wire,
)

__all__ = [
    "CANCELLED_STATUS",
    "HANDLER_RETRY",
    "MISS_MARK",
    "NOT_FOUND",
    "CalledInsideRun",
    "client_errors",
    "ends_the_invocation",
    "is_cancellation",
    "is_kill",
    "lash_terminal",
    "raise_typed",
    "terminal_errors",
    "terminal_status",
    "typed",
]

# Restate raises TerminalError("cancelled", 409) at the await a cancelled invocation is parked on.
CANCELLED_STATUS = 409
KILLED = "killed"  # the message of Restate's 409 for a killed invocation (a cancelled one's: "cancelled")
# ADR: the Restate host's form (the ADR's "engine tier") of a routing miss is a terminal 404.
NOT_FOUND = 404
# The metadata key a child's 404 carries once its group has the report of its miss (decision 89).
MISS_MARK = "lash.missed"

# A fault in our own handler code (not a contract error) is retried, but never forever: after the
# budget the invocation pauses, visible to an operator, instead of backing off silently.
HANDLER_RETRY = restate.InvocationRetryPolicy(
    initial_interval=timedelta(milliseconds=50),
    exponentiation_factor=2.0,
    max_interval=timedelta(seconds=10),
    max_attempts=30,
    on_max_attempts="pause",
)

P = ParamSpec("P")
R = TypeVar("R")
_T = TypeVar("_T")


def terminal_status(error: LashError) -> int:
    """The status a contract error leaves a handler with (never 409, which means "cancelled")."""
    if isinstance(error, GroupNotOpen | ChildUnroutable):
        return NOT_FOUND
    if isinstance(error, EffectGroupUnsupported):
        return 501
    if isinstance(error, PayloadTooLarge):
        return 413
    return 400


def lash_terminal(error: LashError) -> TerminalError:
    """The TerminalError a handler raises for a contract error."""
    return TerminalError(error.to_wire(), status_code=terminal_status(error))


class CalledInsideRun(InvalidInput, TerminalError):
    """`InvalidInput` for lash called inside the action of a ``ctx.run``: refused before anything
    was sent or journaled.

    It is a `TerminalError` too, because the SDK ends a run action terminally only when the action
    raises a `TerminalError` itself (it does not look at causes): anything else fails the run
    transiently, and the run is retried into the same refusal forever. The run's recorded failure,
    and the invocation's when the handler does not catch it, are what a client sees: status 400 and
    the message itself (``text``), never lash's wire form.
    """

    def __init__(self, what: str) -> None:
        self.text = (
            f"{what} was called inside a ctx.run action: a group's children are dispatched and "
            "awaited as steps of the handler's own journal, which a run's action (recorded as one "
            f"result, and not run again on replay) cannot hold. Call {what} in the handler body, "
            "outside ctx.run, and pass its result into a run if the run needs it"
        )
        super().__init__(self.text)
        self.message = self.text
        self.status_code = terminal_status(self)
        self.metadata: dict[str, str] | None = None

    def __str__(self) -> str:
        return f"[{self.code}] {self.text}"


def raise_typed(error: TerminalError) -> None:
    """Re-raise a TerminalError from a call as the contract error it carries, if it carries one."""
    typed = error_from_wire(error.message)
    if typed is not None:
        # Chained to a TerminalError: uncaught in a handler, the SDK ends it terminally, and with
        # that one's message, the error's own line, not the wire form (decision 53).
        shown = TerminalError(str(typed), status_code=error.status_code)
        shown.__cause__ = error
        raise typed from shown


def is_cancellation(error: TerminalError) -> bool:
    """Whether ``error`` is Restate's 409 rather than one of lash's (which carries its wire form): this
    invocation's cancel, a call's cancel or kill, or a callee's own 409 (`cancelled` tells those)."""
    return error.status_code == CANCELLED_STATUS and error_from_wire(error.message) is None


def is_kill(error: TerminalError) -> bool:
    """Whether ``error`` is how Restate ends an invocation it killed (what a call to it, or an attach,
    then answers), as against its cancel."""
    return (error.status_code, error.message) == (CANCELLED_STATUS, KILLED)


def ends_the_invocation(error: BaseException) -> bool:
    """Whether ``error`` ends the handler's invocation (decision 104): a lash error (a fact of the
    journal, which a retry would only meet again), else as the SDK reads it, the first
    `TerminalError`, `RetryableError` or SDK-internal exception (a suspension) down its chain of
    causes. A cancel of the invocation is one: the `TerminalError` Restate raises at its await.

    Only an end closes a caller's group (a block's, a combinator's). Restate retries anything else
    (a plain exception, a `RetryableError`), and the retry replays the caller from the journal and
    may get past where this attempt failed (a transient fault, or a fix deployed), where a
    journaled close would meet a journal mismatch; a suspension or a task's cancellation (a
    `BaseException`) stops the attempt."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, TerminalError | LashError):
            return True
        if isinstance(cause, RetryableError) or not isinstance(cause, Exception):
            return False
        cause = cause.__cause__
    return False


def client_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """`terminal_errors` for a handler only a client calls (through the ingress), which takes a
    request: a contract error ends it with its status and ``str(error)``, never the wire form, which
    is lash's own; a request with no body, 400."""

    @wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if len(args) > 1 and args[1] is None:
            # A call with no argument (from inside Restate; its ingress refuses an empty body) reaches
            # the handler as None: read, it raised a plain error, retried while it held the lock.
            raise TerminalError("this handler takes a JSON request body; the request had none", 400)
        try:
            return await fn(*args, **kwargs)
        except LashError as error:
            raise TerminalError(str(error), status_code=terminal_status(error)) from None

    return wrapper


def terminal_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Wrap a handler: contract errors end it terminally; other faults stay retryable, bounded by policy."""

    @wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except LashError as error:
            raise lash_terminal(error) from None

    return wrapper


async def typed(step: Awaitable[_T]) -> _T:
    """Await a durable step; a contract error its `TerminalError` carries comes back typed (decision 5)."""
    try:
        return await step
    except restate.TerminalError as error:
        raise_typed(error)
        raise
