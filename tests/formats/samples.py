"""One sample value of every record and message the Restate host writes, with how it is written and read.

Each sample's name is ``{format}.{variant}``, where ``{format}`` is a row of
`lash_restate.engine.FORMATS`. `format1.json` holds the bytes of each sample as first written (the
baseline's records by the baseline's code, a later record by the release that introduced it), made
by `make_fixtures.py` and never rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from lash_restate.contract import (
    AwaitEvent,
    Call,
    Cancelled,
    ChildUnroutable,
    Err,
    GroupHandle,
    GroupMembership,
    GroupNotOpen,
    GroupShape,
    GroupWakePolicy,
    LoserPolicy,
    Ok,
    Outcome,
    RuntimeEffectEnvelope,
    ShapeMismatch,
    Sleep,
    ToolCall,
    canonical_bytes,
    decode_envelope,
    error_from_wire,
)
from lash_restate.engine.group._pages import RankTail
from lash_restate.engine.wire._messages import (
    RUN_REPLY,
    CallerEnded,
    ChildrenFailed,
    ChildRun,
    CloseRequest,
    Guard,
    MissedChildren,
    OpenReply,
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
    Ref,
    ReportReply,
    RunEnded,
    RunsWatch,
    SettleBatch,
    StagedPart,
    WaitReply,
    WaitRequest,
    WatchedRun,
    decode_open,
    settle_sent,
)
from lash_restate.engine.wire._records import GroupMeta, Opener, OpenerEnd, PumpLink, SettlementMode, Waiter

__all__ = ["SAMPLES", "Sample"]


@dataclass(frozen=True)
class Sample:
    name: str
    value: Any
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


def _json(kind: Any) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """Written with msgspec JSON, read as ``kind``: how every engine record and message is kept."""
    return msgspec.json.encode, lambda data: msgspec.json.decode(data, type=kind)


def _raw() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """Kept as the bytes themselves (the signal's payload and rejection)."""
    return bytes, bytes


def _outcomes_reply() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """A pump's bulk read answer: its stored outcome bytes joined into one JSON array."""
    return (
        lambda outcomes: b"[" + b",".join(msgspec.json.encode(o) for o in outcomes) + b"]",
        lambda data: msgspec.json.decode(data, type=list[Outcome]),
    )


def _error() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    def decode(data: bytes) -> Any:
        error = error_from_wire(data.decode())
        assert error is not None, data
        return error

    return lambda error: error.to_wire().encode(), decode


def _open(raw: bool = False) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """The group's open request, read as `LashGroup/open` reads it (either child format)."""

    def encode(request: OpenRequest) -> bytes:
        if not raw:
            return msgspec.json.encode(request)
        fields = msgspec.to_builtins(request)
        fields["children"] = [msgspec.Raw(child) for child in request.children]
        return msgspec.json.encode(fields)

    return encode, decode_open


def _handle() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    return lambda handle: handle.to_bytes(), GroupHandle.from_bytes


def _envelope() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    return canonical_bytes, decode_envelope


KEY = "inv_1abc:group:5f1c9a:0"
INCARNATION = "0b6c2f4e-3d1a-4c8e-9f70-2a5b8e1d4c37"
# As a release that records saves writes one (decision 78).
SAVES_INCARNATION = f"{INCARNATION}-s"
_KEYS = ("inv_1abc:5f1c9a:0:0", "inv_1abc:5f1c9a:0:1", "inv_1abc:5f1c9a:0:2")
_HASHES = tuple(f"{i:x}" * 64 for i in range(10, 13))


def _member(position: int, wake: GroupWakePolicy, disposition: LoserPolicy) -> GroupMembership:
    return GroupMembership(group_key=KEY, position=position, wake=wake, disposition=disposition)


_FIRST, _CANCEL = GroupWakePolicy.FIRST, LoserPolicy.CANCEL
TOOL = RuntimeEffectEnvelope(
    command=ToolCall(tool="echo", args={"text": "ä ☃", "n": [1, 2.5, None, True]}),
    replay_key=_KEYS[0],
    membership=_member(0, _FIRST, _CANCEL),
)
SLEEP = RuntimeEffectEnvelope(
    command=Sleep(duration_ms=1500), replay_key=_KEYS[1], membership=_member(1, _FIRST, _CANCEL)
)
EVENT = RuntimeEffectEnvelope(
    command=AwaitEvent(name="paid"), replay_key=_KEYS[2], membership=_member(2, _FIRST, _CANCEL)
)
CALL = RuntimeEffectEnvelope(
    command=Call(service="Payments", handler="charge", arg={"amount": 12}, key="order-7"),
    replay_key=_KEYS[0],
    membership=_member(0, GroupWakePolicy.ALL, LoserPolicy.RUN_TO_COMPLETION),
)
CALL_PLAIN = RuntimeEffectEnvelope(
    command=Call(service="Thin", handler="instant"),
    replay_key=_KEYS[1],
    membership=_member(1, GroupWakePolicy.FIRST_SUCCESS, LoserPolicy.RUN_TO_COMPLETION),
)
# A call given what a native call gives its callee beside the argument (written since they exist).
CALL_OPTIONS = msgspec.structs.replace(
    CALL,
    command=msgspec.structs.replace(
        CALL.command, headers={"x-tenant": "acme"}, scope="billing", limit_key="acme/u42"
    ),
)
CALL_IDEMPOTENT = msgspec.structs.replace(
    CALL, command=msgspec.structs.replace(CALL.command, idempotency_key="order-7")
)
# An object keyed with the empty string, as Restate keys one (written since decision 135).
CALL_EMPTY_KEY = msgspec.structs.replace(CALL, command=msgspec.structs.replace(CALL.command, key=""))
UNGROUPED = RuntimeEffectEnvelope(command=ToolCall(tool="count"), replay_key="inv_1abc:effect:3")

SHAPE = GroupShape(child_count=3, wake=_FIRST, disposition=_CANCEL, replay_keys=_KEYS, hashes=_HASHES)

OUTCOMES: dict[str, Outcome] = {
    "ok": Ok(value={"charged": 12, "items": ["a", "b"]}),
    "ok_none": Ok(value=None),
    "err": Err(message="carrier b refuses", code="409"),
    "err_plain": Err(message="gave up after 3 attempts: RuntimeError: transient fault 3 of 99"),
    # A callee's metadata, written only where the endpoint is told (decision 118); read since it exists.
    "err_metadata": Err(message="out of stock", code="409", metadata={"left": "5", "sku": "A-1"}),
    "cancelled": Cancelled(),
}

_ORDER = b"\x02\x00\x00\x00\x00\x00\x00\x00"  # ranks 1, 2 = positions 2, 0

META: dict[str, GroupMeta] = {
    "fresh": GroupMeta(child_count=2, wake=_FIRST, disposition=_CANCEL, incarnation=INCARNATION),
    "pumped": GroupMeta(
        child_count=3,
        wake=GroupWakePolicy.ALL,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
        incarnation=INCARNATION,
        mode=SettlementMode.PUMPED,
        order=_ORDER,
        waiters=[Waiter(awakeable="sign_1waiter", rank=3)],
        openers=[Opener(caller="inv_1abc")],
        opened_at_ms=1_796_017_814_041,
    ),
    # Decision 65: a wide pumped group this release records keeps its order in pages (`ranks:{page}`),
    # and says so by its incarnation's prefix; the record itself is format 1's.
    "paged": GroupMeta(
        child_count=300,
        wake=GroupWakePolicy.ALL,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
        incarnation=f"p-{INCARNATION}",
        mode=SettlementMode.PUMPED,
        waiters=[Waiter(awakeable="sign_1waiter", rank=3)],
        openers=[Opener(caller="inv_1abc")],
        opened_at_ms=1_796_017_814_041,
    ),
    "watched": GroupMeta(
        child_count=3,
        wake=GroupWakePolicy.FIRST_SUCCESS,
        disposition=_CANCEL,
        incarnation=INCARNATION,
        order=_ORDER[:4],
        openers=[
            Opener(caller="inv_1abc", watcher="inv_1watch", ended=True, failed=False),
            Opener(caller="inv_1def", watcher="inv_1watch2", ended=True, failed=True),
            Opener(caller="inv_1ghi", watcher="inv_1watch3"),
        ],
        opened_at_ms=1_796_017_814_041,
    ),
}

_INLINE = msgspec.json.encode(OUTCOMES["ok"])


def _samples() -> list[Sample]:
    samples: list[Sample] = []

    def add(name: str, value: Any, codec: tuple[Callable[[Any], bytes], Callable[[bytes], Any]]) -> None:
        samples.append(Sample(name, value, *codec))

    for variant, meta in META.items():
        add(f"state.group.meta.{variant}", meta, _json(GroupMeta))
    add("state.group.fence.three", SHAPE, _json(GroupShape))
    add("state.group.invocations.three", ["inv_1c0", "inv_1c1", "inv_1c2"], _json(list[str]))
    ends = [OpenerEnd(caller="inv_1abc", failed=False), OpenerEnd(caller="inv_1def", failed=True)]
    add("state.group.opener_ends.two", ends, _json(list[OpenerEnd]))
    add("state.group.redispatched.two", ["inv_1r0", "inv_1r1"], _json(list[str]))
    add("state.group.pump.listening", PumpLink(awakeable="sign_1listen"), _json(PumpLink))
    add("state.group.pump.left", PumpLink(left=True), _json(PumpLink))
    add("state.group.pump.gone", PumpLink(left=True, gone=True), _json(PumpLink))
    returned = CallerEnded(caller="inv_1abc", incarnation=INCARNATION, failed=False)
    add("msg.group.hold.saved", CallerEnded(caller="inv_1abc", incarnation=INCARNATION), _json(CallerEnded))
    add("msg.group.hold.returned", returned, _json(CallerEnded))
    add("msg.group.saved.saver", CallerEnded(caller="inv_1abc", incarnation=INCARNATION), _json(CallerEnded))
    add("state.group.savers.two", ["inv_1abc", "inv_1def"], _json(list[str]))
    add("state.group.reclaim_at.ms", 1_796_000_000_000, _json(int))
    add("msg.group.reclaim.due", Reclaim(incarnation=INCARNATION, at=1_796_000_000_000), _json(Reclaim))
    guard = Guard(incarnation=INCARNATION, waiters=["sign_1wake2", "sign_1wake3"], after_ms=600_000)
    add("msg.group.guard.two", guard, _json(Guard))
    guarded = {"inv_1g0": ["sign_1wake2", "sign_1wake3"]}
    add("state.group.guarded.one", guarded, _json(dict[str, list[str]]))
    add("state.group.cancelled_runs.incarnation", [INCARNATION], _json(list[str]))
    close = OperatorClose(incarnation=INCARNATION, openers=2, cancel=True)
    add("msg.group.operator_close.cancel", close, _json(OperatorClose))
    add(
        "msg.group.operator_close.declared",
        OperatorClose(incarnation=INCARNATION, openers=1),
        _json(OperatorClose),
    )
    closed = OperatorClosed(closed=True, disposition=_CANCEL, cancelled=1)
    add("msg.group.operator_closed.closed", closed, _json(OperatorClosed))
    refused = OperatorClosed(closed=False, refused="the group was reopened since")
    add("msg.group.operator_closed.refused", refused, _json(OperatorClosed))
    add("state.group.missed.two", [0, 2], _json(list[int]))
    add("state.group.watches.two", ["inv_1w0", "inv_1w1"], _json(list[str]))
    runs = [WatchedRun(invocation="inv_1pump"), WatchedRun(invocation="inv_1c0", positions=[0])]
    add(
        "msg.group.watch_runs.pump_and_child", RunsWatch(incarnation=INCARNATION, runs=runs), _json(RunsWatch)
    )
    with_opener = RunsWatch(incarnation=INCARNATION, runs=runs[:1], callers=["inv_1abc"])
    add("msg.group.watch_runs.pump_and_opener", with_opener, _json(RunsWatch))
    repair = RunsWatch(incarnation=INCARNATION, runs=runs[1:], repairs=True)
    add("msg.group.watch_runs.repairs", repair, _json(RunsWatch))
    killed = RunEnded(incarnation=INCARNATION, positions=None, message="killed", code="409")
    add("msg.group.run_ended.pump", killed, _json(RunEnded))
    sliced = RunEnded(incarnation=INCARNATION, positions=[256, 257], message="killed", code="409")
    add("msg.group.run_ended.slice", sliced, _json(RunEnded))
    queued = RunEnded(incarnation=INCARNATION, positions=[1], message="canceled", code="409", cancelled=True)
    add("msg.group.run_ended.cancelled", queued, _json(RunEnded))
    failed = ChildrenFailed(
        group_key=KEY,
        incarnation=INCARNATION,
        positions=[0, 2],
        replay_keys=[f"{KEY}/c0", f"{KEY}/c2"],
        outcome=Err(message="killed", code="409"),
    )
    add("msg.pump.fail.two", failed, _json(ChildrenFailed))
    one = msgspec.structs.replace(failed, positions=[0], replay_keys=[f"{KEY}/c0"])
    add("msg.child.fail.one", one, _json(ChildrenFailed))
    add("state.group.missed_child.tool", TOOL, _json(RuntimeEffectEnvelope))
    missed = MissedChildren(children=[TOOL], incarnation=INCARNATION)
    add("msg.group.missed.run", missed, _json(MissedChildren))
    add("msg.group.missed.execute", MissedChildren(children=[CALL]), _json(MissedChildren))
    missed2 = MissedChildren(children=[CALL], incarnation=SAVES_INCARNATION)
    add("msg.group.missed.execute2", missed2, _json(MissedChildren))
    asked = OperatorRedispatch(incarnation=INCARNATION)
    add("msg.group.operator_redispatch.incarnation", asked, _json(OperatorRedispatch))
    redispatched = OperatorRedispatched(dispatched=1, unroutable=1)
    add("msg.group.operator_redispatched.dispatched", redispatched, _json(OperatorRedispatched))
    gone = OperatorRedispatched(refused="the group was closed and opened again since")
    add("msg.group.operator_redispatched.refused", gone, _json(OperatorRedispatched))
    resend = OperatorResend(handler="open", request=b'{"reply_to":"sign_1x","shape":{}}')
    add("msg.group.operator_resend.open", resend, _json(OperatorResend))
    look = b'{"incarnation":"i1","waiters":["sign_1x"],"after_ms":300000}'  # a `Guard`: decision 128
    add(
        "msg.group.operator_resend.guard",
        OperatorResend(handler="guard", request=look),
        _json(OperatorResend),
    )
    add("msg.group.operator_resent.invocation", OperatorResent(invocation="inv_1def"), _json(OperatorResent))
    for variant, outcome in OUTCOMES.items():
        add(f"state.child.outcome.{variant}", outcome, _json(Outcome))
        add(f"state.pump.outcome.{variant}", outcome, _json(Outcome))
        add(f"msg.child.execute_reply.{variant}", outcome, _json(Outcome))
        add(f"msg.child.execute2_reply.{variant}", outcome, _json(Outcome))
        add(f"caller.execute_effect.{variant}", outcome, _json(Outcome))
    add("state.group.ranked.tail", RankTail(pages=1, tail=[2, 0]), _json(RankTail))
    add("state.group.ranked.fresh", RankTail(tail=[1]), _json(RankTail))
    add("state.group.ranks.two", [2, 0], _json(list[int]))
    add("state.group.settled.two", [0, 2], _json(list[int]))
    add("state.group.keys.three", list(_KEYS), _json(list[str]))
    add("state.pump.staged.three", [TOOL, SLEEP, EVENT], _json(list[RuntimeEffectEnvelope]))
    add("state.pump.slices.two", [f"{INCARNATION}.1:{KEY}", f"{INCARNATION}.2:{KEY}"], _json(list[str]))
    add("state.pump.ran.noted", b"1", _raw())  # decision 125: a pump's run of its slice began
    add("msg.pump.staged_reply.staged", True, _json(bool))  # decision 126
    add("msg.pump.staged_reply.gone", False, _json(bool))
    add("state.signal.payload.object", b'{"paid": true, "amount": 12}', _raw())
    # As `emit` keeps it since it checks the payload: compact UTF-8 JSON (still the emitted JSON).
    add("state.signal.payload.compact", '{"paid":true,"note":"ä ☃"}'.encode(), _raw())
    add("state.signal.rejection.text", "card declined ☹".encode(), _raw())
    add("state.signal.waiters.two", ["sign_1a", "sign_1b"], _json(list[str]))
    add("state.signal.waiter.empty", b"", _raw())  # the entry's value; its key names the awakeable

    open_first = OpenRequest(
        reply_to="sign_1reply",
        shape=SHAPE,
        children=[canonical_bytes(c) for c in (TOOL, SLEEP, EVENT)],
        caller="inv_1abc",
        wakes=["sign_1w1", "sign_1w2"],
    )
    add("msg.group.open.first", open_first, _open())
    resume = msgspec.structs.replace(open_first, wakes=[], reopen_only=True, caller="inv_1def")
    add("msg.group.open.resume", resume, _open())
    # A resume naming the incarnation its cursor reads (decision 124): a namesake refuses it.
    add("msg.group.open.resume_fenced", msgspec.structs.replace(resume, reopens=SAVES_INCARNATION), _open())
    # A bounded open (`max_in_flight`): a field written only when given, which a new open's
    # invocation reaches on the newest deployment.
    add("msg.group.open.bounded", msgspec.structs.replace(open_first, window=2), _open())
    # Format 2 of the same message, read by this release and written by none yet: each child is its
    # canonical envelope as raw JSON, not the base64 of it.
    add("msg.group.open.raw_children", open_first, _open(raw=True))
    add("msg.group.open_reply.opened", OpenReply(reopened=False, incarnation=INCARNATION), _json(OpenReply))
    add("msg.group.open_reply.reopened", OpenReply(reopened=True, incarnation=INCARNATION), _json(OpenReply))
    refs = [
        Ref(position=2, replay_key=_KEYS[2], outcome=_INLINE),
        Ref(position=0, replay_key=_KEYS[0]),
    ]
    add(
        "msg.group.settle.direct",
        SettleBatch(incarnation=INCARNATION, mode=SettlementMode.DIRECT, refs=refs[:1]),
        _json(SettleBatch),
    )
    add(
        "msg.group.settle.pumped",
        SettleBatch(incarnation=INCARNATION, mode=SettlementMode.PUMPED, refs=refs),
        _json(SettleBatch),
    )
    add("msg.group.wait.read", WaitRequest(consumed=1, child_count=3), _json(WaitRequest))
    add("msg.group.wait.one", WaitRequest(consumed=1, child_count=3, at_most=1), _json(WaitRequest))
    fenced_wait = WaitRequest(consumed=1, child_count=3, at_most=1, incarnation=SAVES_INCARNATION)
    add("msg.group.wait.fenced", fenced_wait, _json(WaitRequest))  # decision 124, as `close.fenced`
    add(
        "msg.group.wait.wakes", WaitRequest(consumed=0, child_count=3, wakes=["sign_1w1"]), _json(WaitRequest)
    )
    add(
        "msg.group.wait_reply.refs",
        WaitReply(refs=refs, mode=SettlementMode.PUMPED, incarnation=INCARNATION),
        _json(WaitReply),
    )
    add("msg.group.wait_reply.empty", WaitReply(refs=[], incarnation=INCARNATION), _json(WaitReply))
    add("msg.group.close.declared", CloseRequest(child_count=3), _json(CloseRequest))
    add("msg.group.close.cancel", CloseRequest(child_count=3, disposition=_CANCEL), _json(CloseRequest))
    # Naming the incarnation its caller opened or read (decision 113): a namesake is left alone.
    fenced = CloseRequest(child_count=3, incarnation=SAVES_INCARNATION)
    add("msg.group.close.fenced", fenced, _json(CloseRequest))
    first_report = PumpReport(incarnation=INCARNATION, refs=refs, listen="sign_1listen")
    add("msg.group.report.first", first_report, _json(PumpReport))
    add("msg.group.report.batch", PumpReport(incarnation=INCARNATION, refs=refs[:1]), _json(PumpReport))
    add("msg.group.report.left", PumpReport(incarnation=INCARNATION, left=True), _json(PumpReport))
    add("msg.group.report.ask", PumpReport(incarnation=INCARNATION), _json(PumpReport))
    add("msg.group.report_reply.open", ReportReply(open=True), _json(ReportReply))
    add("msg.group.report_reply.closed", ReportReply(open=False), _json(ReportReply))
    add("msg.group.watch.new", CallerEnded(caller="inv_1abc", incarnation=INCARNATION), _json(CallerEnded))
    add(
        "msg.group.watch.returned",
        CallerEnded(caller="inv_1abc", incarnation=INCARNATION, failed=False),
        _json(CallerEnded),
    )
    for variant, envelope in {"tool": TOOL, "sleep": SLEEP, "event": EVENT, "call": CALL}.items():
        add(f"msg.child.run.{variant}", ChildRun(envelope=envelope, incarnation=INCARNATION), _json(ChildRun))
    # A run answers the settle it sent ("" if it sent none); an earlier release's run answers nothing.
    run_reply = (RUN_REPLY.serialize, settle_sent)
    add("msg.child.run_reply.settle", "inv_1settle", run_reply)
    add("msg.child.run_reply.nothing", None, run_reply)
    add("msg.child.fail_reply.settle", "inv_1settle", run_reply)  # a fail answers as a run does
    add("msg.child.fail_reply.nothing", None, run_reply)  # an earlier release's fail: nothing
    add("msg.child.execute.call", CALL_PLAIN, _json(RuntimeEffectEnvelope))
    add("msg.child.execute.call_options", CALL_OPTIONS, _json(RuntimeEffectEnvelope))
    add("msg.child.execute.call_idempotent", CALL_IDEMPOTENT, _json(RuntimeEffectEnvelope))
    add("msg.child.execute.call_empty_key", CALL_EMPTY_KEY, _json(RuntimeEffectEnvelope))
    # A pump of a group that records saves tells each child it runs its incarnation (decision 111).
    for variant, envelope in {"tool": TOOL, "call": CALL}.items():
        executed = ChildRun(envelope=envelope, incarnation=SAVES_INCARNATION)
        add(f"msg.child.execute2.{variant}", executed, _json(ChildRun))
    add("msg.child.outcome.incarnation", INCARNATION, _json(str))
    add("msg.child.forget.incarnation", INCARNATION, _json(str))
    pump = PumpRun(group_key=KEY, children=[TOOL, SLEEP, EVENT], incarnation=INCARNATION)
    add("msg.pump.run.three", pump, _json(PumpRun))
    called = PumpAwait(group_key=KEY, incarnation=INCARNATION, children=[CALL, TOOL])
    add("msg.pump.run2.called", called, _json(PumpAwait))
    add("msg.pump.run2.slice", msgspec.structs.replace(called, listens=False), _json(PumpAwait))
    add("msg.pump.run2.planned", msgspec.structs.replace(called, plan=["call", "child"]), _json(PumpAwait))
    again = PumpAwait(group_key=KEY, incarnation=INCARNATION, children=[CALL, TOOL], listens=False)
    add("msg.pump.redispatch.slice", again, _json(PumpAwait))
    add("msg.pump.listen.closed", b"true", _raw())
    add("msg.pump.stage.three", StagedPart(group_key=KEY, children=[TOOL, SLEEP, EVENT]), _json(StagedPart))
    parts = PumpParts(group_key=KEY, incarnation=f"p-{INCARNATION}", first=0, count=3)
    add("msg.pump.run_parts.group", parts, _json(PumpParts))
    subtree = PumpParts(group_key=KEY, incarnation=f"p-{INCARNATION}", first=1, count=2, listens=False)
    add("msg.pump.run_parts.subtree", subtree, _json(PumpParts))
    parted = PartedOpen(
        reply_to="sign_1reply",
        shape=SHAPE,
        stage=f"p-{INCARNATION}",
        parts=1,
        caller="inv_1abc",
        wakes=["sign_1w1", "sign_1w2"],
    )
    add("msg.group.open_parts.first", parted, _json(PartedOpen))
    resumed = msgspec.structs.replace(parted, parts=0, wakes=[], reopen_only=True, caller="inv_1def")
    add("msg.group.open_parts.resume", resumed, _json(PartedOpen))
    resumed_fenced = msgspec.structs.replace(resumed, reopens=f"p-{SAVES_INCARNATION}")
    add("msg.group.open_parts.resume_fenced", resumed_fenced, _json(PartedOpen))  # decision 124
    unroutable = ChildUnroutable("no tool named 'count' is registered", group_key=KEY, position=1)
    add(
        "msg.group.open_parts.unroutable",
        msgspec.structs.replace(parted, unroutable=unroutable.to_wire()),
        _json(PartedOpen),
    )
    add(
        "msg.pump.outcomes.read",
        OutcomesRead(positions=[3, 4], budget=1_000_000, first=False),
        _json(list[int] | OutcomesRead),
    )
    add("msg.pump.outcomes.positions", [0, 1, 2], _json(list[int] | OutcomesRead))
    add("msg.pump.outcomes_reply.two", [OUTCOMES["ok"], OUTCOMES["cancelled"]], _outcomes_reply())
    add("msg.signal.subscribe.awakeable", "sign_1sub", _json(str))
    add("msg.signal.unsubscribe.awakeable", "sign_1sub", _json(str))
    # An event child's subscription sent again (decision 129): the `subscribe` body, a JSON string.
    resubscribe = OperatorResend(handler="subscribe", request=b'"sign_1sub"')
    add("msg.signal.operator_resend.subscribe", resubscribe, _json(OperatorResend))
    add("msg.signal.operator_resent.invocation", OperatorResent(invocation="inv_1sub"), _json(OperatorResent))
    add("msg.error.not_open", GroupNotOpen.closed_while_awaiting(group_key=KEY), _error())
    add(
        "msg.error.shape",
        ShapeMismatch("recorded child count is 3, reopen passed 2", group_key=KEY),
        _error(),
    )
    add("caller.handle.consumed", GroupHandle(KEY, 3, 1), _handle())
    # Naming the group it reads (decision 124); a cursor of a baseline group names none, as above.
    add("caller.handle.named", GroupHandle(KEY, 3, 1, incarnation=SAVES_INCARNATION), _handle())
    envelopes = {"tool": TOOL, "call": CALL, "call_options": CALL_OPTIONS, "ungrouped": UNGROUPED}
    envelopes["call_idempotent"] = CALL_IDEMPOTENT
    envelopes["call_empty_key"] = CALL_EMPTY_KEY
    for variant, envelope in envelopes.items():
        add(f"contract.envelope.{variant}", envelope, _envelope())
    return samples


SAMPLES: dict[str, Sample] = {sample.name: sample for sample in _samples()}
