"""What the group's ranking handlers journal, command by command, on each rank layout.

A `LashGroup` handler that suspends is replayed from its journal, possibly by a later release, which
must issue the same state commands in the same order (Restate fails a replay that differs). These
pin the commands of `settle`, `report` and `wait` for a flat group and a paged one: a change here is
a change of what in-flight handlers replay, to be made only for groups whose incarnation says so.
The handlers run against a context that records each command (no Restate: what Restate does with
them is the conformance suite's, on every layout).
"""

from __future__ import annotations

import types
from collections.abc import Generator
from typing import Any, cast

import msgspec
import pytest
import restate

from lash_restate.contract import GroupShape, GroupWakePolicy, LoserPolicy
from lash_restate.engine.group import _group_rank
from lash_restate.engine.group._group_common import GroupSettings
from lash_restate.engine.group._pages import RANKED, RankTail, key_page, settled_page
from lash_restate.engine.wire._messages import PumpReport, Ref, SettleBatch, WaitRequest
from lash_restate.engine.wire._records import (
    FENCE,
    META,
    POSITIONS,
    RECORD,
    SHAPE,
    STRINGS,
    GroupMeta,
    MsgspecSerde,
    SettlementMode,
    Waiter,
)

_UUID = "0b6c2f4e-3d1a-4c8e-9f70-2a5b8e1d4c37-s"
_TAIL: MsgspecSerde[RankTail] = MsgspecSerde(RankTail)


class _Done:
    """A command's result, already there (the recording context answers every read at once)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[None, None, Any]:
        return self.value
        yield  # a generator, as an awaitable's __await__ must be


class _Recording:
    """The `ObjectContext` surface the ranking handlers use, recording each command in order."""

    def __init__(self, state: dict[str, bytes]) -> None:
        self.state = dict(state)
        self.commands: list[tuple[str, str]] = []

    def key(self) -> str:
        return "g:1"

    def request(self) -> types.SimpleNamespace:  # what the handlers' log events read
        return types.SimpleNamespace(id="inv_1", attempt_headers={})

    def get(self, name: str, serde: Any = None, **_: Any) -> _Done:
        self.commands.append(("get", name))
        raw = self.state.get(name)
        return _Done(None if raw is None else serde.deserialize(raw))

    def set(self, name: str, value: Any, serde: Any = None, **_: Any) -> None:
        self.commands.append(("set", name))
        self.state[name] = bytes(serde.serialize(value))

    def resolve_awakeable(self, name: str, value: Any, serde: Any = None, **_: Any) -> None:
        self.commands.append(("resolve", name))


@pytest.fixture(autouse=True)
def _recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    async def gather(*futures: Any) -> list[Any]:
        return list(futures)

    async def guard(ctx: _Recording, meta: GroupMeta, registered: list[Waiter], *_: Any) -> None:
        ctx.commands.append(("guard", ",".join(w.awakeable for w in registered)))

    monkeypatch.setattr(restate, "gather", gather)
    monkeypatch.setattr(_group_rank, "guard_waiters", guard)


def _group(paged: bool, ranked: list[int], waiters: list[Waiter], width: int = 600) -> dict[str, bytes]:
    """The state of a group of ``width`` children whose ranks are ``ranked``, in either layout."""
    incarnation = ("p-" if paged else "") + _UUID
    keys = tuple(f"rk{p}" for p in range(width))
    shape = GroupShape(
        child_count=width,
        wake=GroupWakePolicy.ALL,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
        replay_keys=keys,
        hashes=tuple("h" for _ in keys),
    )
    meta = GroupMeta(
        child_count=width,
        wake=GroupWakePolicy.ALL,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
        incarnation=incarnation,
        mode=SettlementMode.PUMPED,
        waiters=waiters,
    )
    state = {FENCE: bytes(SHAPE.serialize(shape))}
    if paged:
        state[RANKED] = bytes(_TAIL.serialize(RankTail(pages=0, tail=ranked)))
        for k in {p // 256 for p in ranked}:
            state[settled_page(k)] = bytes(POSITIONS.serialize(sorted(p for p in ranked if p // 256 == k)))
        for k in range(-(-width // 256)):
            state[key_page(k)] = bytes(STRINGS.serialize(list(keys[k * 256 : (k + 1) * 256])))
    else:
        meta = meta.ranked(ranked)
    state[RECORD] = bytes(META.serialize(meta))
    return state


def _as_context(ctx: _Recording) -> restate.ObjectContext:
    return cast("restate.ObjectContext", ctx)


_SETTINGS = cast(GroupSettings, None)  # read by the guard alone, which records itself here


def _refs(*positions: int) -> list[Ref]:
    return [Ref(position=p, replay_key=f"rk{p}") for p in positions]


def _incarnation(paged: bool) -> str:
    return ("p-" if paged else "") + _UUID


async def test_a_flat_settle_reads_the_record_and_writes_it_with_the_ranks_and_the_wakes() -> None:
    ctx = _Recording(_group(False, [3], [Waiter(awakeable="w2", rank=2), Waiter(awakeable="w9", rank=9)]))
    await _group_rank.on_settle(
        _as_context(ctx),
        SettleBatch(incarnation=_incarnation(False), mode=SettlementMode.DIRECT, refs=_refs(5, 3, 7)),
    )
    assert ctx.commands == [("get", "meta"), ("resolve", "w2"), ("set", "meta")]
    assert msgspec.json.decode(ctx.state[RECORD])["waiters"] == [{"awakeable": "w9", "rank": 9}]


async def test_a_flat_settle_of_children_ranked_already_writes_nothing() -> None:
    ctx = _Recording(_group(False, [3, 5], [Waiter(awakeable="w3", rank=3)]))
    await _group_rank.on_settle(
        _as_context(ctx),
        SettleBatch(incarnation=_incarnation(False), mode=SettlementMode.DIRECT, refs=_refs(5, 3)),
    )
    assert ctx.commands == [("get", "meta")]


async def test_a_paged_report_reads_its_slices_then_the_tail_and_writes_them_then_the_record() -> None:
    ctx = _Recording(_group(True, [3, 300], [Waiter(awakeable="w3", rank=3)]))
    answer = await _group_rank.on_report(
        _as_context(ctx), PumpReport(incarnation=_incarnation(True), refs=_refs(257, 4, 300))
    )
    assert answer.open
    assert ctx.commands == [
        ("get", "meta"),
        ("get", "settled:0"),
        ("get", "settled:1"),
        ("get", "ranked"),
        ("set", "settled:0"),
        ("set", "settled:1"),
        ("set", "ranked"),
        ("resolve", "w3"),
        ("set", "meta"),
    ]


# A paged group ranking one slice's children and waking nobody: the record read, never written.
_PAGED_ONE_SLICE = [
    ("get", "meta"),
    ("get", "settled:0"),
    ("get", "ranked"),
    ("set", "settled:0"),
    ("set", "ranked"),
]


async def test_a_paged_report_that_wakes_nobody_leaves_the_record_alone() -> None:
    ctx = _Recording(_group(True, [3], [Waiter(awakeable="w9", rank=9)]))
    await _group_rank.on_report(_as_context(ctx), PumpReport(incarnation=_incarnation(True), refs=_refs(4)))
    assert ctx.commands == _PAGED_ONE_SLICE


async def test_a_paged_settle_reads_what_a_report_reads_after_the_record() -> None:
    ctx = _Recording(_group(True, [], []))
    await _group_rank.on_settle(
        _as_context(ctx),
        SettleBatch(incarnation=_incarnation(True), mode=SettlementMode.PUMPED, refs=_refs(1)),
    )
    assert ctx.commands == _PAGED_ONE_SLICE


@pytest.mark.parametrize(
    ("paged", "served"),
    [
        (False, [("get", "meta"), ("get", "fence")]),
        (True, [("get", "meta"), ("get", "ranked"), ("get", "keys:0")]),
    ],
    ids=["flat", "paged"],
)
async def test_a_wait_of_a_ranked_rank_reads_what_serves_it(
    paged: bool, served: list[tuple[str, str]]
) -> None:
    ctx = _Recording(_group(paged, [3, 4], []))
    reply = await _group_rank.on_wait(
        _as_context(ctx), WaitRequest(consumed=1, child_count=600, wakes=["w"]), _SETTINGS
    )
    assert [(r.position, r.replay_key) for r in reply.refs] == [(4, "rk4")]
    assert ctx.commands == served


@pytest.mark.parametrize("paged", [False, True], ids=["flat", "paged"])
async def test_a_wait_past_the_ranks_registers_its_wakes_and_guards_them(paged: bool) -> None:
    ctx = _Recording(_group(paged, [3], []))
    reply = await _group_rank.on_wait(
        _as_context(ctx), WaitRequest(consumed=1, child_count=600, wakes=["w2", "w3"]), _SETTINGS
    )
    assert reply.refs == []
    read = [("get", "meta"), ("get", "ranked")] if paged else [("get", "meta")]
    assert ctx.commands == [*read, ("set", "meta"), ("guard", "w2,w3")]
