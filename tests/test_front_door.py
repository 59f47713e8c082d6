"""The front door, ``import lash_restate as lash``: its public names, pinned (as httpx pins its own),
and what it does without a server: children, keys, refusals."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import inspect
import pickle
import typing
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, cast

import msgspec
import pytest
import restate
from restate.exceptions import RetryableError

import lash_restate as lash
from lash_restate._front import _invocation
from lash_restate.contract import Command, RuntimeEffectGroup
from lash_restate.engine import call_targets
from lash_restate.memory import MemoryHost
from lash_restate.testing import demo_tools

PUBLIC = {
    # the combinators, a group by hand, and the children
    "all_settled", "race", "select", "Group", "Opening", "Child",
    "call", "TypedCall", "tool", "sleep", "event", "controller", "use_prefix",
    # an event's signals from a handler
    "emit", "reject_event", "clear_event",
    # the endpoint
    "services", "app", "serve", "external", "Target", "RestateController", "ToolRegistry", "ToolFailure",
    # policies, commands, outcomes
    "CANCEL", "RUN_TO_COMPLETION", "LoserPolicy", "GroupWakePolicy",
    "Call", "ToolCall", "Sleep", "AwaitEvent", "RuntimeEffectEnvelope", "GroupKey", "GroupHandle",
    "Ok", "Err", "Cancelled", "Outcome", "Settlement",
    # what it raises
    "Rejected", "AggregateRejection", "ChildRejected", "LashError", "RuntimeErrorCode",
    "AwaitCancelled", "ChildUnroutable", "CursorError", "CursorOverrun", "DispositionDrift",
    "DispositionWidening", "DuplicateReplayKey", "EffectGroupUnsupported", "EmptyGroup",
    "ForeignGroupKey", "GroupNotOpen", "GroupShapeError", "HandleMismatch", "InvalidEnvelope",
    "InvalidGroupKey", "InvalidHandle", "InvalidInput", "InvalidSettlement", "MembershipUnsupported",
    "PayloadTooLarge", "PermutedPosition", "ReplayMismatch", "ShapeMismatch", "UndecodableResult",
    "WakeRuleDrift", "DeploymentError", "ServerUnavailable", "PrefixChosen",
}  # fmt: skip


def test_the_public_names_are_exactly_these() -> None:
    assert set(lash.__all__) == PUBLIC
    assert len(lash.__all__) == len(PUBLIC)  # no name twice
    for name in lash.__all__:
        assert getattr(lash, name) is not None
    # Attributes, not star-imported: `from lash_restate import *` must not shadow the builtins.
    assert all(callable(getattr(lash, name)) for name in ("all", "any", "open"))
    assert not {"all", "any", "open"} & set(lash.__all__)
    # Host-implementer helpers stay in `lash_restate.contract`.
    assert not {"check_await", "require_groups", "canonical_bytes", "EffectGroupDefaults"} & set(dir(lash))


def test_public_names_report_the_front_door_as_their_module() -> None:
    named = [getattr(lash, n) for n in (*lash.__all__, "all", "any", "open")]
    records = [
        v
        for v in named
        if isinstance(v, type) and (issubclass(v, msgspec.Struct) or dataclasses.is_dataclass(v))
    ]
    defined = [v for v in named if (isinstance(v, type) or inspect.isfunction(v)) and v not in records]
    assert len(defined) > 40 and len(records) > 10
    assert {v.__qualname__: v.__module__ for v in defined if v.__module__ != "lash_restate"} == {}
    assert repr(lash.GroupNotOpen) == "<class 'lash_restate.GroupNotOpen'>"
    # A record keeps the module its annotations resolve in: a user's model may hold one.
    assert {v.__module__.split(".")[1] for v in records} <= {"contract", "calls"}
    ok_of_v, *others = typing.get_args(typing.get_type_hints(lash.Settlement)["outcome"])
    assert (typing.get_origin(ok_of_v), others) == (lash.Ok, [lash.Err, lash.Cancelled])
    ok = lash.Ok(value=[1])
    assert pickle.loads(pickle.dumps(ok)) == ok


def test_child_constructors_build_the_contracts_commands() -> None:
    assert lash.call("Cart", "add", ["sku"], key="u1") == lash.Call(
        service="Cart", handler="add", arg=["sku"], key="u1"
    )
    assert lash.tool("echo", {"value": 1}) == lash.ToolCall(tool="echo", args={"value": 1})
    assert lash.sleep(timedelta(seconds=1.5)) == lash.Sleep(duration_ms=1500)
    assert lash.event("paid") == lash.AwaitEvent(name="paid")
    with pytest.raises(lash.InvalidEnvelope):
        lash.call("", "add")


def test_the_batch_id_is_a_content_hash_of_the_children() -> None:
    a: list[Command] = [lash.tool("echo", 1), lash.sleep(timedelta(seconds=1))]
    assert _invocation._batch(a) == _invocation._batch(list(a))
    assert _invocation._batch(a) != _invocation._batch(a[::-1])  # positions are part of the content
    assert _invocation._batch(a) != _invocation._batch([lash.tool("echo", 2), a[1]])


async def test_through_a_controller_a_group_needs_an_explicit_key() -> None:
    host = MemoryHost(resolver=demo_tools())
    try:
        with pytest.raises(lash.InvalidInput, match="explicit key"):
            await lash.race(host, [lash.tool("echo", {"value": 1})])
        assert await lash.all(host, [lash.tool("echo", {"value": v}) for v in "ab"], key="s:group:b:0") == [
            "a",
            "b",
        ]
        with pytest.raises(lash.InvalidInput, match="child 1 is a str"):
            await lash.all(host, [lash.tool("echo"), "echo"], key="s:group:c:0")  # type: ignore[arg-type]
        # A generator of children is read once, and its children all reach the group.
        values = (lash.tool("echo", {"value": v}) for v in "xyz")
        assert await lash.all(host, values, key="s:group:gen:0") == ["x", "y", "z"]
    finally:
        await host.aclose()


@pytest.mark.parametrize(
    ("ctx", "named"),
    [(None, "a NoneType"), ("ctx", "a str"), (object(), "an object")],
    ids=["None", "str", "object"],
)
async def test_a_ctx_that_is_neither_a_context_nor_a_controller_is_refused_by_name(
    ctx: object, named: str
) -> None:
    for attempt in (
        lash.race(ctx, [lash.tool("echo")]),  # type: ignore[call-overload]
        lash.race(ctx, [lash.tool("echo")], key="s:group:b:0"),  # type: ignore[call-overload]
        lash.open(ctx, [lash.tool("echo")], key="s:group:b:0"),  # type: ignore[arg-type]
    ):
        with pytest.raises(lash.InvalidInput, match=rf"^\[invalid_input\] ctx is {named}: pass the"):
            await attempt


async def test_a_key_that_is_no_key_or_a_child_named_as_a_keyword_is_refused_by_name() -> None:
    """Untyped code (mypy would flag each) gets a typed refusal naming its mistake, not a crash that
    Restate would retry for ever."""
    host = MemoryHost(resolver=demo_tools())
    child = lash.tool("echo", {"value": 1})
    try:
        with pytest.raises(lash.InvalidGroupKey, match="a group key is a GroupKey or its text; got int"):
            await lash.race(host, [child], key=5)  # type: ignore[call-overload]
        for keyword in ("key", "losers"):
            named: dict[str, Any] = {keyword: child, "other": child}
            with pytest.raises(lash.InvalidInput, match=f"{keyword}= is lash's own keyword"):
                await lash.select(host, **named)
    finally:
        await host.aclose()


class _Declared(MemoryHost):
    """A reference host that notes the disposition each group declared at open."""

    declared: list[lash.LoserPolicy]

    async def open_effect_group(self, group: RuntimeEffectGroup) -> lash.GroupHandle:
        self.declared.append(group.disposition)
        return await super().open_effect_group(group)


@pytest.mark.parametrize("combinator", [lash.race, lash.any], ids=["race", "any"])
async def test_race_and_any_declare_run_to_completion_unless_told(combinator: Any) -> None:
    """ADR: `RunToCompletion` is the default for race/any because it is what ECMA-262 specifies."""
    host = _Declared(resolver=demo_tools())
    host.declared = []
    kids = [lash.tool("echo", {"value": 1}), lash.tool("echo", {"value": 2})]
    try:
        await combinator(host, kids, key="s:group:default:0")
        await combinator(host, kids, key="s:group:told:0", losers=lash.CANCEL)
    finally:
        await host.aclose()
    assert host.declared == [lash.RUN_TO_COMPLETION, lash.CANCEL]


async def test_a_rejection_reads_its_childs_status_as_an_int_as_a_native_caller_reads_a_callees() -> None:
    """``status_code``: the code a child ended with when it is an HTTP error status (a call's callee's
    own status), 409 for a cancelled child, else 500, as an int; an aggregate's is its children's
    when they share one, else 500. ``code`` stays lash's code for the error itself."""
    host = MemoryHost(resolver=demo_tools())

    def fail(code: str | None = None) -> lash.ToolCall:
        return lash.tool("fail", {"message": "gone", **({"code": code} if code else {})})

    try:
        with pytest.raises(lash.Rejected) as gone:
            await lash.all(host, [fail("410")], key="s:group:status:0")
        with pytest.raises(lash.Rejected) as plain:
            await lash.all(host, [fail("not-a-status")], key="s:group:status:1")
        with pytest.raises(lash.AggregateRejection) as alike:
            await lash.any(host, [fail("410"), fail("410")], key="s:group:status:2")
        with pytest.raises(lash.AggregateRejection) as mixed:
            await lash.any(host, [fail("410"), fail()], key="s:group:status:3")
    finally:
        await host.aclose()
    assert (gone.value.status_code, gone.value.code) == (410, lash.RuntimeErrorCode.REJECTED)
    assert plain.value.status_code == 500
    assert [e.status_code for e in mixed.value.exceptions] == [410, 500]
    assert (alike.value.status_code, mixed.value.status_code) == (410, 500)
    cancelled = lash.Rejected(lash.Settlement(rank=1, position=0, replay_key="r", outcome=lash.Cancelled()))
    assert cancelled.status_code == 409
    # ``child_message``: the child's own, as a native caller reads its callee's ``e.message``.
    assert (gone.value.child_message, gone.value.message) == ("gone", "child 0 rejected: gone (code 410)")
    assert [e.child_message for e in mixed.value.exceptions] == ["gone", "gone"]
    assert cancelled.child_message == "child 0 was cancelled"


async def test_a_rejection_reads_its_childs_metadata_as_a_native_caller_reads_a_callees() -> None:
    """``metadata``: what a tool's `ToolFailure` (or a call's callee's ``TerminalError``) gave, as a
    native caller reads ``TerminalError.metadata``, None when it gave none; an aggregate's per child,
    and the aggregate's own when every child gave the same."""
    host = MemoryHost(resolver=demo_tools())

    def fail(**metadata: str) -> lash.ToolCall:
        return lash.tool("fail", {"message": "gone", **({"metadata": metadata} if metadata else {})})

    try:
        with pytest.raises(lash.Rejected) as given:
            await lash.all(host, [fail(left="5")], key="s:group:metadata:0")
        with pytest.raises(lash.AggregateRejection) as mixed:
            await lash.any(host, [fail(left="5"), fail()], key="s:group:metadata:1")
        with pytest.raises(lash.AggregateRejection) as alike:
            await lash.any(host, [fail(left="5"), fail(left="5")], key="s:group:metadata:2")
        with pytest.raises(lash.AggregateRejection) as apart:
            await lash.any(host, [fail(left="5"), fail(left="4")], key="s:group:metadata:3")
    finally:
        await host.aclose()
    assert given.value.metadata == {"left": "5"}
    assert [e.metadata for e in mixed.value.exceptions] == [{"left": "5"}, None]
    assert (alike.value.metadata, mixed.value.metadata, apart.value.metadata) == ({"left": "5"}, None, None)
    assert given.value.settlement.outcome == lash.Err(message="gone", metadata={"left": "5"})
    with pytest.raises(TypeError, match="ToolFailure metadata must be a mapping of text, not list"):
        lash.ToolFailure("gone", metadata=[("left", "5")])  # type: ignore[arg-type]


async def test_children_spread_from_an_empty_list_are_none_not_a_retried_type_error() -> None:
    """``lash.all(ctx, *children)`` of an empty list, as ``restate.gather(*futures)`` takes none: no
    children, given one by one, so an empty tuple as children given one by one give a tuple (a
    missing argument was a plain `TypeError`, which Restate retries for ever)."""
    host = MemoryHost(resolver=demo_tools())
    none: list[lash.Child[str]] = []
    try:
        assert await lash.all(host, *none, key="s:group:spread:0") == ()
        assert await lash.all_settled(host, *none, key="s:group:spread:1") == []
        with pytest.raises(lash.EmptyGroup):
            await lash.race(host, *none, key="s:group:spread:2")
        with pytest.raises(lash.EmptyGroup):
            await lash.any(host, *none, key="s:group:spread:3")
        assert not host.store.groups  # no group was opened
    finally:
        await host.aclose()


async def test_any_rejects_with_an_exception_group_in_input_order() -> None:
    host = MemoryHost(resolver=demo_tools())
    fails = [lash.tool("fail", {"message": m}) for m in ("one", "two")]
    try:
        with pytest.raises(ExceptionGroup) as caught:
            await lash.any(host, fails, key="s:group:any:0")
    finally:
        await host.aclose()
    assert isinstance(caught.value, lash.AggregateRejection)
    assert [(e.position, e.outcome) for e in caught.value.exceptions] == [
        (0, lash.Err(message="one")),
        (1, lash.Err(message="two")),
    ]
    assert caught.value.group_key == "s:group:any:0" and isinstance(caught.value, lash.LashError)
    # any([]) would hold no member: refused typed, not an exception group around a made-up child.
    with pytest.raises(lash.EmptyGroup):
        await lash.any(host, [], key="s:group:none:0")
    # `except*` splits keep the type; the group survives a copy and a pickle.
    matched, rest = caught.value.split(lambda e: getattr(e, "position", None) == 1)
    assert isinstance(matched, lash.AggregateRejection) and matched.errors == [lash.Err(message="two")]
    assert isinstance(rest, lash.AggregateRejection) and rest.errors == [lash.Err(message="one")]
    assert matched.group_key == rest.group_key == "s:group:any:0"
    # ... and the positions of the children they keep, through a pickle too.
    assert [e.position for e in matched.exceptions] == [1] and str(matched.exceptions[0]).startswith(
        "child 1 "
    )
    assert [e.position for e in pickle.loads(pickle.dumps(matched)).exceptions] == [1]
    again = pickle.loads(pickle.dumps(caught.value))
    assert again.errors == caught.value.errors and copy.copy(caught.value).errors == caught.value.errors
    assert again.group_key == "s:group:any:0"
    picked: list[BaseExceptionGroup[Any]] = []
    try:
        raise caught.value
    except* lash.ChildRejected as group:
        picked.append(group)
    assert isinstance(picked[0], lash.AggregateRejection) and picked[0].errors == caught.value.errors


async def test_a_saved_group_resumes_under_its_own_key() -> None:
    host = MemoryHost(resolver=demo_tools())
    children = [lash.tool("echo", {"value": v}) for v in "abc"]
    try:
        group = await lash.open(host, children, key="s:group:g:0")
        first = await group.next()
        saved = group.save()
        # A key given with the cursor is its own, or refused: a resume reopens the cursor's group.
        with pytest.raises(lash.InvalidInput, match="is not the key of the saved cursor's group"):
            await lash.open(host, children, key="s:group:other:0", resume=saved)
        with pytest.raises(lash.InvalidGroupKey):  # a malformed one as without resume=
            await lash.open(host, children, key="s:group:g", resume=saved)
        again = await lash.open(host, children, key="s:group:g:0", resume=saved)
        assert again.consumed == 1
        resumed = await lash.open(host, children, resume=saved)  # no key: the handle's
        assert resumed.key == "s:group:g:0" and resumed.consumed == 1 and len(resumed) == 3
        rest = [await resumed.next(), await resumed.next()]
        assert [s.rank for s in (first, *rest)] == [1, 2, 3]
        await resumed.close()
        # Decision 41: resuming a closed group is refused; it never starts the group over.
        with pytest.raises(lash.GroupNotOpen):
            await lash.open(host, children, resume=saved)
        assert "s:group:g:0" not in host.store.groups
    finally:
        await host.aclose()


@pytest.mark.parametrize(
    ("raised", "closes"),
    [
        (RuntimeError("a transient fault"), False),
        (RetryableError("retry me"), False),
        (ValueError("wrapping one"), True),  # its cause below is a TerminalError: as the SDK reads it
        (restate.TerminalError("refused", 422), True),
        (lash.InvalidInput("a lash error"), True),
    ],
    ids=["plain", "retryable", "caused-by-terminal", "terminal", "lash-error"],
)
async def test_the_block_closes_its_group_only_when_its_error_ends_the_invocation(
    raised: Exception, closes: bool
) -> None:
    """Restate retries a handler that raised anything but a `TerminalError` (or a lash error), and
    the retry replays the block from its journal: closed there, a retry that got further would meet
    a journal mismatch. So only an error that ends the invocation closes the block's group."""
    if isinstance(raised, ValueError):
        raised.__cause__ = restate.TerminalError("below", 400)
    host = MemoryHost(resolver=demo_tools())

    async def block() -> None:
        async with lash.open(host, [lash.tool("echo", {"value": 1})], key="s:group:b:0") as group:
            await group.next()
            raise raised

    try:
        with pytest.raises(type(raised)):
            await block()
        assert ("s:group:b:0" not in host.store.groups) is closes
    finally:
        await host.aclose()


class _EndedWhileWaiting(MemoryHost):
    """A host whose caller's invocation ends at its first await (as a cancel raises on Restate),
    and whose close then fails: what the caller must see is the error that ended it."""

    def ends_invocation(self, error: BaseException) -> bool:
        return isinstance(error, restate.TerminalError)

    async def await_next_settlement(
        self, handle: lash.GroupHandle, cancel: Awaitable[object] | None = None
    ) -> lash.Settlement:
        raise restate.TerminalError("cancelled", 409)

    async def close_effect_group(
        self, handle: lash.GroupHandle, disposition: lash.LoserPolicy | None = None
    ) -> None:
        self.closes_tried = getattr(self, "closes_tried", 0) + 1
        raise RuntimeError("the close failed")


@pytest.mark.parametrize("entry", ["combinator", "block"])
async def test_a_close_that_fails_as_the_invocation_ends_does_not_hide_why_it_ended(entry: str) -> None:
    """A combinator (or block) that closes its group at an error ending its invocation raises that
    error, not the close's own failure, and tries the close once."""
    host = _EndedWhileWaiting(resolver=demo_tools())
    children = [lash.tool("echo", {"value": 1})]

    async def ended() -> None:
        if entry == "combinator":
            await lash.all(host, children, key="s:group:ended:0")
        else:
            async with lash.open(host, children, key="s:group:ended:1") as group:
                await group.next()

    try:
        with pytest.raises(restate.TerminalError, match="cancelled"):
            await ended()
        assert host.closes_tried == 1
    finally:
        await host.aclose()


async def test_a_second_next_while_one_is_awaited_is_refused_and_no_rank_is_skipped() -> None:
    """One cursor reads one rank at a time: two `next` at once would both read rank 1 and advance the
    cursor twice, so rank 2 was never read (and a handle saved then resumed past it)."""
    host = MemoryHost(resolver=demo_tools())
    kids = [lash.tool("echo", {"value": v}) for v in "ab"]
    try:
        group = await lash.open(host, kids, key="s:group:twice:0")
        both: list[object] = list(await asyncio.gather(group.next(), group.next(), return_exceptions=True))
        first, second = both
        assert isinstance(second, lash.InvalidInput) and "already awaited" in str(second)
        assert isinstance(first, lash.Settlement) and first.rank == 1 and group.consumed == 1
        assert (await group.next()).rank == 2
        await group.close()
    finally:
        await host.aclose()


async def test_children_that_are_not_iterable_a_bad_on_reject_and_a_handle_object_are_refused_typed() -> None:
    """Each raised a plain `TypeError` (which Restate retries for ever), or was refused only once a
    child rejected, after the group had been opened and read."""
    host = MemoryHost(resolver=demo_tools())
    kids = [lash.tool("echo", {"value": 1})]
    try:
        with pytest.raises(lash.InvalidInput, match=r"lash.all takes lash children .* not a NoneType"):
            await lash.all(host, cast(Any, None), key="s:group:none:0")
        with pytest.raises(lash.InvalidInput, match=r"lash\.open takes lash children"):
            await lash.open(host, cast(Any, 7), key="s:group:seven:0")
        # An asyncio future iterates (its `__iter__` is its `__await__`): given alone, it was iterated.
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        with pytest.raises(lash.InvalidInput, match=r"lash\.race takes lash children .* not a Future"):
            await lash.race(host, cast(Any, future), key="s:group:future:0")
        with pytest.raises(lash.InvalidInput, match="disposition must be one of"):
            await lash.all(host, kids, key="s:group:bogus:0", on_reject=cast(Any, "bogus"))
        assert "s:group:bogus:0" not in host.store.groups  # refused unopened
        group = await lash.open(host, kids, key="s:group:h:0")
        await group.next()
        with pytest.raises(lash.InvalidHandle, match="not a GroupHandle"):
            await lash.open(host, kids, resume=cast(Any, lash.GroupHandle.from_bytes(group.save())))
        await group.close()
    finally:
        await host.aclose()


async def test_a_resolver_that_raises_refuses_the_first_open_on_the_reference_host_too() -> None:
    """As on Restate (`engine/test_call_routing.py`): a resolver's own fault is a miss of the child
    it was resolving, named in the refusal, and nothing is recorded."""
    from tests.engine.raising_resolver import resolver

    host = MemoryHost(resolver=resolver)
    kids = [lash.tool("echo", {"value": 1}), lash.tool("explodes", {})]
    try:
        with pytest.raises(lash.ChildUnroutable, match=r"its resolver raised KeyError\('explodes'\)"):
            await lash.all(host, kids, key="s:group:explodes:0")
        assert "s:group:explodes:0" not in host.store.groups
        # On a child's retry, a resolver's fault is transient, as the executor's was: retried, then
        # given up (it left the child unsettled for ever, as a miss).
        [outcome] = await lash.all_settled(host, [lash.tool("explodes_on_retry", {})], key="s:group:later:0")
        assert outcome == lash.Err(
            message="gave up after 3 attempts: KeyError: 'explodes_on_retry'", code="retries_exhausted"
        )
    finally:
        await host.aclose()


async def test_all_fails_fast_only_when_told_and_declares_run_to_completion_either_way() -> None:
    """``on_reject=CANCEL``: the open still declares `RunToCompletion`; the close narrows it."""
    closed: list[lash.LoserPolicy | None] = []

    class Closing(_Declared):
        async def close_effect_group(
            self, handle: lash.GroupHandle, disposition: lash.LoserPolicy | None = None
        ) -> None:
            closed.append(disposition)
            await super().close_effect_group(handle, disposition)

    host = Closing(resolver=demo_tools())
    host.declared = []
    kids = [lash.event("never"), lash.tool("fail", {"message": "no"})]
    try:
        for on_reject in (lash.RUN_TO_COMPLETION, lash.CANCEL):
            with pytest.raises(lash.Rejected):
                await lash.all(host, kids, key=f"s:group:{on_reject.value}:0", on_reject=on_reject)
        assert await lash.all(
            host, [lash.tool("echo", {"value": 1})], key="s:group:ok:0", on_reject=lash.CANCEL
        )
    finally:
        await host.aclose()
    assert host.declared == [lash.RUN_TO_COMPLETION] * 3
    assert closed == [None, lash.CANCEL, None]  # narrowed only where a rejection decided it


async def test_each_combinator_hands_its_bound_to_the_group_it_opens() -> None:
    bounds: list[int | None] = []

    class Bounded(MemoryHost):
        async def open_effect_group(self, group: RuntimeEffectGroup) -> lash.GroupHandle:
            bounds.append(group.max_in_flight)
            return await super().open_effect_group(group)

    host = Bounded(resolver=demo_tools())
    kids = [lash.tool("echo", {"value": n}) for n in range(3)]
    try:
        assert await lash.all(host, kids, key="s:group:all:0", max_in_flight=1) == [0, 1, 2]
        assert len(await lash.all_settled(host, kids, key="s:group:settled:0", max_in_flight=2)) == 3
        assert await lash.race(host, kids, key="s:group:race:0", max_in_flight=1) == 0
        assert await lash.any(host, *kids, key="s:group:any:0", max_in_flight=1) == 0
        assert await lash.all(host, kids, key="s:group:none:0") == [0, 1, 2]
        async with lash.open(host, kids, key="s:group:open:0", max_in_flight=2) as group:
            assert [s.position async for s in group] == [0, 1, 2]  # one at a time, one after another
    finally:
        await host.aclose()
    assert bounds == [1, 2, 1, 1, None, 2]


def test_a_service_prefix_is_checked_and_chosen_once_per_process() -> None:
    from lash_restate.engine import named

    with pytest.raises(ValueError, match="uppercase letter"):
        lash.services(prefix="lower")
    with pytest.raises(ValueError, match="uppercase letter"):
        lash.services(prefix="Bad-Name")
    assert named("Group") == "LashGroup"
    lash.services()  # the default prefix, as every other test in this process uses
    with pytest.raises(ValueError, match="already names lash's services Lash"):
        lash.services(prefix="Other")


def test_call_targets_know_bound_and_declared_services() -> None:
    """Decision 37: children may call the handlers bound beside lash's services and the services an
    application declares; a keyed service needs a key, a plain one refuses one."""
    payments = restate.Service("Payments")
    cart = restate.VirtualObject("Cart")

    @payments.handler()
    async def charge(ctx: restate.Context, order: dict[str, int]) -> int:
        return order["amount"]

    @cart.handler()
    async def add(ctx: restate.ObjectContext, sku: str) -> None:
        return None

    targets = call_targets([payments, cart], [lash.external("Billing", "invoice"), lash.external("Ledger")])
    assert targets.services == ["Billing", "Cart", "Ledger", "Payments"]
    assert targets.miss(lash.call("Payments", "charge", {"amount": 1})) is None
    assert targets.miss(lash.call("Cart", "add", "sku", key="u1")) is None
    assert targets.miss(lash.call("Billing", "invoice")) is None
    assert targets.miss(lash.call("Ledger", "anything")) is None  # declared without handlers: any
    assert targets.miss(lash.call("Billing", "refund")) == "service 'Billing' has no handler 'refund'"
    assert targets.miss(lash.call("Cart", "add", "sku")) == "service 'Cart' is keyed: the call needs a key"
    assert targets.miss(lash.call("Payments", "charge", key="k")) == (
        "service 'Payments' is not keyed: the call must not carry a key"
    )
    assert targets.miss(lash.call("Nowhere", "x")) == (
        "service 'Nowhere' is not bound here and not declared: serve it in this app, "
        "or declare it served by another deployment with lash.external('Nowhere')"
    )
    with pytest.raises(lash.InvalidInput, match="declared twice"):
        call_targets([payments], [lash.external("Payments", "other")])

    # A handler defined after the app was built is served by Restate, and reached by a child too.
    @payments.handler()
    async def refund(ctx: restate.Context, order: dict[str, int]) -> int:
        return order["amount"]

    assert targets.miss(lash.call("Payments", "refund", {"amount": 1})) is None


def test_what_lash_app_refuses_is_a_lash_error_and_still_a_value_error() -> None:
    """`except lash.LashError` catches anything lash raises, as the reference says: the refusals of
    `lash.app` / `lash.services` were plain `ValueError`s. Still `ValueError`s, for code that caught
    them so; `PrefixChosen` is exported with the other errors."""
    for build in (
        lambda: lash.app(batch_from=0),
        lambda: lash.app(batch_from="3"),  # type: ignore[arg-type]
        lambda: lash.app(name="no spaces allowed"),
        lambda: lash.services(tools=lash.ToolRegistry(), prefix="lower"),
    ):
        with pytest.raises(lash.InvalidInput) as refused:
            build()
        assert isinstance(refused.value, lash.LashError) and isinstance(refused.value, ValueError)
    assert issubclass(lash.PrefixChosen, lash.LashError)


def test_a_service_served_elsewhere_is_declared_by_its_definition_or_by_name() -> None:
    """`lash.external` given a definition this process imports but does not serve reads its name and
    whether it is keyed from it; declared by name, a keyed call to an unkeyed declaration says how
    to declare it."""
    inventory = restate.VirtualObject("Inventory")
    assert lash.external(inventory) == lash.external("Inventory", keyed=True)
    assert lash.external(restate.Workflow("Signup"), "run").keyed
    assert not lash.external(restate.Service("Pricing")).keyed
    with pytest.raises(lash.InvalidInput, match=r"keyed=False\): its definition is keyed"):
        lash.external(inventory, keyed=False)
    with pytest.raises(lash.InvalidInput, match=r"keyed=True\): its definition is a service"):
        lash.external(restate.Service("Pricing"), keyed=True)
    with pytest.raises(lash.InvalidInput, match=r"a service's name or its definition .*, not a function"):
        lash.external(test_call_targets_know_bound_and_declared_services)  # type: ignore[arg-type]
    by_name = call_targets([], [lash.external("Inventory")])
    assert by_name.miss(lash.call("Inventory", "reserve", 1, key="sku-1")) == (
        "service 'Inventory' is not keyed: the call must not carry a key (declared with "
        "lash.external('Inventory'): declare a virtual object or a workflow with keyed=True, or "
        "pass lash.external its definition)"
    )
    by_definition = call_targets([], [lash.external(inventory)])
    assert by_definition.miss(lash.call("Inventory", "reserve", 1, key="k")) is None


def test_services_given_as_a_list_or_not_services_are_refused_by_name() -> None:
    """`restate.app([a, b])` takes a list; lash's `app` and `services` take them one by one, and a
    list met a plain `AttributeError` as the app was built."""
    shop = restate.Service("Shop")
    for build, what in ((lash.app, "lash.app"), (lash.services, "lash.services")):
        with pytest.raises(
            lash.InvalidInput,
            match=rf"^\[invalid_input\] {what} takes your services one by one .* not a list of them$",
        ):
            build([shop])  # type: ignore[arg-type]
        with pytest.raises(
            lash.InvalidInput, match=r"each a restate\.Service, VirtualObject or Workflow, not an int$"
        ):
            build(shop, 1)  # type: ignore[arg-type]


async def test_a_plain_function_given_as_a_tool_rejects_its_child_saying_what_a_tool_is() -> None:
    """A tool is awaited when its child runs: a plain function's result cannot be, and retrying would
    only meet it again, so the child rejects at once, naming the tool and saying what a tool is. Any
    callable whose call returns an awaitable (an async function, a partial of one, a wrapper) runs."""

    def greet(args: Any) -> str:
        return "hello"

    async def greet_async(args: Any) -> str:
        return "hello"

    def wrapped(args: Any) -> Any:  # a sync wrapper returning the coroutine, as decorators do
        return greet_async(args)

    tools = {"greet": greet, "partial": functools.partial(greet_async), "wrapped": wrapped}
    host = MemoryHost(resolver=lash.ToolRegistry(tools))  # type: ignore[arg-type]  # as a type checker refuses it
    try:
        outcomes = await lash.all_settled(host, [lash.tool(name) for name in tools], key="s:group:plain:0")
    finally:
        await host.aclose()
    assert outcomes[1:] == [lash.Ok(value="hello"), lash.Ok(value="hello")]
    assert isinstance(outcomes[0], lash.Err) and outcomes[0].message == (
        "tool 'greet' returned a str, not an awaitable: a tool is an async function "
        "(async def greet(args): ...)"
    )


async def test_a_key_too_long_for_its_childrens_replay_keys_is_refused_naming_the_key() -> None:
    """Each child's replay key is the group key, '/' and its position: a 510-character key of eleven
    children was refused as some child's envelope ("replay key must be 1..512 characters")."""
    host = MemoryHost(resolver=demo_tools())
    key = "s:group:" + "b" * 500 + ":0"
    try:
        with pytest.raises(lash.InvalidGroupKey, match="give a shorter key=") as refused:
            await lash.all(host, [lash.tool("echo", {"value": i}) for i in range(11)], key=key)
        assert refused.value.group_key == key and "position up to 10" in refused.value.message
        assert await lash.all(host, [lash.tool("echo", {"value": i}) for i in range(10)], key=key)  # fits
        # A child given as an envelope names its own replay key: only the others' are measured.
        own = lash.RuntimeEffectEnvelope(
            command=lash.ToolCall(tool="echo", args={"value": 10}), replay_key="r"
        )
        children: list[Any] = [*(lash.tool("echo", {"value": i}) for i in range(10)), own]
        assert len(await lash.all(host, children, key=key.replace(":0", ":1"))) == 11
    finally:
        await host.aclose()
