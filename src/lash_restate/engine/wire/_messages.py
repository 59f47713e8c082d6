"""The messages the Restate host's services exchange (each hop's route in `_routes.py`), and their limits."""

from __future__ import annotations

import base64
import binascii
from typing import Any, TypeVar

import msgspec

from ...contract import (
    BODY_LIMIT,
    OUTCOME_LIMIT,
    GroupShape,
    InvalidInput,
    LoserPolicy,
    Outcome,
    RuntimeEffectEnvelope,
)
from ...contract import STRUCT_OPTIONS as STRICT_OPTIONS
from ._open_request import OpenRequest, OpenRequestSerde, decode_open
from ._records import RECORD_OPTIONS, MsgspecSerde, SettlementMode

__all__ = [
    "BATCH_INLINE_BYTES",
    "CANCEL_SIGNAL",
    "FIRST_AWAKEABLE_SIGNAL",
    "INLINE_OUTCOME_BYTES",
    "READ_BUDGET",
    "READ_BUDGET_SINCE_BASELINE",
    "RUN_REPLY",
    "CallerEnded",
    "ChildRun",
    "ChildrenFailed",
    "CloseRequest",
    "Guard",
    "MissedChildren",
    "OpenReply",
    "OpenRequest",
    "OpenRequestSerde",
    "OperatorClose",
    "OperatorClosed",
    "OperatorRedispatch",
    "OperatorRedispatched",
    "OperatorResend",
    "OperatorResent",
    "OutcomesRead",
    "PartedOpen",
    "PumpAwait",
    "PumpParts",
    "PumpReport",
    "PumpRun",
    "Reclaim",
    "Ref",
    "ReportReply",
    "RunEnded",
    "RunsWatch",
    "SettleBatch",
    "StagedPart",
    "WaitReply",
    "WaitRequest",
    "WatchedRun",
    "decode",
    "decode_open",
    "decode_outcome",
    "encode",
    "is_invocation_id",
    "require_awakeable",
    "require_invocation_id",
    "settle_sent",
]

# An outcome up to this size rides the settle message and the wake, so a waiting caller needs no
# second round trip; it is never written to group state (ADR: payloads never transit object state).
INLINE_OUTCOME_BYTES = 16 * 1024

# A batch carries outcomes inline up to this many bytes in all; the rest are read from the store.
BATCH_INLINE_BYTES = 1024 * 1024

# A bulk read of outcomes answers at most this many bytes past its first outcome (which it answers
# whatever its size, up to OUTCOME_LIMIT): its reply stays under the limit for one message. Format 1
# writes this value; it stays.
READ_BUDGET = 30 * 1024 * 1024
# What a caller's bulk reads of a group a release since the baseline opened answer in all, past the
# first outcome (`read_budget`): Restate 1.7 bounds what one invocation has in flight per direction
# (32 MiB, `per-invocation-memory-limit`), and a caller whose reads came back near that stalled,
# live and on its replay after a crash, where a native `gather` of the same results did not
# (decision 142). The baseline's callers read with READ_BUDGET, as they journaled it.
READ_BUDGET_SINCE_BASELINE = 4 * 1024 * 1024
# A bulk read's commas and brackets over its budget: at most 256 outcomes per read.
OUTCOMES_READ_SLACK = 512
assert READ_BUDGET + OUTCOMES_READ_SLACK <= BODY_LIMIT
assert OUTCOME_LIMIT + 2 <= BODY_LIMIT

_T = TypeVar("_T")


# See decisions 65, 84 (its docstring is what Restate's UI shows).
class StagedPart(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashPump/stage` receives: one slice's children of a group opened in parts.

    Called by the opener, before its `PartedOpen`, to the pump that will run that slice; the pump
    keeps them, then checks that it can route every child (refusing `ChildUnroutable` otherwise: the
    group decides whether that refuses the open).
    """

    group_key: str
    children: list[RuntimeEffectEnvelope]


# See decisions 65, 84 (its docstring is what Restate's UI shows).
class PartedOpen(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashGroup/open_parts` receives: an open too large for one message.

    As an `OpenRequest`, answered on ``reply_to``, but without the children: the opener staged them,
    one `StagedPart` per slice, with the pumps keyed by ``stage`` (which a first open records as the
    group's incarnation). ``parts`` is how many it staged: 0 for a resume, which stages nothing.
    ``unroutable`` is the first refusal a stage answered (a `ChildUnroutable`'s wire line): a first
    open is refused with it, a reopen refuses nothing.
    """

    reply_to: str
    shape: GroupShape
    stage: str
    parts: int
    caller: str | None = None
    wakes: list[str] = msgspec.field(default_factory=list)
    reopen_only: bool = False
    # Unset (not written) when every child routed: the bytes of such an open are as they were.
    unroutable: str | msgspec.UnsetType = msgspec.UNSET
    reopens: str | msgspec.UnsetType = msgspec.UNSET  # as `OpenRequest.reopens` (decision 124)


class OpenReply(msgspec.Struct, **RECORD_OPTIONS):
    reopened: bool
    incarnation: str = ""  # the wakes an open registers belong to this incarnation (decision 32)


# See decision 13 (its docstring is what Restate's UI shows).
class CallerEnded(msgspec.Struct, **RECORD_OPTIONS):
    """An opener's invocation ended; ``failed`` if in failure, killed or cancelled."""

    caller: str
    incarnation: str
    failed: bool = True


# See decision 111 (its docstring is what Restate's UI shows).
class ChildRun(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashChild/run` receives (and `execute2`, a pump's child): the stamped envelope and the
    group incarnation it settles into."""

    envelope: RuntimeEffectEnvelope
    incarnation: str


class MissedChildren(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashGroup/missed` receives: children whose runner was missing, so their run ended with
    no outcome (ADR: a routing fact, never an outcome); sent by each such child before it ends.

    The group keeps them (it keeps no child's envelope otherwise), so that inspection lists them
    and an operator's re-dispatch can run them again once a deployment routes them, without a reopen.
    """

    children: list[RuntimeEffectEnvelope]
    incarnation: str = ""  # "" from a baseline group's pump's `execute`, not told it: the fence checks


class WatchedRun(msgspec.Struct, **RECORD_OPTIONS):
    """An invocation the group dispatched, and the positions of the children it runs (None: every
    child of the group, as its pump)."""

    invocation: str
    positions: list[int] | None = None


class RunsWatch(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashGroup/watch_runs` receives: the invocations an open or a reopen dispatched, to be
    attached to until each ends; one that ends in failure (killed, say) is reported as `RunEnded`."""

    incarnation: str
    runs: list[WatchedRun]
    # Openers of a group that does not watch them otherwise (not `Cancel`): an opener that ends in
    # failure without saving its handle leaves the group to be reclaimed (decision 78). UNSET is
    # never encoded, so a watch with no opener is the same bytes as an earlier release's.
    callers: list[str] | msgspec.UnsetType = msgspec.UNSET
    # True: ``runs`` are the group's repairs of killed runs (`LashChild/fail`, a pump's `fail`),
    # which nothing of lash cancels, so a cancel of one is an operator's (decision 92). UNSET is
    # never encoded: a watch of runs is the same bytes as before.
    repairs: bool | msgspec.UnsetType = msgspec.UNSET


class RunEnded(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashGroup/run_ended` receives: a dispatched invocation ended in failure without settling
    the children at ``positions`` (None: every child); they settle with that failure, or, with
    ``cancelled``, as `Cancelled` (a run cancelled before it ran, as it would have settled them)."""

    incarnation: str
    positions: list[int] | None
    message: str
    code: str
    cancelled: bool | msgspec.UnsetType = msgspec.UNSET  # decision 97; omitted when unset


class Guard(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashGroup/guard` receives ``after_ms`` after it was sent: the wakes ``waiters`` (awakeable
    ids) registered with the group, ended as a close ends them if the group's record is gone."""

    incarnation: str
    waiters: list[str]
    after_ms: int


# See decision 78 (its docstring is what Restate's UI shows).
class Reclaim(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashGroup/reclaim` receives, a retention after the group was orphaned; ``at`` is when
    it was due, as `reclaim_at` holds it: a later orphaning's supersedes it."""

    incarnation: str
    at: int


class ChildrenFailed(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashPump/fail` (one slice's children) and `LashChild/fail` (one child) receive: settle
    each child at ``positions`` with ``outcome`` unless an outcome is stored for it already."""

    group_key: str
    incarnation: str
    positions: list[int]
    replay_keys: list[str]
    outcome: Outcome


class PumpRun(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashPump/run` receives: the group's stamped envelopes and the incarnation they settle into."""

    group_key: str
    children: list[RuntimeEffectEnvelope]
    incarnation: str


# See decision 61 (its docstring is what Restate's UI shows).
class PumpAwait(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashPump/run2` receives: one group incarnation's children to await.

    It calls each (a call child straight to the user's handler, anything else through
    `LashChild/execute2`; past `PUMP_SLICE` through a tree of further pumps): it is each child's only
    caller. The group's own pump ``listens``: it tells the group how to reach it in its
    first report and releases its store when the group closes.
    """

    group_key: str
    incarnation: str
    children: list[RuntimeEffectEnvelope] = msgspec.field(default_factory=list)
    listens: bool = True
    # How to call each child (`call` or `child`, one per child), decided by the open that records
    # the group (decision 66): the pump journals no plan of its own before its calls. Every `run2`
    # carries it; absent (UNSET, never encoded) from a `redispatch`, whose pump plans and journals
    # it itself.
    plan: list[str] | msgspec.UnsetType = msgspec.UNSET


# See decision 65 (its docstring is what Restate's UI shows).
class PumpParts(msgspec.Struct, **RECORD_OPTIONS):
    """What `LashPump/run_parts` receives: run the slices ``first`` … ``first + count - 1`` of a
    group opened in parts, whose children each slice's pump keeps staged.

    The pump runs its own slice (``first``) and hands the rest, in at most `PUMP_FANOUT` runs, to the
    pumps of their first slices. The group's own pump ``listens``, as a `PumpAwait`'s does.
    """

    group_key: str
    incarnation: str
    first: int
    count: int
    listens: bool = True


# See decision 61 (its docstring is what Restate's UI shows).
class PumpReport(msgspec.Struct, **RECORD_OPTIONS):
    """A pump's settlements, called into `LashGroup/report` and answered with `ReportReply`.

    ``listen`` (first report of the group's pump only): the awakeable the close resolves so that the
    pump releases its store and stops. ``left``: the pump stopped listening with its store kept, so the
    close must release it with a `LashPump/forget`.
    """

    incarnation: str
    refs: list[Ref] = msgspec.field(default_factory=list)
    listen: str | None = None
    left: bool = False


class ReportReply(msgspec.Struct, **RECORD_OPTIONS):
    """Whether the group the report was for is still open; if not, nothing it holds will be read."""

    open: bool


class OutcomesRead(msgspec.Struct, **RECORD_OPTIONS):
    """A bulk read of a pump's outcomes, in the order asked, within ``budget`` bytes in all.

    Decision 35: a caller reads from every pump its ranks span at once, so each gets a share of one
    reply's size; only the pump asked with ``first`` answers its first outcome whatever its size, so
    the read always makes progress. (A bare list of positions is read with the whole budget.)
    """

    positions: list[int]
    budget: int = READ_BUDGET
    first: bool = True


class Ref(msgspec.Struct, **RECORD_OPTIONS):
    """A settled child: which one, and its outcome when small enough to ride the message. It names
    no rank: a `WaitReply`'s refs are consecutive ranks, which the reader numbers from its cursor's
    next (`RestateController._read`); a report's, settlements the group has yet to rank."""

    position: int
    replay_key: str
    outcome: bytes | None = None  # at most INLINE_OUTCOME_BYTES; never stored by the group


class SettleBatch(msgspec.Struct, **RECORD_OPTIONS):
    """Settlements in the order their sender saw them: one from a direct child (`LashGroup/settle`);
    many from a pump of an earlier release (this release's pumps `report`, `PumpReport`).

    ``mode`` says who sent it, so a settlement that finds its group closed can release its store.
    """

    incarnation: str
    mode: SettlementMode
    refs: list[Ref]


class WaitRequest(msgspec.Struct, **RECORD_OPTIONS):
    """Serve ranks after ``consumed``; if none is recorded yet, register ``wakes`` for the next ranks."""

    consumed: int
    child_count: int
    wakes: list[str] = msgspec.field(default_factory=list)  # awakeables for ranks consumed + 1, + 2, …
    # At most this many ranks (a plain await serves one, asking for a window to read ahead); absent,
    # as many as the group serves at once.
    # Omitted when absent, so a request without it is encoded as before (its caller's journal holds it).
    at_most: int | msgspec.UnsetType = msgspec.UNSET
    # The incarnation the caller's cursor names (decision 124): a group opened under the key since its
    # own was closed refuses it. Omitted when the cursor names none, as a baseline group's does.
    incarnation: str | msgspec.UnsetType = msgspec.UNSET


class WaitReply(msgspec.Struct, **RECORD_OPTIONS):
    """References for ranks ``consumed + 1``, ``consumed + 2``, … as recorded right now: `wait`'s
    answer, and also what resolves a caller's wake, then with the one rank it was registered for.

    ``mode`` and ``incarnation`` say where the outcomes not carried inline are stored.
    """

    refs: list[Ref]
    mode: SettlementMode = SettlementMode.DIRECT
    incarnation: str = ""


# See decision 45 (its docstring is what Restate's UI shows).
class OperatorClose(msgspec.Struct, **STRICT_OPTIONS):
    """An operator's close through the ingress, answered with `OperatorClosed`.

    ``incarnation`` is the capability: it is read from the group's state through the admin API, so
    only someone who can read that state can close, and only the incarnation they looked at.
    ``openers`` is how many openers they saw: a group reopened since is refused, to be looked at again.

    Strict, unlike the engine's other messages: a close must never act on a request it half read.
    """

    incarnation: str
    openers: int
    cancel: bool = False  # narrow a RunToCompletion group to Cancel (a declared Cancel stays Cancel)


class OperatorClosed(msgspec.Struct, **RECORD_OPTIONS):
    closed: bool  # False: nothing was closed (``refused`` says why, or the group was not open)
    disposition: LoserPolicy | None = None  # the disposition the close applied
    cancelled: int = 0  # cancels sent: one per unsettled child, or the one pump
    refused: str | None = None


class OperatorRedispatch(msgspec.Struct, **STRICT_OPTIONS):
    """An operator's re-dispatch through the ingress, answered with `OperatorRedispatched`: run again
    the children of incarnation ``incarnation`` whose runner was missing (`MissedChildren`).

    The incarnation is read from the group's state through the admin API, as for `OperatorClose`.
    """

    incarnation: str


class OperatorRedispatched(msgspec.Struct, **RECORD_OPTIONS):
    dispatched: int = 0  # children dispatched again
    unroutable: int = 0  # children still missing a runner on the endpoint that answered
    refused: str | None = None  # why nothing was done (the group is another incarnation, or not open)


# See decision 93 (its docstring is what Restate's UI shows).
class OperatorResend(msgspec.Struct, **STRICT_OPTIONS):
    """An operator's resend through the ingress, answered with `OperatorResent`: the open
    (``handler``: `open` or `open_parts`) a caller sent, which Restate killed or cancelled before it
    answered, ``request`` as the caller's journal holds it; a guard's look at a caller's wakes
    (``handler``: `guard`, ``request`` a `Guard`) that Restate killed; or, to an event, a waiting
    child's subscription (``handler``: `subscribe`, ``request`` the awakeable's id) that the event's
    cleared state lost. The object (the group, or the event) sends it to itself again."""

    handler: str
    request: bytes


class OperatorResent(msgspec.Struct, **RECORD_OPTIONS):
    invocation: str  # the open (the guard's look, the subscription) sent again


class CloseRequest(msgspec.Struct, **RECORD_OPTIONS):
    child_count: int
    disposition: LoserPolicy | None = None  # None keeps the declared one
    # The incarnation the closing invocation opened or read (decision 113): a namesake opened since
    # under the key is not closed by it. Omitted when unset: the baseline's callers send none.
    incarnation: str | msgspec.UnsetType = msgspec.UNSET


# An awakeable's id: this prefix, then (base64url, unpadded) the invocation id's 24 bytes and the
# index of the signal that completes it (4 bytes, big-endian), as Restate's protocol writes it.
AWAKEABLE = "sign_1"


# The service protocol keeps signal indices 1 to 16 for Restate's own signals (1 is an invocation's
# cancel): an awakeable's index is 17 or more (the SDK numbers them from 17).
FIRST_AWAKEABLE_SIGNAL = 17
CANCEL_SIGNAL = 1  # the signal that cancels an invocation, as its journal shows it


def awakeable_signal(awakeable: str) -> int | None:
    """The index of the signal that completes ``awakeable`` in its invocation's journal; None when it
    is no awakeable's id (Restate refuses to complete one, and retries the handler that tries; or,
    naming one of Restate's own signals, would complete that: an invocation's cancel)."""
    if not awakeable.startswith(AWAKEABLE):
        return None
    text = awakeable.removeprefix(AWAKEABLE)
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    index = int.from_bytes(raw[-4:], "big") if len(raw) == 28 else 0
    return index if index >= FIRST_AWAKEABLE_SIGNAL else None


def require_awakeable(awakeable: str) -> None:
    """Refuse (`InvalidInput`) what is no awakeable's id before a handler sends it on: Restate would
    refuse to complete it, and retry the handler that tries, holding its object's queue."""
    if awakeable_signal(awakeable) is None:
        raise InvalidInput(f"{awakeable!r} is not an awakeable's id: Restate would refuse to complete it")


# Restate's invocation id: `inv_`, the id scheme's version `1`, then its partition key (a u64) and
# its UUID (a u128), each in fixed-width base62 of this alphabet (restate `base62_util.rs`).
_BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGIT = {c: i for i, c in enumerate(_BASE62)}


def is_invocation_id(text: str) -> bool:
    """Whether ``text`` parses as a Restate invocation id. Restate refuses a whole query that names
    one it cannot parse (a 500), and retries for ever a handler that attaches to one (`RT0017`), so
    an id that is not one (a record written by hand, a forged message) is refused or left out."""
    if len(text) != 38 or not text.startswith("inv_1") or any(c not in _DIGIT for c in text[5:]):
        return False
    partition_key, uuid = _base62(text[5:16]), _base62(text[16:])
    return partition_key < 1 << 64 and uuid < 1 << 128


def _base62(digits: str) -> int:
    value = 0
    for c in digits:
        value = value * 62 + _DIGIT[c]
    return value


def require_invocation_id(text: str) -> None:
    """Refuse (`InvalidInput`) what is no invocation's id before a handler watches it: Restate would
    fail the attach as a bad command, and retry the handler that sends it for ever."""
    if not is_invocation_id(text):
        raise InvalidInput(f"{text!r} is not an invocation's id: Restate could not attach to it")


def awakeable_invocation(awakeable: str) -> str | None:
    """The id of the invocation ``awakeable`` completes a signal of (it created it); None when it is
    no awakeable's id. Its 24 bytes are the partition key (8) and the UUID (16), each little-endian
    (as restate-server 1.7 writes them: checked against the ids it gave)."""
    if awakeable_signal(awakeable) is None:
        return None
    text = awakeable.removeprefix(AWAKEABLE)
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    partition_key, uuid = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:24], "little")
    return f"inv_1{_base62_digits(partition_key, 11)}{_base62_digits(uuid, 22)}"


def _base62_digits(value: int, width: int) -> str:
    digits = ""
    while value:
        value, digit = divmod(value, 62)
        digits = _BASE62[digit] + digits
    return digits.rjust(width, "0")


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


def decode(data: bytes, kind: type[_T]) -> _T:
    return msgspec.json.decode(data, type=kind)


def decode_outcome(data: bytes) -> Outcome:
    return msgspec.json.decode(data, type=Outcome)


# `LashChild/run`'s answer: the invocation id of the settle it sent into its group ("" if none); a
# run of an earlier release answers nothing.
RUN_REPLY: MsgspecSerde[str] = MsgspecSerde(str)


def settle_sent(raw: bytes) -> str | None:
    """The settle a run answered it sent (`RUN_REPLY`), if it answered one: what any other watched
    invocation answers (a pump's nothing, a settle's own nothing) names none."""
    try:
        sent = msgspec.json.decode(raw, type=str | None) if raw else None
    except msgspec.DecodeError:
        return None  # not a run's answer: never a reason to fail the watch (it would be retried)
    return sent or None
