"""Typed errors: one tree of everything lash raises, each class with a stable code.

``except lash.LashError`` catches whatever lash raises. Every error carries ``code`` (a
`RuntimeErrorCode`, stable across releases) and ``message``; where a group or a child is involved
it also carries ``group_key``, ``position`` and ``replay_key`` (None otherwise)::

    LashError
    ├── Rejected                    lash.all / race / select rejected: the first consumed rejection
    ├── AggregateRejection          lash.any found no success (also an ExceptionGroup of ChildRejected)
    ├── ChildRejected               one child's rejection inside an AggregateRejection
    ├── EffectGroupUnsupported      this host does not do groups at all
    ├── InvalidInput                a value failed validation before anything was recorded
    │   ├── InvalidGroupKey
    │   ├── InvalidEnvelope
    │   ├── InvalidHandle
    │   ├── InvalidSettlement
    │   └── PayloadTooLarge         a child's open would not fit one of Restate's messages
    ├── GroupShapeError             the group, as built or as reopened, is refused whole
    │   ├── EmptyGroup              race([]) and any([]): no child to decide
    │   ├── ForeignGroupKey
    │   ├── PermutedPosition
    │   ├── WakeRuleDrift
    │   ├── DispositionDrift
    │   ├── DuplicateReplayKey
    │   ├── ChildUnroutable         first open: the resolver has no runner for a child
    │   └── ShapeMismatch           reopen: recorded count / wake / disposition differ
    ├── ReplayMismatch              reopen: a recorded child's envelope hash differs
    ├── CursorError
    │   ├── CursorOverrun           advancing past the last child (refused, not clamped)
    │   └── HandleMismatch          the handle's child count is not the group's
    ├── GroupNotOpen                no such group is recorded (never opened, or closed)
    ├── DispositionWidening         close tried to widen Cancel back to RunToCompletion
    ├── AwaitCancelled              the caller's cancel fired first; cursor and rank untouched
    ├── MembershipUnsupported       a grouped envelope reached a path with no membership slot
    ├── UndecodableResult           a typed call's recorded value is not what its handler returns
    ├── DeploymentError             the endpoint, as assembled, cannot run groups (a RuntimeError too)
    ├── ServerUnavailable           the HTTP server asked for is not installed (a RuntimeError too)
    ├── SettingsError               settings failed validation (a ValueError too)
    ├── PrefixChosen                this process already names lash's services otherwise (a ValueError too)
    ├── RegistrationError           the admin API refused the deployment, or could not be reached
    │   ├── PrefixTaken             another application's deployment serves lash's services there
    │   └── RegistrationRefused     the admin API refused this client's token (401, 403)
    ├── AdminError                  the admin API refused a request, or could not be reached
    │   └── AdminRefused            the admin API refused this client's token (401, 403)
    ├── InspectionError             the admin API refused a query about groups, or could not be reached
    │   └── CloseRefused            an operator's close would not close: parked, open, or changed
    └── StackError                  lash_restate.testing: a part of the local stack failed to start
        └── CallFailed              lash_restate.testing: a handler a test called answered an error status

The rejections are in ``lash_restate.combinators``, `DeploymentError` and `ServerUnavailable` in
``lash_restate.engine``, the others in the module that raises them (``settings``, ``registration``,
``admin``, ``inspection``, ``testing``); everything an application's own code meets is re-exported by
``import lash_restate as lash``. `ToolFailure` is not in the tree: it is what a tool raises *to*
lash (the child then settles `Err`), never what lash raises.

``str(error)`` of an error of the contract (the classes of this module) is ``[code] message`` and,
when set, where it happened; of the others, their message alone (a line for a person). Uncaught in a
Restate handler, an error of the contract ends the invocation with a status of its own (404 for a
group or a child that is not there), and a rejection with its child's status and message.

The contract's errors cross process and handler boundaries as a wire form
(:meth:`LashError.to_wire` / :func:`error_from_wire`), so a code raised inside one of lash's
handlers arrives at its caller as the same typed exception. That form is lash's own: it is
translated at the edge and never reaches a client.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import ClassVar, Self

__all__ = [
    "AwaitCancelled",
    "ChildUnroutable",
    "CursorError",
    "CursorOverrun",
    "DispositionDrift",
    "DispositionWidening",
    "DuplicateReplayKey",
    "EffectGroupUnsupported",
    "EmptyGroup",
    "ForeignGroupKey",
    "GroupNotOpen",
    "GroupShapeError",
    "HandleMismatch",
    "InvalidEnvelope",
    "InvalidGroupKey",
    "InvalidHandle",
    "InvalidInput",
    "InvalidSettlement",
    "LashError",
    "MembershipUnsupported",
    "PayloadTooLarge",
    "PermutedPosition",
    "ReplayMismatch",
    "RuntimeErrorCode",
    "ShapeMismatch",
    "UndecodableResult",
    "WakeRuleDrift",
    "a_kind",
    "error_from_wire",
    "without_wire",
]


def a_kind(value: object) -> str:
    """What ``value`` is, for a refusal's message: its type's name with its article (``an int``)."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


class RuntimeErrorCode(StrEnum):
    """Stable, machine-readable codes. Values never change once released."""

    EFFECT_GROUP_UNSUPPORTED = "effect_group_unsupported"
    INVALID_INPUT = "invalid_input"
    INVALID_GROUP_KEY = "invalid_group_key"
    INVALID_ENVELOPE = "invalid_envelope"
    INVALID_HANDLE = "invalid_handle"
    INVALID_SETTLEMENT = "invalid_settlement"
    GROUP_SHAPE = "group_shape"
    EMPTY_GROUP = "empty_group"
    FOREIGN_GROUP_KEY = "foreign_group_key"
    PERMUTED_POSITION = "permuted_position"
    WAKE_RULE_DRIFT = "wake_rule_drift"
    DISPOSITION_DRIFT = "disposition_drift"
    DUPLICATE_REPLAY_KEY = "duplicate_replay_key"
    CHILD_UNROUTABLE = "child_unroutable"
    SHAPE_MISMATCH = "shape_mismatch"
    REPLAY_MISMATCH = "replay_mismatch"
    CURSOR = "cursor"
    CURSOR_OVERRUN = "cursor_overrun"
    HANDLE_MISMATCH = "handle_mismatch"
    GROUP_NOT_OPEN = "group_not_open"
    DISPOSITION_WIDENING = "disposition_widening"
    AWAIT_CANCELLED = "await_cancelled"
    MEMBERSHIP_UNSUPPORTED = "membership_unsupported"
    TOO_LARGE = "too_large"
    UNDECODABLE_RESULT = "undecodable_result"
    # The codes of the errors raised outside the contract. They never cross lash's wire: a wire
    # line carrying one is not an error (`error_from_wire` answers None).
    REJECTED = "rejected"
    AGGREGATE_REJECTION = "aggregate_rejection"
    CHILD_REJECTED = "child_rejected"
    DEPLOYMENT = "deployment"
    SERVER_UNAVAILABLE = "server_unavailable"
    SETTINGS = "settings"
    PREFIX_CHOSEN = "prefix_chosen"
    REGISTRATION = "registration"
    PREFIX_TAKEN = "prefix_taken"
    REGISTRATION_REFUSED = "registration_refused"
    ADMIN = "admin"
    ADMIN_REFUSED = "admin_refused"
    INSPECTION = "inspection"
    CLOSE_REFUSED = "close_refused"
    STACK = "stack"
    CALL_FAILED = "call_failed"


class LashError(Exception):
    """The root of everything lash raises; ``code`` is stable across releases.

    Never raised itself. ``message`` is what went wrong; ``group_key``, ``position`` and
    ``replay_key`` say where, when a group or a child is involved (None otherwise).
    """

    code: ClassVar[RuntimeErrorCode] = RuntimeErrorCode.INVALID_INPUT
    message: str
    group_key: str | None = None
    position: int | None = None
    replay_key: str | None = None

    def __init__(
        self,
        message: str,
        *,
        group_key: str | None = None,
        position: int | None = None,
        replay_key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.group_key = group_key
        self.position = position
        self.replay_key = replay_key

    def __str__(self) -> str:
        where = [
            f"{name}={value!r}"
            for name, value in (
                ("group_key", self.group_key),
                ("position", self.position),
                ("replay_key", self.replay_key),
            )
            if value is not None
        ]
        suffix = f" ({', '.join(where)})" if where else ""
        return f"[{self.code}] {self.message}{suffix}"

    def wire_body(self) -> dict[str, str | int]:
        """The JSON object of this error: ``code`` and ``message``, and each location that is set.

        The one place an error becomes JSON: :meth:`to_wire` carries it across handlers and the
        turn driver answers a step with it.
        """
        body: dict[str, str | int] = {"code": str(self.code), "message": self.message}
        if self.group_key is not None:
            body["group_key"] = self.group_key
        if self.position is not None:
            body["position"] = self.position
        if self.replay_key is not None:
            body["replay_key"] = self.replay_key
        return body

    def to_wire(self) -> str:
        """One JSON line that :func:`error_from_wire` turns back into this error."""
        return _WIRE_PREFIX + json.dumps(self.wire_body(), sort_keys=True, separators=(",", ":"))


class EffectGroupUnsupported(LashError):
    """This host does not do groups (no `GroupExecutors` resolver is registered); nothing was recorded."""

    code = RuntimeErrorCode.EFFECT_GROUP_UNSUPPORTED


class InvalidInput(LashError, ValueError):
    """A value failed validation before anything was recorded; fix the input and call again."""

    code = RuntimeErrorCode.INVALID_INPUT


class InvalidGroupKey(InvalidInput):
    """A group key is not `{scope_id}:group:{batch_id}:{occurrence}`."""

    code = RuntimeErrorCode.INVALID_GROUP_KEY


class InvalidEnvelope(InvalidInput):
    """An envelope or command is malformed (unknown command, non-JSON args, bad duration…)."""

    code = RuntimeErrorCode.INVALID_ENVELOPE


class InvalidHandle(InvalidInput):
    """A saved handle does not decode to a consistent cursor."""

    code = RuntimeErrorCode.INVALID_HANDLE


class InvalidSettlement(InvalidInput):
    """A settlement names a child the group does not hold (forged, or for another group)."""

    code = RuntimeErrorCode.INVALID_SETTLEMENT


class PayloadTooLarge(InvalidInput):
    """A child (or a group's children together) would not fit one message under Restate's message
    limit; refused before anything was sent or recorded. The message says the size and the limit."""

    code = RuntimeErrorCode.TOO_LARGE


class GroupShapeError(LashError, ValueError):
    """The group, as built or as reopened, is refused whole; nothing of it was recorded."""

    code = RuntimeErrorCode.GROUP_SHAPE


class EmptyGroup(GroupShapeError):
    """A group has no child. `all([])` resolves locally to ``[]`` and opens no group, but `race([])`
    would never settle and `any([])` has no child to succeed, so a group needs at least one child and
    both are refused."""

    code = RuntimeErrorCode.EMPTY_GROUP


class ForeignGroupKey(GroupShapeError):
    """A child's membership names another group's key."""

    code = RuntimeErrorCode.FOREIGN_GROUP_KEY


class PermutedPosition(GroupShapeError):
    """A child's membership position is not its index in the group."""

    code = RuntimeErrorCode.PERMUTED_POSITION


class WakeRuleDrift(GroupShapeError):
    """A child's membership wake rule is not the group's."""

    code = RuntimeErrorCode.WAKE_RULE_DRIFT


class DispositionDrift(GroupShapeError):
    """A child's membership disposition is not the group's."""

    code = RuntimeErrorCode.DISPOSITION_DRIFT


class DuplicateReplayKey(GroupShapeError):
    """Two children share a replay key, so settlements could not tell them apart."""

    code = RuntimeErrorCode.DUPLICATE_REPLAY_KEY


class ChildUnroutable(GroupShapeError):
    """First open: the registered resolver has no runner for this child, so the whole open is refused."""

    code = RuntimeErrorCode.CHILD_UNROUTABLE

    @classmethod
    def no_executor(cls, what: str, *, group_key: str, position: int, replay_key: str) -> Self:
        """The refusal for a child nobody can run; ``what`` names it (see `describe_command`).

        Args:
            what: the child as the message names it (`describe_command`, or `describe_miss`).
            group_key: the group's key.
            position: the child's position in the group.
            replay_key: the child's replay key.

        Returns:
            The error, to raise.
        """
        return cls(
            f"no executor is registered for {what}",
            group_key=group_key,
            position=position,
            replay_key=replay_key,
        )


class ShapeMismatch(GroupShapeError):
    """Reopen: the recorded group's child count, wake rule or disposition differs from the one passed."""

    code = RuntimeErrorCode.SHAPE_MISMATCH


class ReplayMismatch(LashError):
    """Reopen: a child's envelope hash differs from the recorded one (its command or membership drifted)."""

    code = RuntimeErrorCode.REPLAY_MISMATCH


class CursorError(LashError):
    """The caller's cursor does not fit the group it points at."""

    code = RuntimeErrorCode.CURSOR


class CursorOverrun(CursorError):
    """Every settlement was already consumed; advancing further is refused, never clamped."""

    code = RuntimeErrorCode.CURSOR_OVERRUN


class HandleMismatch(CursorError):
    """The handle's child count is not the recorded group's: it belongs to another shape."""

    code = RuntimeErrorCode.HANDLE_MISMATCH


class GroupNotOpen(LashError):
    """The cursor's group is not open: no group with its key is recorded (never opened here, or
    closed), or the one recorded was opened again under the key after the cursor's was closed; on
    Restate also a group whose record was deleted, or whose open an operator killed while it ran."""

    code = RuntimeErrorCode.GROUP_NOT_OPEN

    @classmethod
    def not_recorded(cls, *, group_key: str) -> Self:
        """An await or read found no record under ``group_key``."""
        return cls("no such group is recorded (never opened, or closed)", group_key=group_key)

    @classmethod
    def closed_while_awaiting(cls, *, group_key: str) -> Self:
        """A close retired the group while this caller was waiting on it."""
        return cls("the group was closed while awaiting", group_key=group_key)

    @classmethod
    def opened_again(cls, *, group_key: str) -> Self:
        """A cursor's group was closed, and another group has been opened under its key since."""
        message = (
            "the group this cursor read was closed, and its key was opened again since, as another "
            "group: a cursor reads only the group it was saved from (this one can be discarded)"
        )
        return cls(message, group_key=group_key)

    @classmethod
    def open_killed(cls, *, group_key: str) -> Self:
        """The group's first open was killed (an operator's `restate invocations kill`) while it ran,
        after it answered this caller: Restate's kill also killed every child it had started."""
        message = (
            "the group's open was killed while it ran (Restate's kill also killed the children it had "
            "started, so none of them will settle)"
        )
        return cls(message, group_key=group_key)

    @classmethod
    def record_gone(cls, *, group_key: str) -> Self:
        """The group's record was deleted outside lash (its state cleared) while this caller waited."""
        message = "the group's record was deleted while awaiting (its state was cleared)"
        return cls(message, group_key=group_key)


class DispositionWidening(LashError):
    """Close asked for RunToCompletion on a group declared Cancel; close may only narrow."""

    code = RuntimeErrorCode.DISPOSITION_WIDENING


class AwaitCancelled(LashError):
    """The caller's cancel won the race; the cursor and every durable rank are untouched."""

    code = RuntimeErrorCode.AWAIT_CANCELLED

    @classmethod
    def at_rank(cls, rank: int, *, group_key: str) -> Self:
        """The cancel fired while the caller awaited ``rank``."""
        return cls(f"cancelled while awaiting rank {rank}", group_key=group_key)


class MembershipUnsupported(LashError):
    """A grouped envelope reached a dispatch path with no slot for its membership (refused, not stripped)."""

    code = RuntimeErrorCode.MEMBERSHIP_UNSUPPORTED


class UndecodableResult(LashError):
    """A typed call's child settled with a value its handler's output serde cannot read (the callee
    answered another shape than the reference it was called by declares); the settlement itself is
    recorded and unchanged."""

    code = RuntimeErrorCode.UNDECODABLE_RESULT


_WIRE_PREFIX = "lash-error:"

_BY_CODE: dict[str, type[LashError]] = {}


def _index(cls: type[LashError]) -> None:
    _BY_CODE[str(cls.code)] = cls
    for sub in cls.__subclasses__():
        _index(sub)


_index(LashError)


def error_from_wire(text: str) -> LashError | None:
    """The typed error a :meth:`LashError.to_wire` line encodes, or None if ``text`` is not one."""
    if not text.startswith(_WIRE_PREFIX):
        return None
    try:
        body = json.loads(text[len(_WIRE_PREFIX) :])
        cls = _BY_CODE[body["code"]]
        position = body.get("position")
        return cls(
            str(body["message"]),
            group_key=body.get("group_key"),
            position=int(position) if position is not None else None,
            replay_key=body.get("replay_key"),
        )
    except (ValueError, KeyError, TypeError, OverflowError):  # `int(1e400)` overflows
        return None


def without_wire(text: str) -> str:
    """``text`` with a :meth:`LashError.to_wire` line in it (as in ``[404] lash-error:{…}``) shown as
    the error's ``str``: what an edge that prints a failure Restate recorded shows a person."""
    at = text.find(_WIRE_PREFIX)
    if at < 0:
        return text
    try:
        _, end = json.JSONDecoder().raw_decode(text, at + len(_WIRE_PREFIX))
    except ValueError:
        return text
    typed = error_from_wire(text[at:end])
    return text if typed is None else text[:at] + str(typed) + text[end:]
