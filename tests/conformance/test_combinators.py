"""all / allSettled / race / any as caller-side loops: ECMA-262 results for the same settlement timeline."""

from __future__ import annotations

import json
from typing import Any

from tests.conformance.builders import Scope, combine, echo, err, event, fail, ok, sleep, tool


def count(name: str, value: Any = None, delay_ms: int = 0) -> dict[str, Any]:
    return tool("count", {"name": name, "value": value, "delay_ms": delay_ms})


async def test_all_fulfils_in_input_order_not_settlement_order(tier: Any) -> None:
    s = Scope()
    first, second = s.event("first"), s.event("second")
    group = s.group([event(first), event(second), echo("now")])
    [started] = await tier.turn(combine("all", group, stop_after=1))
    await tier.emit(second, "B")
    [_] = [await tier.emit(first, "A")]
    [result] = await tier.turn(combine("all", group, handle=ok(started)["handle"]))
    assert ok(result)["status"] == "fulfilled"
    assert ok(result)["value"] == ["A", "B", "now"]
    assert ok(started)["order"] == [2]
    assert sorted(ok(result)["order"]) == [0, 1, 2]


async def test_all_rejects_at_the_first_consumed_rejection_while_losers_run_on(tier: Any) -> None:
    s = Scope()
    loser = f"{s.id}-loser"
    group = s.group([count(loser, "late", delay_ms=200), fail("first bad"), fail("second bad")])
    [result] = await tier.turn(combine("all", group))
    body = ok(result)
    assert body["status"] == "rejected"
    assert body["reason"]["outcome"]["type"] == "err"
    assert body["reason"]["position"] == body["order"][-1]
    assert body["reason"]["position"] in (1, 2)
    # RunToCompletion: the loser is not cancelled by the rejection; its side effect still happens.
    await tier.wait_child_finished(f"{s.key()}/c0")
    assert (await tier.counts()).count(loser) == 1


async def test_all_settled_reports_every_outcome_in_input_order(tier: Any) -> None:
    s = Scope()
    group = s.group([echo(1), fail("no", code="E1"), echo(3)])
    [result] = await tier.turn(combine("all_settled", group))
    assert ok(result)["status"] == "fulfilled"
    assert ok(result)["value"] == [
        {"type": "ok", "value": 1},
        {"type": "err", "message": "no", "code": "E1"},
        {"type": "ok", "value": 3},
    ]


async def test_race_takes_the_first_settlement(tier: Any) -> None:
    s = Scope()
    never = s.event("never")
    [won] = await tier.turn(combine("race", s.group([event(never), echo("fast")], wake="first")))
    assert ok(won) == {"status": "fulfilled", "group_key": s.key(), "order": [1], "value": "fast"}
    s2 = Scope()
    [lost] = await tier.turn(combine("race", s2.group([event(s2.event("never")), fail("x")], wake="first")))
    assert ok(lost)["status"] == "rejected"
    assert ok(lost)["reason"]["position"] == 1


async def test_race_with_cancel_losers_ends_the_loser_without_waiting_it_out(tier: Any) -> None:
    """ADR: close(Cancel) issues one cancel per unsettled child; a loser parked at a durable wait ends now.

    (A loser already inside a tool may still complete "in the race", which the ADR allows, so the
    observable is a loser that would otherwise sleep for minutes.)
    """
    s = Scope()
    group = s.group([echo("fast"), sleep(600_000)], wake="first", disposition="cancel")
    [won] = await tier.turn(combine("race", group))
    assert ok(won)["value"] == "fast"
    await tier.wait_child_finished(f"{s.key()}/c1")  # bounded wait: fails if the sleep runs on


async def test_any_fulfils_at_the_first_success(tier: Any) -> None:
    s = Scope()
    late = s.event("late")
    group = s.group([fail("a"), event(late), echo("ok")], wake="first_success")
    [result] = await tier.turn(combine("any", group))
    assert ok(result)["status"] == "fulfilled"
    assert ok(result)["value"] == "ok"


async def test_any_rejects_with_errors_in_input_order(tier: Any) -> None:
    s = Scope()
    e0, e1, e2 = s.event("e0"), s.event("e1"), s.event("e2")
    group = s.group([event(e0), event(e1), event(e2)], wake="first_success")
    [started] = await tier.turn(combine("any", group, stop_after=0))
    # Settlement order 1, 2, 0 … but the aggregate lists errors by input position (ECMA-262).
    await tier.reject(e1, "one")
    [mid] = await tier.turn(combine("any", group, handle=ok(started)["handle"], stop_after=1))
    await tier.reject(e2, "two")
    [mid2] = await tier.turn(combine("any", group, handle=ok(mid)["handle"], stop_after=2))
    await tier.reject(e0, "zero")
    [done] = await tier.turn(combine("any", group, handle=ok(mid2)["handle"]))
    assert ok(done)["status"] == "rejected"
    assert ok(done)["order"] == [1, 2, 0]
    assert ok(done)["reason"] == [
        {"type": "err", "message": m, "code": "rejected"} for m in ("zero", "one", "two")
    ]


async def test_a_rejected_signal_settles_its_child_as_an_error(tier: Any) -> None:
    s = Scope()
    name = s.event("gate")
    group = s.group([event(name)])
    [started] = await tier.turn(combine("all_settled", group, stop_after=0))
    await tier.reject(name, "denied")
    [done] = await tier.turn(combine("all_settled", group, handle=ok(started)["handle"]))
    assert ok(done)["value"] == [{"type": "err", "message": "denied", "code": "rejected"}]


async def test_stop_and_resume_in_a_fresh_invocation_gives_the_uninterrupted_result(tier: Any) -> None:
    s = Scope()
    events = [s.event(f"e{i}") for i in range(4)]
    group = s.group([event(e) for e in events])
    [part] = await tier.turn(combine("all_settled", group, stop_after=0))
    saved = ok(part)["handle"]
    # Each fresh invocation resumes from the previous one's saved cursor, one settlement further.
    for consumed, name in enumerate(reversed(events), start=1):
        await tier.emit(name, name)
        if consumed < len(events):
            [step] = await tier.turn(combine("all_settled", group, handle=saved, stop_after=consumed))
            assert ok(step)["status"] == "suspended"
            assert json.loads(ok(step)["handle"])["consumed"] == consumed
            saved = ok(step)["handle"]
    [rest] = await tier.turn(combine("all_settled", group, handle=saved))
    [uninterrupted] = await tier.turn(combine("all_settled", group))
    assert ok(rest)["value"] == [{"type": "ok", "value": e} for e in events]
    assert ok(rest)["order"] == [3, 2, 1, 0]
    assert ok(uninterrupted)["value"] == ok(rest)["value"]


async def test_a_bad_group_in_a_combinator_is_a_typed_error(tier: Any) -> None:
    s = Scope()
    [refused] = await tier.turn(combine("race", s.group([tool("missing-tool")], wake="first")))
    # The whole error body, not just its code: every tier answers with the one contract form.
    assert refused == {
        "error": {
            "code": "child_unroutable",
            "message": "no executor is registered for tool 'missing-tool'",
            "group_key": s.key(),
            "position": 0,
            "replay_key": f"{s.key()}/c0",
        }
    }
    [drift] = await tier.turn(combine("race", s.group([echo(1)], wake="all")))
    assert drift == {
        "error": {
            "code": "wake_rule_drift",
            "message": "race needs wake first, the group declares all",
            "group_key": s.key(),
        }
    }
    await tier.wait_closed(s.key())


async def test_each_result_carries_exactly_its_own_fields(tier: Any) -> None:
    s = Scope()
    gate = s.event("gate")
    group = s.group([event(gate), fail("no", code="E1")], wake="first")
    [suspended] = await tier.turn(combine("race", group, stop_after=0))
    assert ok(suspended) == {
        "status": "suspended",
        "group_key": s.key(),
        "order": [],
        "handle": json.dumps({"group_key": s.key(), "child_count": 2, "consumed": 0}, separators=(",", ":")),
    }
    [rejected] = await tier.turn(combine("race", group, handle=ok(suspended)["handle"]))
    assert ok(rejected) == {
        "status": "rejected",
        "group_key": s.key(),
        "order": [1],
        "reason": {
            "rank": 1,
            "position": 1,
            "replay_key": f"{s.key()}/c1",
            "outcome": {"type": "err", "message": "no", "code": "E1"},
        },
    }
    s2 = Scope()
    [fulfilled] = await tier.turn(combine("all", s2.group([echo("a"), echo("b")])))
    body = ok(fulfilled)
    assert sorted(body.pop("order")) == [0, 1]  # which child settled first is the tier's business
    assert body == {"status": "fulfilled", "group_key": s2.key(), "value": ["a", "b"]}


async def test_combinators_over_no_children_decide_locally_on_every_surface(tier: Any) -> None:
    """ECMA-262: all([]) and allSettled([]) fulfil with [], any([]) rejects at once; race([]) never
    settles, so it is refused (decision 8). No group is opened for any of them (ADR)."""
    s = Scope()
    empty = s.group([])
    results = await tier.turn(*(combine(kind, empty) for kind in ("all", "all_settled", "any", "race")))
    assert [ok(r)["status"] for r in results[:3]] == ["fulfilled", "fulfilled", "rejected"]
    assert ok(results[0])["value"] == ok(results[1])["value"] == []
    assert ok(results[2])["reason"] == []
    assert err(results[3])["code"] == "empty_group"
    assert s.key() not in await tier.open_groups()
