"""Restate handlers as children (`Call`), on every tier: the demo targets `DemoCalls` and the keyed
`DemoCounter` are bound next to lash's services on Restate and registered in process on the
reference host (decision 37)."""

from __future__ import annotations

from typing import Any

from ...contract import Cancelled, Err, GroupHandle, Ok
from ._answers import ErrorBody
from ._scenario import scenario
from ._steps import Scope, call, next_, open_, save, tool
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []

ECHO_SERVICE, COUNTER = "DemoCalls", "DemoCounter"


@scenario("calls")
async def call_children_settle_with_the_handlers_output_or_its_terminal_error(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    group = s.group(
        [
            call(ECHO_SERVICE, "echo", {"value": {"paid": 42}}),
            call(COUNTER, "add", 5, key=s.id),
            call(ECHO_SERVICE, "fail", {"message": "card declined", "status": 409}),
        ]
    )
    async with Turn(tier) as t:
        g = t.open(group)
        ranks = [g.next() for _ in range(3)]
        g.close()
    assert {r.ok.position: r.ok.outcome for r in ranks} == {
        0: Ok(value={"paid": 42}),
        1: Ok(value=5),
        2: Err(message="card declined", code="409"),
    }
    await tier.wait_closed(s.key())


@scenario("calls")
async def a_call_childs_err_code_is_the_status_its_handler_ended_with(
    tier: Tier, children: ChildKind
) -> None:
    """A callee's ``TerminalError(message, status)`` settles its child ``Err(message, str(status))`` on
    every tier, ``"500"`` (TerminalError's default) when it gave none: the status as the SDK reports it."""
    s = Scope(children)
    group = s.group(
        [
            call(ECHO_SERVICE, "fail", {"message": "carrier b refuses", "status": 409}),
            call(ECHO_SERVICE, "fail", {"message": "no status given"}),
            call(ECHO_SERVICE, "fail", {"message": "gone", "status": 404}),
        ]
    )
    async with Turn(tier) as t:
        settled = t.all_settled(group)
    assert settled.ok.value == [
        {"type": "err", "message": "carrier b refuses", "code": "409"},
        {"type": "err", "message": "no status given", "code": "500"},
        {"type": "err", "message": "gone", "code": "404"},
    ]


@scenario("calls")
async def a_rejection_carries_its_callees_or_its_tools_metadata(tier: Tier, children: ChildKind) -> None:
    """A callee's ``TerminalError(message, status, metadata)`` settles its child ``Err`` with that
    metadata, as a native caller reads ``TerminalError.metadata``, and so does a tool's
    ``ToolFailure(message, code, metadata=...)``; a child that gave none settles none. On Restate,
    the endpoint writes it once told (``LASH_ERROR_METADATA``): the tier must say so."""
    s = Scope(children)
    metadata = {"left": "5", "sku": "A-1"}
    gives = call(ECHO_SERVICE, "fail", {"message": "out of stock", "status": 409, "metadata": metadata})
    tool_gives = tool("fail", {"message": "tool says no", "code": "E1", "metadata": {"why": "because"}})
    none = call(ECHO_SERVICE, "fail", {"message": "none given"})
    async with Turn(tier) as t:
        settled = t.all_settled(s.group([gives, tool_gives, none]))
        raced = t.race(s.group([gives], batch="race", wake="first"))
    assert settled.ok.value == [
        {"type": "err", "message": "out of stock", "code": "409", "metadata": metadata},
        {"type": "err", "message": "tool says no", "code": "E1", "metadata": {"why": "because"}},
        {"type": "err", "message": "none given", "code": "500"},
    ]
    assert raced.ok.rejection.outcome == Err(message="out of stock", code="409", metadata=metadata)


@scenario("calls")
async def a_first_open_with_an_unroutable_call_is_refused_whole(tier: Tier, children: ChildKind) -> None:
    """ADR: a first open resolves all N before recording; a call to a target the endpoint cannot
    reach refuses the open, naming position and replay key, and records nothing."""
    s = Scope(children)
    unroutable = [
        (
            call("NoSuchService", "echo", 1),
            "call 'NoSuchService/echo' (service 'NoSuchService' is not bound here and not declared: "
            "serve it in this app, or declare it served by another deployment with "
            "lash.external('NoSuchService'))",
        ),
        (
            call(ECHO_SERVICE, "no_such_handler", 1),
            "call 'DemoCalls/no_such_handler' (service 'DemoCalls' has no handler 'no_such_handler')",
        ),
        (
            call(COUNTER, "add", 1),
            "call 'DemoCounter/add' (service 'DemoCounter' is keyed: the call needs a key)",
        ),
        (
            call(ECHO_SERVICE, "echo", 1, key="k"),
            "call 'DemoCalls/echo' (service 'DemoCalls' is not keyed: the call must not carry a key)",
        ),
    ]
    for batch, (bad, what) in enumerate(unroutable):
        async with Turn(tier) as t:
            refused = t.open(s.group([s.echo("fine"), bad], batch=f"b{batch}"))
        assert refused.opened.error == ErrorBody(
            code="child_unroutable",
            message=f"no executor is registered for {what}",
            group_key=s.key(f"b{batch}"),
            position=1,
            replay_key=f"{s.key(f'b{batch}')}/c1",
        )
    assert not {s.key(f"b{b}") for b in range(len(unroutable))} & await tier.open_groups()


@scenario("calls")
async def a_malformed_call_is_refused_typed_before_anything_runs(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    malformed: list[dict[str, Any]] = [
        {"type": "call", "service": "", "handler": "echo"},
        {"type": "call", "service": ECHO_SERVICE},
        {"type": "call", "service": ECHO_SERVICE, "handler": "echo", "key": "k" * 513},
        {"type": "call", "service": ECHO_SERVICE, "handler": "echo", "arg": 1, "extra": True},
    ]
    for bad in malformed:
        async with Turn(tier) as t:
            refused = t.open(s.group([bad]))
        assert refused.opened.error.code == "invalid_envelope"
    assert s.key() not in await tier.open_groups()


@scenario("calls")
async def a_cancel_race_cancels_its_losing_call(tier: Tier, children: ChildKind) -> None:
    """ADR, loser disposition: under `Cancel` a losing call is cancelled with its child (Restate
    propagates the cancellation to the call), so it ends now rather than after its hour-long timer."""
    s = Scope(children)
    group = s.group(
        [s.echo("won"), call(ECHO_SERVICE, "echo", {"value": "late", "delay_ms": 3_600_000})],
        wake="first",
        disposition="cancel",
    )
    async with Turn(tier) as t:
        raced = t.race(group)
    assert raced.ok.value == "won"
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c1")


@scenario("calls")
async def call_ranks_are_served_again_to_a_fresh_invocation(tier: Tier, children: ChildKind) -> None:
    """The cursor rule holds for call children: a resumed turn reads the same settlements, and the
    call ran once (its side effect is witnessed once)."""
    s = Scope(children)
    group = s.group([call(ECHO_SERVICE, "count", {"name": f"{s.id}-once", "value": v}) for v in "ab"])
    async with Turn(tier) as t:
        first = t.open(group).next()
    async with Turn(tier) as t:
        t.open(group)
        g = t.resume(GroupHandle(s.key(), 2, 0))
        again, second = g.next(), g.next()
        g.close()
    assert again.ok == first.ok
    assert {first.ok.outcome, second.ok.outcome} == {Ok(value="a"), Ok(value="b")}
    assert (await tier.counts()).count(f"{s.id}-once") == 2  # two children, each run once


@scenario("calls")
async def a_severed_cancel_group_ranks_its_losing_call_cancelled(tier: Tier, children: ChildKind) -> None:
    """Decision 13 with a call for the loser: the holder is severed while parked on rank 2, the call
    is cancelled with its child and takes rank 2 as `Cancelled` (not as the callee's error)."""
    s = Scope(children)
    slow = call(ECHO_SERVICE, "echo", {"value": "late", "delay_ms": 3_600_000})
    group = s.group([s.echo("won"), slow], wake="first", disposition="cancel")
    await tier.sever(s.key(), open_(group), next_(), save(), next_())
    async with Turn(tier) as t:
        t.open(group)
        g = t.resume(GroupHandle(s.key(), 2, 0))
        first, second = g.next(), g.next()
        g.close()
    assert first.ok.outcome == Ok(value="won")
    assert second.ok.outcome == Cancelled()
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c1")
