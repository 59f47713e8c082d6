"""Restate handlers as children (`Call`), on every tier: the demo targets `DemoCalls` and the keyed
`DemoCounter` are bound next to lash's services on Restate and registered in process on the
reference host (decision 37)."""

from __future__ import annotations

import json
from typing import Any

from tests.conformance.builders import Scope, close, combine, echo, err, next_, ok, open_, save, use

ECHO_SERVICE, COUNTER = "DemoCalls", "DemoCounter"


def call(service: str, handler: str, arg: Any = None, key: str | None = None) -> dict[str, Any]:
    command: dict[str, Any] = {"type": "call", "service": service, "handler": handler, "arg": arg}
    if key is not None:
        command["key"] = key
    return command


async def test_call_children_settle_with_the_handlers_output_or_its_terminal_error(tier: Any) -> None:
    s = Scope()
    group = s.group(
        [
            call(ECHO_SERVICE, "echo", {"value": {"paid": 42}}),
            call(COUNTER, "add", 5, key=s.id),
            call(ECHO_SERVICE, "fail", {"message": "card declined", "status": 409}),
        ]
    )
    [_, *ranks, _] = await tier.turn(open_(group), next_(), next_(), next_(), close())
    by_position = {ok(r)["position"]: ok(r)["outcome"] for r in ranks}
    assert by_position == {
        0: {"type": "ok", "value": {"paid": 42}},
        1: {"type": "ok", "value": 5},
        2: {"type": "err", "message": "card declined", "code": "409"},
    }
    await tier.wait_closed(s.key())


async def test_a_call_childs_err_code_is_the_status_its_handler_ended_with(tier: Any) -> None:
    """A callee's ``TerminalError(message, status)`` settles its child ``Err(message, str(status))`` on
    every tier, ``"500"`` (TerminalError's default) when it gave none: the status as the SDK reports it."""
    s = Scope()
    group = s.group(
        [
            call(ECHO_SERVICE, "fail", {"message": "carrier b refuses", "status": 409}),
            call(ECHO_SERVICE, "fail", {"message": "no status given"}),
            call(ECHO_SERVICE, "fail", {"message": "gone", "status": 404}),
        ]
    )
    [settled] = await tier.turn(combine("all_settled", group))
    assert ok(settled)["value"] == [
        {"type": "err", "message": "carrier b refuses", "code": "409"},
        {"type": "err", "message": "no status given", "code": "500"},
        {"type": "err", "message": "gone", "code": "404"},
    ]


async def test_a_first_open_with_an_unroutable_call_is_refused_whole(tier: Any) -> None:
    """ADR: a first open resolves all N before recording; a call to a target the endpoint cannot
    reach refuses the open, naming position and replay key, and records nothing."""
    s = Scope()
    unroutable = [
        (
            call("NoSuchService", "echo", 1),
            "call 'NoSuchService/echo' (service 'NoSuchService' is not bound here and not declared)",
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
        group = s.group([echo("fine"), bad], batch=f"b{batch}")
        [refused] = await tier.turn(open_(group))
        assert err(refused) == {
            "code": "child_unroutable",
            "message": f"no executor is registered for {what}",
            "group_key": s.key(f"b{batch}"),
            "position": 1,
            "replay_key": f"{s.key(f'b{batch}')}/c1",
        }
    assert not {s.key(f"b{b}") for b in range(len(unroutable))} & await tier.open_groups()


async def test_a_malformed_call_is_refused_typed_before_anything_runs(tier: Any) -> None:
    s = Scope()
    for bad in (
        {"type": "call", "service": "", "handler": "echo"},
        {"type": "call", "service": ECHO_SERVICE},
        {"type": "call", "service": ECHO_SERVICE, "handler": "echo", "key": ""},
        {"type": "call", "service": ECHO_SERVICE, "handler": "echo", "arg": 1, "extra": True},
    ):
        [refused] = await tier.turn(open_(s.group([bad])))
        assert err(refused)["code"] == "invalid_envelope"
    assert s.key() not in await tier.open_groups()


async def test_a_cancel_race_cancels_its_losing_call(tier: Any) -> None:
    """ADR, loser disposition: under `Cancel` a losing call is cancelled with its child (Restate
    propagates the cancellation to the call), so it ends now rather than after its hour-long timer."""
    s = Scope()
    group = s.group(
        [echo("won"), call(ECHO_SERVICE, "echo", {"value": "late", "delay_ms": 3_600_000})],
        wake="first",
        disposition="cancel",
    )
    [raced] = await tier.turn(combine("race", group))
    assert ok(raced)["value"] == "won"
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c1")


async def test_call_ranks_are_served_again_to_a_fresh_invocation(tier: Any) -> None:
    """The cursor rule holds for call children: a resumed turn reads the same settlements, and the
    call ran once (its side effect is witnessed once)."""
    s = Scope()
    group = s.group([call(ECHO_SERVICE, "count", {"name": f"{s.id}-once", "value": v}) for v in "ab"])
    [_, first] = await tier.turn(open_(group), next_())
    restored = json.dumps({"group_key": s.key(), "child_count": 2, "consumed": 0})
    [_, _, again, second, _] = await tier.turn(open_(group), use(restored), next_(), next_(), close())
    assert ok(again) == ok(first)
    assert {ok(first)["outcome"]["value"], ok(second)["outcome"]["value"]} == {"a", "b"}
    assert (await tier.counts()).count(f"{s.id}-once") == 2  # two children, each run once


async def test_a_severed_cancel_group_ranks_its_losing_call_cancelled(tier: Any) -> None:
    """Decision 13 with a call for the loser: the holder is severed while parked on rank 2, the call
    is cancelled with its child and takes rank 2 as `Cancelled` (not as the callee's error)."""
    s = Scope()
    slow = call(ECHO_SERVICE, "echo", {"value": "late", "delay_ms": 3_600_000})
    group = s.group([echo("won"), slow], wake="first", disposition="cancel")
    await tier.sever(s.key(), open_(group), next_(), save(), next_())
    restored = json.dumps({"group_key": s.key(), "child_count": 2, "consumed": 0})
    [_, _, first, second, _] = await tier.turn(open_(group), use(restored), next_(), next_(), close())
    assert ok(first)["outcome"] == {"type": "ok", "value": "won"}
    assert ok(second)["outcome"] == {"type": "cancelled"}
    await tier.wait_closed(s.key())
    await tier.wait_child_finished(f"{s.key()}/c1")
