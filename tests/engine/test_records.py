"""The group's hot record: what decides that a declared Cancel applies (decision 13)."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest
import restate
from restate.vm import VMWrapper

from lash_restate.contract import (
    AwaitEvent,
    Call,
    Cancelled,
    Err,
    GroupHandle,
    GroupMembership,
    GroupShape,
    GroupWakePolicy,
    InvalidInput,
    LoserPolicy,
    Ok,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ToolCall,
)
from lash_restate.engine import GroupMeta, callee_replay_key
from lash_restate.engine.caller._controller import RestateController
from lash_restate.engine.child._calls import VIA_CALL, VIA_CHILD, answered, callee_key
from lash_restate.engine.child._child import _call, emitted_outcome
from lash_restate.engine.child._routing import replaying
from lash_restate.engine.compat._pump_compat import baseline_outcome
from lash_restate.engine.group._group_dispatch import dispatch_again
from lash_restate.engine.group._group_open import record_group
from lash_restate.engine.group._mode import PUMP_SLICE
from lash_restate.engine.group._pages import RANK_PAGE, RankTail
from lash_restate.engine.group._ranks import assemble_order
from lash_restate.engine.pump import _pump_run
from lash_restate.engine.pump._pump_calls import dispatch_one
from lash_restate.engine.pump._pump_common import split_plan, subtrees
from lash_restate.engine.pump._pump_store import within_budget
from lash_restate.engine.wire._errors import client_errors
from lash_restate.engine.wire._incarnation import cursor_names, layout_of
from lash_restate.engine.wire._messages import (
    ChildRun,
    CloseRequest,
    OpenRequest,
    OpenRequestSerde,
    OperatorClose,
    PumpAwait,
    Ref,
    ReportReply,
    WaitReply,
    WaitRequest,
    decode,
    decode_outcome,
    encode,
)
from lash_restate.engine.wire._records import META, STRINGS, MsgspecSerde, Opener, Waiter
from tests.sdk_context import replaying_context

UUID = "0b6c2f4e-3d1a-4c8e-9f70-2a5b8e1d4c37"

SAMPLE_SHAPE = GroupShape(
    child_count=1,
    wake=GroupWakePolicy.FIRST,
    disposition=LoserPolicy.CANCEL,
    replay_keys=("k",),
    hashes=("h",),
)


def _meta(*callers: str) -> GroupMeta:
    openers = [Opener(caller=c, watcher=f"w-{c}") for c in callers]
    return GroupMeta(
        child_count=2,
        wake=GroupWakePolicy.FIRST,
        disposition=LoserPolicy.CANCEL,
        incarnation="i",
        openers=openers,
    )


def test_a_group_is_severed_only_once_every_opener_ended_and_the_latest_failed() -> None:
    assert not _meta().severed  # nobody opened it under watch: nothing to apply
    assert not _meta("a").severed  # still live
    assert _meta("a").opener_ended("a", failed=True).severed
    assert not _meta("a").opener_ended("a", failed=False).severed  # returned: a parked continuation


def test_severance_does_not_depend_on_the_order_the_ends_are_reported_in() -> None:
    """A opened and returned (parked); B reopened to resume and was killed: severed, either way round.
    A killed while B holds the group, B then returns: not severed, either way round."""
    for ends in itertools.permutations([("a", False), ("b", True)]):
        meta = _meta("a", "b")
        for caller, failed in ends:
            meta = meta.opener_ended(caller, failed)
        assert meta.severed, ends
    for ends in itertools.permutations([("a", True), ("b", False)]):
        meta = _meta("a", "b")
        for caller, failed in ends:
            meta = meta.opener_ended(caller, failed)
        assert not meta.severed, ends


# -- the rank order, the wake window and the serdes (the pure parts of the group's records) ---------


def _ranked_meta(*positions: int, child_count: int = 5) -> GroupMeta:
    meta = GroupMeta(
        child_count=child_count, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.CANCEL, incarnation="i"
    )
    return meta.ranked(list(positions)) if positions else meta


def test_ranks_append_in_order_and_are_read_back_by_rank() -> None:
    meta = _ranked_meta(3, 0).ranked([4])
    assert meta.order == bytes([3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0])  # 4-byte little-endian positions
    assert meta.counter == 3
    assert meta.positions() == [3, 0, 4]
    assert meta.positions(1) == [0, 4]  # ranks after the first
    assert meta.positions(1, 1) == [0]  # at most one of them
    assert meta.positions(0, 2) == [3, 0]
    assert meta.positions(3) == []
    assert meta.settled() == {0, 3, 4}
    assert _ranked_meta().positions() == [] and _ranked_meta().counter == 0
    assert _ranked_meta().ranked([]).order == b""
    big = _ranked_meta(70_000, 2**31, child_count=2**31 + 1)  # past one byte, and past a signed int
    assert big.positions() == [70_000, 2**31]


def test_the_wake_window_covers_the_next_ranks_and_never_passes_the_last_child() -> None:
    meta = _ranked_meta(child_count=3)
    assert meta.waiting(0, ["a", "b"]) == [Waiter(awakeable="a", rank=1), Waiter(awakeable="b", rank=2)]
    assert meta.waiting(1, ["a", "b", "c"]) == [Waiter(awakeable="a", rank=2), Waiter(awakeable="b", rank=3)]
    assert meta.waiting(2, ["a"]) == [Waiter(awakeable="a", rank=3)]
    assert meta.waiting(3, ["a"]) == []
    assert meta.waiting(0, []) == []


def test_the_serdes_write_msgspec_json_and_read_nothing_as_none() -> None:
    meta = _ranked_meta(1)
    assert META.serialize(meta) == msgspec.json.encode(meta)
    assert META.deserialize(META.serialize(meta)) == meta
    assert META.serialize(None) == b"" and META.deserialize(b"") is None
    assert STRINGS.deserialize(b'["a","b"]') == ["a", "b"]
    with pytest.raises(msgspec.ValidationError):
        STRINGS.deserialize(b"[1]")  # read as the declared type, not as any JSON
    ints: MsgspecSerde[list[int]] = MsgspecSerde(list[int])  # built here, not at import
    assert ints.deserialize(b"[1, 2]") == [1, 2]
    with pytest.raises(msgspec.ValidationError):
        ints.deserialize(b'["x"]')
    request = OpenRequest(reply_to="r", shape=SAMPLE_SHAPE, children=[b'{"x":1}'])
    serde = OpenRequestSerde()
    assert serde.serialize(request) == msgspec.json.encode(request)
    assert serde.deserialize(serde.serialize(request)) == request
    assert serde.serialize(None) == b"" and serde.deserialize(b"") is None


def test_the_message_codecs_are_msgspec_json_of_the_declared_type() -> None:
    reply = WaitReply(refs=[Ref(position=1, replay_key="k")], incarnation="i")
    assert encode(reply) == msgspec.json.encode(reply)
    assert decode(encode(reply), WaitReply) == reply
    with pytest.raises(msgspec.ValidationError):
        decode(b'{"refs": 1}', WaitReply)
    assert decode_outcome(b'{"type":"ok","value":[1]}') == Ok(value=[1])
    assert decode_outcome(b'{"type":"cancelled"}') == Cancelled()
    with pytest.raises(msgspec.ValidationError):
        decode_outcome(b'{"type":"maybe"}')


def test_each_further_pump_gets_the_plan_of_exactly_its_own_children() -> None:
    """Decision 66: the open's plan (one entry per child) is cut along the tree of pumps as the
    children are, so every pump calls each of its children as the open decided for that child."""
    width = PUMP_SLICE * 11 + 7  # a tree two pumps deep, its last slice short
    children = [
        RuntimeEffectEnvelope(command=AwaitEvent(name=f"e{i}"), replay_key=f"k/{i}") for i in range(width)
    ]
    group = RuntimeEffectGroup(
        "scope:group:wide:0", children, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.RUN_TO_COMPLETION
    )
    plan = [("call", "child")[bin(i).count("1") % 2] for i in range(width)]  # Thue-Morse: no period
    own, further = group.children[:PUMP_SLICE], group.children[PUMP_SLICE:]
    assert len(own) == PUMP_SLICE
    parts = subtrees(list(further))
    cut = split_plan(plan[PUMP_SLICE:], parts)
    assert [len(p) for p in cut] == [len(part) for part in parts]
    for part, part_plan in zip(parts, cut, strict=True):
        assert part_plan == [plan[child.membership.position] for child in part if child.membership]


@pytest.mark.parametrize(
    "incarnation",
    [UUID, f"{UUID}-s", f"p-{UUID}-s", f"w2-{UUID}-s", f"p-w50-{UUID}-s", f"p-{UUID}"],
    ids=["baseline", "saves", "paged", "bounded", "paged-bounded", "parts"],
)
def test_a_callees_key_names_its_child_whatever_marks_its_incarnation_carries(incarnation: str) -> None:
    child = RuntimeEffectEnvelope(command=Call(service="S", handler="h"), replay_key="inv_1:group:b:0/c3")
    assert callee_replay_key(callee_key(child, incarnation)) == "inv_1:group:b:0/c3"


@pytest.mark.parametrize("key", [None, "", f"@{UUID}", "r@not-an-incarnation", f"r@x{UUID}", f"r@w-{UUID}"])
def test_a_key_that_is_no_callees_names_no_child(key: str | None) -> None:
    assert callee_replay_key(key) is None


def test_a_bulk_read_of_outcomes_answers_the_leading_ones_within_its_budget() -> None:
    """A pump's bulk read (decision 35) answers the outcomes asked for in order while their sizes add
    up to at most the budget, stops at the first one not stored, and answers the first whatever its
    size only when its read must serve the next rank."""
    a, b, c = b"x" * 60, b"y" * 30, b"z" * 50
    assert within_budget([a, b, c], 100, first=True) == [a, b]  # 60 + 30 fit, + 50 would not
    assert within_budget([a, b, c], 140, first=True) == [a, b, c]  # exactly the budget fits
    assert within_budget([a, b, c], 139, first=False) == [a, b]
    assert within_budget([a, None, c], 1000, first=True) == [a]  # not stored (closed): stop there
    assert within_budget([a, b], 10, first=True) == [a]  # the next rank's outcome, whatever its size
    assert within_budget([a, b], 10, first=False) == []  # another pump's read serves that rank


def test_an_operators_view_of_a_paged_group_reads_its_rank_pages_then_its_tail() -> None:
    """`assemble_order`: the order of a paged group, as `groups show` reads it from the admin API's
    state rows: every full ``ranks:{j}`` page in page order (not the rows' order), then the tail."""
    first, second = list(range(RANK_PAGE)), list(range(RANK_PAGE, 2 * RANK_PAGE))
    tail = RankTail(pages=2, tail=[2 * RANK_PAGE, 2 * RANK_PAGE + 1])
    rows = {  # as the admin API lists them: in no particular order
        "ranked": msgspec.json.encode(tail).decode(),
        "ranks:1": msgspec.json.encode(second).decode(),
        "meta": "{}",
        "ranks:0": msgspec.json.encode(first).decode(),
    }
    meta = msgspec.structs.replace(_meta(), child_count=2 * RANK_PAGE + 2, incarnation="p-i")
    assembled = assemble_order(meta, rows)
    assert assembled.positions() == [*first, *second, *tail.tail]
    assert assembled.counter == 2 * RANK_PAGE + 2
    assert assemble_order(_meta(), rows) == _meta()  # a group of one slice keeps its order in meta


def test_a_handler_replays_exactly_when_its_contexts_vm_says_so() -> None:
    """`replaying` reads what restate-sdk keeps on a handler's context, its VM's `is_replaying`: a
    routing answer is asked only live, and a replay follows what it journaled (an open that resumes
    on a process routing differently must not refuse the group it recorded). A context without a VM
    is never replaying. The context is the SDK's own, so a VM it kept elsewhere would fail here."""
    assert callable(VMWrapper.is_replaying)  # the method the stand-in VM plays
    for answer in (True, False):
        assert replaying(replaying_context(answer)) is answer
    assert replaying(SimpleNamespace()) is False


class _Calls:
    """A context that records the calls and one-way messages made through it: all a pump's dispatch
    of a child makes, or a caller's close sends."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, bytes]] = []

    def generic_call(
        self, service: str, handler: str, arg: bytes, key: str | None = None, **_: Any
    ) -> object:
        self.made.append((service, handler, bytes(arg)))
        return object()

    generic_send = generic_call


_UUID = "0b6c2f4e-3d1a-4c8e-9f70-2a5b8e1d4c37"


class _Group:
    """A group's context for a re-dispatch: its state by name, the one-way messages it sends, and its
    `ctx.run`s, run (a first execution) or answered from ``journal`` (a replay)."""

    def __init__(self, journal: dict[str, Any] | None = None) -> None:
        self.state: dict[str, Any] = {}
        self.sent: list[tuple[str, str, str | None]] = []
        self.ran: dict[str, Any] = {}
        self.journal = journal

    def key(self) -> str:
        return "g"

    def request(self) -> Any:
        return SimpleNamespace(id="inv_group", attempt_headers={})

    async def run_typed(self, name: str, action: Any, options: Any = None) -> Any:
        if self.journal is not None:
            return self.journal[name]
        done = action()
        self.ran[name] = await done if inspect.isawaitable(done) else done
        return self.ran[name]

    def generic_send(self, service: str, handler: str, arg: bytes, key: str | None = None, **_: Any) -> Any:
        self.sent.append((service, handler, key))

        async def invocation_id(sent: int = len(self.sent)) -> str:
            return f"inv_sent_{sent}"

        return SimpleNamespace(invocation_id=invocation_id)

    async def get(self, name: str, serde: Any = None) -> Any:
        return self.state.get(name)

    def set(self, name: str, value: Any, serde: Any = None) -> None:
        self.state[name] = value

    def clear(self, name: str) -> None:
        self.state.pop(name, None)


class _Routes:
    """An endpoint's routing that routes the children at ``positions`` alone."""

    def __init__(self, *positions: int) -> None:
        self.positions = set(positions)

    def routes(self, child: RuntimeEffectEnvelope) -> bool:
        assert child.membership is not None
        return child.membership.position in self.positions


class _CallRouting:
    """An endpoint's routing that routes every call, or none; it declares no target external."""

    def __init__(self, routes: bool) -> None:
        self.answer = routes
        self.targets = SimpleNamespace(is_external=lambda service: False)

    def routes(self, child: RuntimeEffectEnvelope) -> bool:
        return self.answer


class _ChildRun(_Group):
    """A call child's context: `_Group`'s `ctx.run`s, and the calls it makes, each answered 1."""

    def __init__(self, journal: dict[str, Any] | None = None) -> None:
        super().__init__(journal)
        self.calls: list[tuple[str, str]] = []

    def generic_call(self, service: str, handler: str, arg: bytes, key: str | None = None, **_: Any) -> Any:
        self.calls.append((service, handler))

        async def answer() -> bytes:
            return b"1"

        return answer()


@pytest.mark.parametrize("routed", [True, False], ids=["called", "missed"])
async def test_a_call_childs_run_replayed_where_routing_changed_decides_as_it_journaled(routed: bool) -> None:
    """Whether a call child's run calls its target (this endpoint routes it, the cluster registers it)
    is the endpoint's answer, which the journal does not hold: journaled for a group this release
    opened, a replay on a process that routes otherwise (an in-place redeploy dropping or restoring a
    declaration) calls, or misses, as the first run did, where deciding again failed it for ever."""
    member = GroupMembership(
        group_key="g", position=0, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.CANCEL
    )
    call = Call(service="S", handler="h", arg=1)
    child = RuntimeEffectEnvelope(command=call, replay_key="g/c0", membership=member)

    async def run(ctx: _ChildRun, routes: bool) -> Any:
        try:
            return await _call(cast(Any, ctx), child, call, cast(Any, _CallRouting(routes)), f"{_UUID}-s")
        except restate.TerminalError as error:
            return error.status_code

    first = _ChildRun()
    answered = await run(first, routed)
    replay = _ChildRun(journal=first.ran)
    assert (await run(replay, not routed), replay.calls) == (answered, first.calls)
    assert first.calls == ([("S", "h")] if routed else [])
    assert answered == (Ok(value=1) if routed else 404)


@pytest.mark.parametrize("routed", [True, False], ids=["called", "missed"])
async def test_a_call_child_of_a_group_the_baseline_opened_decides_without_a_journaled_step(
    routed: bool,
) -> None:
    """A call child of a group the baseline opened journals no step before its call, as the
    baseline's did, so that one in flight across an in-place replacement replays: it asks its routing
    each time (a journal without the step answers nothing here)."""
    member = GroupMembership(
        group_key="g", position=0, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.CANCEL
    )
    call = Call(service="S", handler="h", arg=1)
    child = RuntimeEffectEnvelope(command=call, replay_key="g/c0", membership=member)
    for incarnation in ("", _UUID):  # the baseline's pump names none; its direct children their UUID
        ctx = _ChildRun(journal={})
        try:
            answered: Any = await _call(
                cast(Any, ctx), child, call, cast(Any, _CallRouting(routed)), incarnation
            )
        except restate.TerminalError as error:
            answered = error.status_code
        assert (answered, ctx.calls) == ((Ok(value=1), [("S", "h")]) if routed else (404, []))


async def test_a_first_open_whose_children_its_shape_does_not_count_is_refused_before_anything() -> None:
    """No caller sends a first open carrying more or fewer children than its shape names; one that
    arrived is refused typed before the group does anything (its mode would be sized by the one
    count, its pages by the other, and no child would answer for the rest): its context answers its
    key alone, and no routing is given."""
    ctx = cast(Any, SimpleNamespace(key=lambda: "s:group:b:0"))
    for children in ([], [b'{"x":1}', b'{"x":2}']):
        request = OpenRequest(reply_to="r", shape=SAMPLE_SHAPE, children=children)
        with pytest.raises(InvalidInput, match=f"names 1 children and carries {len(children)}") as refused:
            await record_group(ctx, None, request, 3, 257, cast(Any, None))
        assert refused.value.group_key == "s:group:b:0"


async def test_a_redispatch_replayed_where_routing_changed_dispatches_what_it_journaled() -> None:
    """Which children a reopen (or an operator) dispatches again is the endpoint's routing, which the
    journal does not hold: journaled, a replay on a process that routes differently (an in-place
    redeploy while the open ran) sends what the first execution sent. Asked again, it sent other
    messages, a journal mismatch that held the group's lock."""
    children = [
        RuntimeEffectEnvelope(
            command=ToolCall(tool="t", args={}),
            replay_key=f"g/c{position}",
            membership=GroupMembership(
                group_key="g", position=position, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.CANCEL
            ),
        )
        for position in range(3)
    ]
    meta = GroupMeta(
        child_count=3, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.CANCEL, incarnation=f"{_UUID}-s"
    )
    first = _Group()
    dispatched, _ = await dispatch_again(cast(Any, first), meta, children, cast(Any, _Routes(0, 2)))
    assert dispatched == [0, 2]
    assert first.sent == [("LashChild", "run", "g/c0"), ("LashChild", "run", "g/c2")]
    replay = _Group(journal=first.ran)
    dispatched, _ = await dispatch_again(cast(Any, replay), meta, children, cast(Any, _Routes(1)))
    assert (dispatched, replay.sent) == ([0, 2], first.sent)


@pytest.mark.parametrize("replays", [False, True], ids=["live", "replay"])
async def test_a_redispatch_cancelled_while_it_asks_its_group_ends_cancelled_and_calls_nothing(
    replays: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-dispatch asks its group first; a cancel that comes meanwhile (a `Cancel` group whose
    caller is gone cancels its runs, and its probe waits behind that work) was noted and dropped,
    and the run called the children it held for ever after. It ends cancelled now, as a cancel at
    any other await of it does, so its watch settles the children `Cancelled` (a unit test: the
    SDK's context replaying or not, the group's answer standing in). A replay goes on, as an earlier
    release journaled it."""

    async def answered_open_and_cancelled(*_: object) -> tuple[ReportReply, bool]:
        return ReportReply(open=True), True

    def went_on(name: str, serde: object = None) -> None:
        raise _WentOn  # to read its store, then call the children it finds unsettled

    monkeypatch.setattr(_pump_run, "report_noting_cancel", answered_open_and_cancelled)
    ctx = replaying_context(replays)
    monkeypatch.setattr(ctx, "get", went_on, raising=False)
    run = PumpAwait(group_key="g", incarnation=f"{_UUID}-s", children=[], listens=False)
    with pytest.raises((restate.TerminalError, _WentOn)) as ended:
        await _pump_run.on_redispatch(cast(Any, ctx), run, cast(Any, None))
    if replays:
        assert ended.type is _WentOn
    else:
        assert isinstance(ended.value, restate.TerminalError), ended.value
        assert (ended.value.status_code, ended.value.message) == (409, "cancelled")


class _WentOn(Exception):
    """Raised where the run goes on past its question to the group."""


@pytest.mark.parametrize(
    ("incarnation", "execute", "none_sent"),
    [
        (_UUID, "execute", b"null"),  # the baseline's group: as its pumps journaled it
        (f"{_UUID}-s", "execute2", b""),  # a later release's
        (f"p-{_UUID}", "execute2", b""),  # a later release's, opened in parts
    ],
)
def test_a_pump_runs_and_calls_its_children_as_its_groups_release_did(
    incarnation: str, execute: str, none_sent: bytes
) -> None:
    """A pump of a group the baseline opened makes what its journal holds: each child it does not
    call itself through `LashChild/execute`, given the envelope alone, and a call of no argument
    with a JSON ``null``. A later group's pump names the incarnation to each child
    (`LashChild/execute2`) and sends no argument as a native call does: an empty body."""
    member = GroupMembership(
        group_key="g", position=0, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.RUN_TO_COMPLETION
    )
    tool = RuntimeEffectEnvelope(command=ToolCall(tool="t", args={}), replay_key="g/c0", membership=member)
    call = RuntimeEffectEnvelope(command=Call(service="S", handler="h"), replay_key="g/c1", membership=member)
    given = RuntimeEffectEnvelope(
        command=Call(service="S", handler="h", arg=0), replay_key="g/c2", membership=member
    )
    ctx = _Calls()
    for child, how in [(tool, VIA_CHILD), (call, VIA_CALL), (given, VIA_CALL)]:
        assert dispatch_one(cast(Any, ctx), child, how, incarnation) is not None
    named_run = (
        encode(ChildRun(envelope=tool, incarnation=incarnation)) if execute == "execute2" else encode(tool)
    )
    assert ctx.made == [("LashChild", execute, named_run), ("S", "h", none_sent), ("S", "h", b"0")]


@pytest.mark.parametrize(
    ("incarnation", "fenced"),
    [(_UUID, False), (f"{_UUID}-s", True), (f"p-{_UUID}", True)],
    ids=["baseline", "later", "in-parts"],
)
async def test_a_close_names_the_incarnation_its_caller_opened_unless_the_baseline_opened_it(
    incarnation: str, fenced: bool
) -> None:
    """A caller's close names the incarnation its open (or a read) answered, so that a namesake
    opened under the key since is not closed by it (decision 113); the close of a group the baseline
    opened sends what the baseline's callers journaled, which a caller replays on this release."""
    key = "s:group:b:0"
    controller = RestateController(cast(Any, _Calls()), groups=True)
    controller._incarnations[key] = incarnation  # what the open's reply said
    controller._declared[key] = (2, LoserPolicy.RUN_TO_COMPLETION)  # a close it cannot be refused: sent
    await controller.close_effect_group(GroupHandle(key, 2, 2))
    request = CloseRequest(child_count=2, incarnation=incarnation) if fenced else CloseRequest(child_count=2)
    assert cast(Any, controller._ctx).made == [("LashGroup", "close", encode(request))]
    # Closed: a later close of the key (a namesake's cursor, restored) names nothing it knows no more.
    assert key not in controller._incarnations


@pytest.mark.parametrize(
    ("incarnation", "layout"),
    [
        (_UUID, "flat"),  # the baseline's
        (f"{_UUID}-s", "flat"),
        (f"w2-{_UUID}-s", "flat"),
        (f"p-{_UUID}-s", "paged"),  # wider than a slice, opened in one message
        (f"p-w2-{_UUID}-s", "paged"),
        (f"p-{_UUID}", "parts"),  # its opener's stage (`open_in_parts`)
    ],
)
def test_an_operator_reads_a_groups_layout_from_its_incarnation(incarnation: str, layout: str) -> None:
    assert layout_of(incarnation) == layout


@pytest.mark.parametrize(
    ("incarnation", "named"),
    [(_UUID, None), (f"{_UUID}-s", f"{_UUID}-s"), (f"p-w2-{_UUID}-s", f"p-w2-{_UUID}-s")],
    ids=["baseline", "later", "paged-bounded"],
)
async def test_a_cursor_names_its_groups_incarnation_unless_the_baseline_opened_it(
    incarnation: str, named: str | None
) -> None:
    """The cursor an open answers names the group it was recorded as (decision 124), and its awaits
    name it to the group; a cursor of a group the baseline opened names none: its bytes and its
    awaits are the baseline's, which a rollback reads and a caller replays."""
    assert cursor_names(incarnation) == named
    key = "s:group:b:0"
    handle = GroupHandle(key, 2, 1, incarnation=cursor_names(incarnation))
    text = handle.to_bytes()
    assert (b'"incarnation"' in text) is (named is not None)
    assert GroupHandle.from_bytes(text) == handle
    ctx = _Asks(WaitReply(refs=[], incarnation=incarnation))
    await RestateController(cast(Any, ctx), groups=True)._ask_group(handle, {}, plain=False)
    request = WaitRequest(consumed=1, child_count=2, wakes=ctx.wakes)
    fenced = request if named is None else msgspec.structs.replace(request, incarnation=named)
    assert ctx.asked == [encode(fenced)]


class _Asks:
    """A caller's context for one read of a group: fresh awakeables, and the group's ``answer``."""

    def __init__(self, answer: WaitReply) -> None:
        self.answer = answer
        self.asked: list[bytes] = []
        self.wakes: list[str] = []

    def awakeable(self, **_: Any) -> tuple[str, asyncio.Future[bytes]]:
        self.wakes.append(f"sign_1w{len(self.wakes)}")
        return self.wakes[-1], asyncio.get_running_loop().create_future()

    def generic_call(self, service: str, handler: str, arg: bytes, **_: Any) -> asyncio.Future[bytes]:
        self.asked.append(bytes(arg))
        answered: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        answered.set_result(encode(self.answer))
        return answered


@pytest.mark.parametrize(
    ("error", "settles"),
    [
        (restate.TerminalError("killed", 409), encode(Cancelled())),  # an operator's kill, as a cancel
        (restate.TerminalError("cancelled", 409), encode(Cancelled())),
        (restate.TerminalError("not found", 404), None),  # a miss: no rank
        (restate.TerminalError("bad request", 400), None),  # the baseline settled nothing, and logged it
    ],
)
async def test_a_baseline_pump_reads_its_childrens_ends_as_the_baseline_did(
    error: restate.TerminalError, settles: bytes | None
) -> None:
    """The pump kept for what the baseline release sent (`compat`) maps how a child's
    `LashChild/execute` ended as the baseline's `_child_outcome` did (0450b4d), so a pump the baseline
    journaled replays on this release: what it stores is in its journal."""

    async def ended() -> None:
        raise error

    assert await baseline_outcome(asyncio.ensure_future(ended())) == settles
    assert await baseline_outcome(_answered(b'{"type":"ok","value":1}')) == b'{"type":"ok","value":1}'


def _answered(raw: bytes) -> Any:
    future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    future.set_result(raw)
    return future


def test_an_event_payload_an_earlier_release_kept_that_lash_cannot_record_settles_as_a_bad_value() -> None:
    """An earlier release's `emit` kept any JSON it was given; a payload lash cannot record (a lone
    surrogate, a non-finite number) settles its child as a bad value, where storing it failed the
    child, retried for ever."""
    for payload in ({"text": "\ud800"}, [float("nan")], float("inf")):
        outcome = emitted_outcome("gate", payload)
        assert isinstance(outcome, Err) and outcome.code == "bad_value", outcome
        assert outcome.message.startswith("event gate's payload holds ")
    assert emitted_outcome("gate", {"text": "ä ☃"}) == Ok(value={"text": "ä ☃"})


def test_an_answer_nested_too_deep_or_holding_a_lone_surrogate_rejects_its_child_not_json() -> None:
    """msgspec raises a plain `RecursionError` for JSON nested a few thousand deep (a non-Python
    callee's): the child rejects `not_json`, where the plain error was retried until paused,
    holding every child of its pump."""
    deep = b"[" * 5000 + b"]" * 5000
    assert answered("S/h", deep) == Err(message="S/h answered 10000 bytes that are not JSON", code="not_json")
    # A lone surrogate, as the SDK's default serde writes a Python string holding one: JSON has no
    # text for it, so it is refused as it is read (a native caller's serde reads it).
    lone = b'"\\ud800"'
    assert answered("S/h", lone) == Err(message="S/h answered 8 bytes that are not JSON", code="not_json")


async def test_a_public_handler_given_no_request_ends_with_400_not_a_retried_error() -> None:
    """A handler the operator's levers call through the ingress takes a request; called with none
    (the SDK reads an empty body so, from a caller inside Restate), it ends terminally with 400,
    where reading a field of None raised a plain error that Restate retried."""

    @client_errors
    async def handler(ctx: object, req: OperatorClose) -> str:
        return req.incarnation

    with pytest.raises(restate.TerminalError) as refused:
        await handler(object(), cast(Any, None))
    assert (refused.value.status_code, refused.value.message) == (
        400,
        "this handler takes a JSON request body; the request had none",
    )
    assert await handler(object(), OperatorClose(incarnation="i", openers=1)) == "i"
