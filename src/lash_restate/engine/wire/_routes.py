"""Every hop between the Restate host's own services, typed: one `Route` per handler, one place to read them.

The SDK's typed calls (`ctx.object_call(handler_fn, ...)`) need the bound handler function, which the
actor factories create per endpoint and which refer to one another in a cycle (the group dispatches
the pump, the pump settles into the group); so a hop names its target here, with its message types,
and the actor module binds its handler under the same route (decision 23). `tests/engine` checks that
every route is bound by `lash_services` with the route's input type.

Where a handler's code is: its binding in `group/_group.py`, `child/_child.py`, `pump/_pump.py` or
`child/_signal.py`, and its body an ``on_<handler>`` function of the module for its job, which the
binding names (`LashGroup/wait` is `group/_group_rank.py`'s `on_wait`); but `LashSignal`'s
`subscribe`, `unsubscribe`, `emit`, `reject` and `clear`, a few lines each, written in their binding,
and `LashPump/run`, the baseline's, whose body is `compat/_pump_compat.py`'s `on_baseline_run`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Generic, TypeVar

import msgspec
import restate
from restate import SendHandle

from ...contract import InvalidInput, LashError, RuntimeEffectEnvelope, RuntimeErrorCode
from ._errors import is_cancellation
from ._messages import (
    CallerEnded,
    ChildrenFailed,
    ChildRun,
    CloseRequest,
    Guard,
    MissedChildren,
    OpenRequest,
    OperatorClose,
    OperatorClosed,
    OperatorRedispatch,
    OperatorRedispatched,
    OperatorResend,
    OperatorResent,
    OutcomesRead,
    PartedOpen,
    PumpAwait,
    PumpParts,
    PumpReport,
    PumpRun,
    Reclaim,
    ReportReply,
    RunEnded,
    RunsWatch,
    SettleBatch,
    StagedPart,
    WaitReply,
    WaitRequest,
)

__all__ = [
    "CHILD",
    "CHILD_EXECUTE",
    "CHILD_EXECUTE2",
    "CHILD_FAIL",
    "CHILD_FORGET",
    "CHILD_OUTCOME",
    "CHILD_RUN",
    "DEFAULT_PREFIX",
    "GROUP",
    "GROUP_CALLER_ENDED",
    "GROUP_CLOSE",
    "GROUP_GUARD",
    "GROUP_HELD",
    "GROUP_HOLD",
    "GROUP_MISSED",
    "GROUP_OPEN",
    "GROUP_OPEN_PARTS",
    "GROUP_OPERATOR_CLOSE",
    "GROUP_OPERATOR_REDISPATCH",
    "GROUP_OPERATOR_RESEND",
    "GROUP_RECLAIM",
    "GROUP_REPORT",
    "GROUP_RUN_ENDED",
    "GROUP_SAVED",
    "GROUP_SETTLE",
    "GROUP_SHARED",
    "GROUP_WAIT",
    "GROUP_WATCH",
    "GROUP_WATCH_RUNS",
    "PUMP",
    "PUMP_FAIL",
    "PUMP_FORGET",
    "PUMP_OUTCOMES",
    "PUMP_REDISPATCH",
    "PUMP_RUN",
    "PUMP_RUN2",
    "PUMP_RUN_PARTS",
    "PUMP_STAGE",
    "PUMP_STAGED",
    "ROLES",
    "ROUTES",
    "SIGNAL",
    "SIGNAL_CLEAR",
    "SIGNAL_EMIT",
    "SIGNAL_OPERATOR_RESEND",
    "SIGNAL_REJECT",
    "SIGNAL_SUBSCRIBE",
    "SIGNAL_UNSUBSCRIBE",
    "PrefixChosen",
    "Route",
    "check_prefix",
    "described_by",
    "group_of_pump",
    "groups_wired",
    "incarnation_of_pump",
    "named",
    "pump_key",
    "use_groups_served_elsewhere",
    "use_prefix",
    "wire_groups",
]

# The services' names are a prefix (`Lash` unless the application chooses another) and these roles,
# so two applications can bind lash's objects on one Restate cluster side by side (decision 40).
GROUP = "Group"  # virtual object keyed by group key: the rank authority
CHILD = "Child"  # virtual object keyed by replay key: child-as-invocation and its outcome store
PUMP = "Pump"  # virtual object keyed by incarnation and group key: one group's children, settled in batches
SIGNAL = "Signal"  # virtual object keyed by event name: the durable-wait service for AwaitEvent
ROLES = (GROUP, CHILD, PUMP, SIGNAL)  # lash's four services, each named `{prefix}{role}`

DEFAULT_PREFIX = "Lash"
_PREFIX = re.compile(r"[A-Z][A-Za-z0-9]{0,31}")


class _Naming:
    """This process's prefix: chosen once, before lash's services are bound or called."""

    prefix = DEFAULT_PREFIX
    chosen = False


def check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise InvalidInput(f"service prefix {prefix!r}: an uppercase letter, then up to 31 letters or digits")
    return prefix


class PrefixChosen(LashError, ValueError):
    """This process already names lash's services with another prefix: a prefix is chosen once."""

    code = RuntimeErrorCode.PREFIX_CHOSEN

    def __str__(self) -> str:
        return self.message


def use_prefix(prefix: str | None = None) -> str:
    """Name lash's services ``{prefix}Group``, ``{prefix}Child``, … in this process (decision 40), and
    answer the prefix. ``None`` keeps the one already chosen (`DEFAULT_PREFIX` if none was) and fixes
    it: a default never changes the process's prefix, it takes it (decision 54)."""
    if prefix is None:
        prefix = _Naming.prefix
    check_prefix(prefix)
    if _Naming.chosen and prefix != _Naming.prefix:
        raise PrefixChosen(f"this process already names lash's services {_Naming.prefix}*, not {prefix}*")
    _Naming.prefix, _Naming.chosen = prefix, True
    return prefix


class _Wiring:
    """Whether this process can open groups (decision 47): it bound lash's services with a resolver
    (`lash_services`, validated), or it declared that another deployment serves them."""

    resolver = False
    elsewhere = False


def wire_groups() -> None:
    """Called once lash's services are assembled with a validated resolver in this process."""
    _Wiring.resolver = True


def use_groups_served_elsewhere(prefix: str | None = None) -> None:
    """A process that only calls lash: another deployment of its cluster serves lash's services under
    ``prefix`` (default: this process's; and that deployment cannot start without a resolver)."""
    use_prefix(prefix)
    _Wiring.elsewhere = True


def groups_wired() -> bool:
    """What a controller's `supports_effect_groups()` answers in this process, unless told."""
    return _Wiring.resolver or _Wiring.elsewhere


def named(role: str, prefix: str | None = None) -> str:
    """The service name of ``role`` (`GROUP`, `CHILD`, …) under ``prefix`` (default: this process's)."""
    return f"{_Naming.prefix if prefix is None else check_prefix(prefix)}{role}"


I = TypeVar("I")  # noqa: E741 - the SDK's own name for a handler's input type
O = TypeVar("O")  # noqa: E741 - and for its output type


class Route(Generic[I, O]):
    """One handler of one of our services: where it is, what it takes, what it answers."""

    __slots__ = ("_decoder", "handler", "input", "output", "role")

    def __init__(self, role: str, handler: str, input: Any, output: type[O]) -> None:
        self.role = role
        self.handler = handler
        self.input = input
        self.output = output
        self._decoder: msgspec.json.Decoder[O] | None = (
            None if output in (bytes, type(None)) else msgspec.json.Decoder(output)
        )

    @property
    def service(self) -> str:
        return named(self.role)

    def _encode(self, arg: I) -> bytes:
        return b"" if arg is None else msgspec.json.encode(arg)  # a handler taking nothing gets no body

    def call(self, ctx: restate.Context, key: str, arg: I) -> restate.RestateDurableCallFuture[bytes]:
        """The raw call, a durable future that `restate.gather` and `select` take; `reply` decodes it."""
        return ctx.generic_call(self.service, self.handler, self._encode(arg), key=key)

    def send(self, ctx: restate.Context, key: str, arg: I, *, delay: timedelta | None = None) -> SendHandle:
        """A one-way message, journaled in the sender's invocation; ``delay``ed, if given."""
        encoded = self._encode(arg)
        if delay is not None:
            return ctx.generic_send(self.service, self.handler, encoded, key=key, send_delay=delay)
        return ctx.generic_send(self.service, self.handler, encoded, key=key)

    def reply(self, data: bytes) -> O:
        if self._decoder is None:
            return data  # type: ignore[return-value]  # bytes outputs pass through, None ones are unread
        return self._decoder.decode(data)

    async def ask(self, ctx: restate.Context, key: str, arg: I) -> O:
        """Call and decode the answer."""
        return self.reply(await self.call(ctx, key, arg))

    async def ask_made_again(self, ctx: restate.Context, key: str, arg: I) -> tuple[O, bool]:
        """`ask`, made again each time the call ends cancelled or killed, and whether this
        invocation's own cancel came meanwhile.

        For what lash's handlers tell each other and must be heard: an operator may kill or cancel
        the call while it waits behind its key's other work (decisions 86, 91). The SDK delivers
        this invocation's own cancel once, raised by the wait (and cancelling the call, which is
        made again), where the call's failure is raised by its answer.
        """
        noted = False
        while True:
            asked = self.call(ctx, key, arg)
            try:
                await restate.wait_completed(asked)  # this invocation's own cancel raises here
            except restate.TerminalError as error:
                if not is_cancellation(error):
                    raise
                noted = True
                continue
            try:
                return self.reply(await asked), noted
            except restate.TerminalError as error:
                if not is_cancellation(error):
                    raise

    def __repr__(self) -> str:
        return f"Route({self.service}/{self.handler})"


GROUP_OPEN: Route[OpenRequest, None] = Route(GROUP, "open", OpenRequest, type(None))
GROUP_SETTLE: Route[SettleBatch, None] = Route(GROUP, "settle", SettleBatch, type(None))
GROUP_WAIT: Route[WaitRequest, WaitReply] = Route(GROUP, "wait", WaitRequest, WaitReply)
GROUP_CLOSE: Route[CloseRequest, None] = Route(GROUP, "close", CloseRequest, type(None))
GROUP_WATCH: Route[CallerEnded, None] = Route(GROUP, "watch", CallerEnded, type(None))
GROUP_CALLER_ENDED: Route[CallerEnded, None] = Route(GROUP, "caller_ended", CallerEnded, type(None))
# Decision 45: a caller that saved a handle is watched until it ends, and how it ended is recorded.
GROUP_HOLD: Route[CallerEnded, None] = Route(GROUP, "hold", CallerEnded, type(None))
GROUP_HELD: Route[CallerEnded, None] = Route(GROUP, "held", CallerEnded, type(None))
# A caller saved the group's handle: recorded at once, then held (decision 78). It carries a
# `CallerEnded` (``failed`` unread: a save is no end) because callers journaled it so.
GROUP_SAVED: Route[CallerEnded, None] = Route(GROUP, "saved", CallerEnded, type(None))
# Decision 61: a pump of a group recorded now reports its settlements here, and learns if it is closed.
GROUP_REPORT: Route[PumpReport, ReportReply] = Route(GROUP, "report", PumpReport, ReportReply)
# Decision 65: an open too large for one message, its children staged with the pumps first.
GROUP_OPEN_PARTS: Route[PartedOpen, None] = Route(GROUP, "open_parts", PartedOpen, type(None))
# The operator's close: a public handler of the group object (with `operator_redispatch` and
# `operator_resend`), reached through the ingress by
# `lash-restate groups close`; never called between lash's own services (so not in ROUTES).
GROUP_OPERATOR_CLOSE: Route[OperatorClose, OperatorClosed] = Route(
    GROUP, "operator_close", OperatorClose, OperatorClosed
)
# Children whose runner was missing (a child's run sends them, decision 73): kept for inspection and
# for the operator's re-dispatch, which needs no reopen.
GROUP_MISSED: Route[MissedChildren, None] = Route(GROUP, "missed", MissedChildren, type(None))
# The operator's re-dispatch of those children, reached through the ingress by `lash-restate groups
# redispatch`; never called between lash's own services (so not in ROUTES).
GROUP_OPERATOR_REDISPATCH: Route[OperatorRedispatch, OperatorRedispatched] = Route(
    GROUP, "operator_redispatch", OperatorRedispatch, OperatorRedispatched
)
# The operator's resend of an open Restate killed or cancelled before it answered its caller (decision
# 93), or of a guard's look at a caller's wakes (decision 128), reached through the ingress by
# `lash-restate groups stranded --resend` (so not in ROUTES).
GROUP_OPERATOR_RESEND: Route[OperatorResend, OperatorResent] = Route(
    GROUP, "operator_resend", OperatorResend, OperatorResent
)
# What an open or a reopen dispatched is watched until it ends: one ended in failure (an operator's
# kill) settles the children it had not settled with that failure, as a killed callee answers its caller.
GROUP_WATCH_RUNS: Route[RunsWatch, None] = Route(GROUP, "watch_runs", RunsWatch, type(None))
GROUP_RUN_ENDED: Route[RunEnded, None] = Route(GROUP, "run_ended", RunEnded, type(None))
# A group nobody can resume is closed a retention after it was orphaned (decision 78).
GROUP_RECLAIM: Route[Reclaim, None] = Route(GROUP, "reclaim", Reclaim, type(None))
# A caller's wakes live in the group's record: deleted outside lash, they are ended as a close ends them.
GROUP_GUARD: Route[Guard, None] = Route(GROUP, "guard", Guard, type(None))
# The group's handlers that run beside the others (shared); the rest run one at a time on its key,
# so one of them held (paused by an operator, say) holds up the group's reports, reads and close.
GROUP_SHARED = frozenset(
    route.handler for route in (GROUP_WATCH, GROUP_HOLD, GROUP_OPERATOR_RESEND, GROUP_WATCH_RUNS)
)

CHILD_RUN: Route[ChildRun, str] = Route(CHILD, "run", ChildRun, str)
CHILD_EXECUTE: Route[RuntimeEffectEnvelope, bytes] = Route(CHILD, "execute", RuntimeEffectEnvelope, bytes)
# Decision 111: a pump's child, told its group's incarnation (its miss report is fenced by it, and a
# call is made as the incarnation says); `execute` stays bound for the pumps that journaled it.
CHILD_EXECUTE2: Route[ChildRun, bytes] = Route(CHILD, "execute2", ChildRun, bytes)
CHILD_OUTCOME: Route[str, bytes] = Route(CHILD, "outcome", str, bytes)
CHILD_FORGET: Route[str, None] = Route(CHILD, "forget", str, type(None))
CHILD_FAIL: Route[ChildrenFailed, str] = Route(CHILD, "fail", ChildrenFailed, str)

# The baseline's pump (format 1), still served for the runs it sent; this release's is `run2`.
PUMP_RUN: Route[PumpRun, None] = Route(PUMP, "run", PumpRun, type(None))
PUMP_OUTCOMES: Route[list[int] | OutcomesRead, bytes] = Route(
    PUMP, "outcomes", list[int] | OutcomesRead, bytes
)
PUMP_FORGET: Route[None, None] = Route(PUMP, "forget", None, type(None))
# A pumped group's pump, as this release's open sends it (decision 66: with the open's plan).
PUMP_RUN2: Route[PumpAwait, None] = Route(PUMP, "run2", PumpAwait, type(None))
# Decision 65: a slice of a group opened in parts, staged by its opener, then run.
PUMP_STAGE: Route[StagedPart, None] = Route(PUMP, "stage", StagedPart, type(None))
PUMP_RUN_PARTS: Route[PumpParts, None] = Route(PUMP, "run_parts", PumpParts, type(None))
# Decision 126: whether the slice's children are staged here, which a first open in parts asks of its
# first slice's pump before it records the group.
PUMP_STAGED: Route[None, bool] = Route(PUMP, "staged", None, bool)
# A reopen's re-dispatch of one slice of a pumped group: the
# dispatch `run2` makes and the reports it sends, so a re-run child ranks as a first run's does.
PUMP_REDISPATCH: Route[PumpAwait, None] = Route(PUMP, "redispatch", PumpAwait, type(None))
# Decision 74: the children of a run that ended in failure (killed, say), settled with that failure
# through this slice's store, as a run stores and reports them.
PUMP_FAIL: Route[ChildrenFailed, None] = Route(PUMP, "fail", ChildrenFailed, type(None))

SIGNAL_SUBSCRIBE: Route[str, None] = Route(SIGNAL, "subscribe", str, type(None))
# A cancelled event child's awakeable, which nobody will read: the event forgets it.
SIGNAL_UNSUBSCRIBE: Route[str, None] = Route(SIGNAL, "unsubscribe", str, type(None))
# The operator's resend of a waiting child's subscription, lost when the event's state was cleared
# outside lash (decision 129), reached through the ingress by `lash-restate groups stranded --resend`.
SIGNAL_OPERATOR_RESEND: Route[OperatorResend, OperatorResent] = Route(
    SIGNAL, "operator_resend", OperatorResend, OperatorResent
)
# The event's public handlers, which the ingress reaches too (so not among ROUTES, the private
# hops): what `lash.emit`, `lash.reject_event` and `lash.clear_event` send from a handler.
SIGNAL_EMIT: Route[Any, None] = Route(SIGNAL, "emit", object, type(None))
SIGNAL_REJECT: Route[str, None] = Route(SIGNAL, "reject", str, type(None))
SIGNAL_CLEAR: Route[None, None] = Route(SIGNAL, "clear", type(None), type(None))

ROUTES: tuple[Route[Any, Any], ...] = (
    GROUP_OPEN,
    GROUP_SETTLE,
    GROUP_WAIT,
    GROUP_CLOSE,
    GROUP_WATCH,
    GROUP_CALLER_ENDED,
    GROUP_HOLD,
    GROUP_HELD,
    GROUP_SAVED,
    GROUP_REPORT,
    GROUP_OPEN_PARTS,
    GROUP_MISSED,
    GROUP_WATCH_RUNS,
    GROUP_RUN_ENDED,
    GROUP_RECLAIM,
    GROUP_GUARD,
    CHILD_RUN,
    CHILD_EXECUTE,
    CHILD_EXECUTE2,
    CHILD_OUTCOME,
    CHILD_FORGET,
    CHILD_FAIL,
    PUMP_RUN,
    PUMP_OUTCOMES,
    PUMP_FORGET,
    PUMP_RUN2,
    PUMP_STAGE,
    PUMP_STAGED,
    PUMP_RUN_PARTS,
    PUMP_REDISPATCH,
    PUMP_FAIL,
    SIGNAL_SUBSCRIBE,
    SIGNAL_UNSUBSCRIBE,
)


def pump_key(group_key: str, incarnation: str, slice_index: int = 0) -> str:
    """The key of the pump of ``incarnation``'s slice ``slice_index``: ``{incarnation}:{group key}``,
    a further slice's ``{incarnation}.{slice}:{group key}`` (its mark inside the incarnation part, so
    `group_of_pump` finds the group key after the first colon in every one). One pump per incarnation
    and slice: a namesake opened after a close never queues behind the old losers. A child's pump is
    `slice_key`'s (a bounded group's one pump runs every slice)."""
    return f"{incarnation}.{slice_index}:{group_key}" if slice_index else f"{incarnation}:{group_key}"


def group_of_pump(key: str) -> str:
    """The group key inside a `pump_key` (an incarnation is a UUID with a marker or two: no colon)."""
    return key.partition(":")[2]


def incarnation_of_pump(key: str) -> str:
    """The group incarnation inside a `pump_key`, a further slice's too:
    ``{incarnation}[.{slice}]:{group key}`` (an incarnation holds no dot or colon)."""
    return key.partition(":")[0].partition(".")[0]


_F = TypeVar("_F", bound=Callable[..., Any])


def described_by(body: Callable[..., Any]) -> Callable[[_F], _F]:
    """Give a bound handler its body's docstring: Restate publishes it as the handler's description."""

    def described(handler: _F) -> _F:
        handler.__doc__ = body.__doc__
        return handler

    return described
