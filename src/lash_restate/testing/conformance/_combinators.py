"""all / allSettled / race / any as caller-side loops: ECMA-262 results for the same settlement timeline."""

from __future__ import annotations

import json

from ...contract import Err
from ._scenario import scenario
from ._steps import Scope, count, event, fail, sleep, tool
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []


@scenario("combinators")
async def all_fulfils_in_input_order_not_settlement_order(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    first, second = s.event("first"), s.event("second")
    group = s.group([event(first), event(second), s.echo("now")])
    async with Turn(tier) as t:
        started = t.all(group, stop_after=1)
    await tier.emit(second, "B")
    await tier.emit(first, "A")
    async with Turn(tier) as t:
        result = t.all(group, resume=started.ok.saved)
    assert result.ok.status == "fulfilled"
    assert result.ok.value == ["A", "B", "now"]
    assert started.ok.order == [2]
    assert sorted(result.ok.order) == [0, 1, 2]


@scenario("combinators")
async def all_rejects_at_the_first_consumed_rejection_while_losers_run_on(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    loser = f"{s.id}-loser"
    group = s.group([count(loser, "late", delay_ms=200), fail("first bad"), fail("second bad")])
    async with Turn(tier) as t:
        result = t.all(group)
    assert result.ok.status == "rejected"
    assert isinstance(result.ok.rejection.outcome, Err)
    assert result.ok.rejection.position == result.ok.order[-1]
    assert result.ok.rejection.position in (1, 2)
    # RunToCompletion: the loser is not cancelled by the rejection; its side effect still happens.
    await tier.wait_child_finished(f"{s.key()}/c0")
    assert (await tier.counts()).count(loser) == 1


@scenario("combinators")
async def all_settled_reports_every_outcome_in_input_order(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        result = t.all_settled(s.group([s.echo(1), fail("no", code="E1"), s.echo(3)]))
    assert result.ok.status == "fulfilled"
    assert result.ok.value == [
        {"type": "ok", "value": 1},
        {"type": "err", "message": "no", "code": "E1"},
        {"type": "ok", "value": 3},
    ]


@scenario("combinators")
async def race_takes_the_first_settlement(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        won = t.race(s.group([event(s.event("never")), s.echo("fast")], wake="first"))
    assert won.wire == {"ok": {"status": "fulfilled", "group_key": s.key(), "order": [1], "value": "fast"}}
    s2 = Scope(children)
    async with Turn(tier) as t:
        lost = t.race(s2.group([event(s2.event("never")), fail("x")], wake="first"))
    assert lost.ok.status == "rejected"
    assert lost.ok.rejection.position == 1


@scenario("combinators")
async def race_with_cancel_losers_ends_the_loser_without_waiting_it_out(
    tier: Tier, children: ChildKind
) -> None:
    """ADR: close(Cancel) issues one cancel per unsettled child; a loser parked at a durable wait ends now.

    (A loser already inside a tool may still complete "in the race", which the ADR allows, so the
    observable is a loser that would otherwise sleep for minutes.)
    """
    s = Scope(children)
    async with Turn(tier) as t:
        won = t.race(s.group([s.echo("fast"), sleep(600_000)], wake="first", disposition="cancel"))
    assert won.ok.value == "fast"
    await tier.wait_child_finished(f"{s.key()}/c1")  # bounded wait: fails if the sleep runs on


@scenario("combinators")
async def any_fulfils_at_the_first_success(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        result = t.any(s.group([fail("a"), event(s.event("late")), s.echo("ok")], wake="first_success"))
    assert result.ok.status == "fulfilled"
    assert result.ok.value == "ok"


@scenario("combinators")
async def any_rejects_with_errors_in_input_order(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    e0, e1, e2 = s.event("e0"), s.event("e1"), s.event("e2")
    group = s.group([event(e0), event(e1), event(e2)], wake="first_success")
    async with Turn(tier) as t:
        started = t.any(group, stop_after=0)
    # Settlement order 1, 2, 0 … but the aggregate lists errors by input position (ECMA-262).
    await tier.reject(e1, "one")
    async with Turn(tier) as t:
        mid = t.any(group, resume=started.ok.saved, stop_after=1)
    await tier.reject(e2, "two")
    async with Turn(tier) as t:
        mid2 = t.any(group, resume=mid.ok.saved, stop_after=2)
    await tier.reject(e0, "zero")
    async with Turn(tier) as t:
        done = t.any(group, resume=mid2.ok.saved)
    assert done.ok.status == "rejected"
    assert done.ok.order == [1, 2, 0]
    assert done.ok.errors == [Err(message=m, code="rejected") for m in ("zero", "one", "two")]


@scenario("combinators")
async def a_rejected_signal_settles_its_child_as_an_error(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    name = s.event("gate")
    group = s.group([event(name)])
    async with Turn(tier) as t:
        started = t.all_settled(group, stop_after=0)
    await tier.reject(name, "denied")
    async with Turn(tier) as t:
        done = t.all_settled(group, resume=started.ok.saved)
    assert done.ok.value == [{"type": "err", "message": "denied", "code": "rejected"}]


@scenario("combinators")
async def stop_and_resume_in_a_fresh_invocation_gives_the_uninterrupted_result(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    events = [s.event(f"e{i}") for i in range(4)]
    group = s.group([event(e) for e in events])
    async with Turn(tier) as t:
        part = t.all_settled(group, stop_after=0)
    saved = part.ok.saved
    # Each fresh invocation resumes from the previous one's saved cursor, one settlement further.
    for consumed, name in enumerate(reversed(events), start=1):
        await tier.emit(name, name)
        if consumed < len(events):
            async with Turn(tier) as t:
                step = t.all_settled(group, resume=saved, stop_after=consumed)
            assert step.ok.status == "suspended"
            assert step.ok.saved.consumed == consumed
            saved = step.ok.saved
    async with Turn(tier) as t:
        rest = t.all_settled(group, resume=saved)
    async with Turn(tier) as t:
        uninterrupted = t.all_settled(group)
    assert rest.ok.value == [{"type": "ok", "value": e} for e in events]
    assert rest.ok.order == [3, 2, 1, 0]
    assert uninterrupted.ok.value == rest.ok.value


@scenario("combinators")
async def a_resume_of_a_group_closed_since_is_refused_and_runs_nothing_again(
    tier: Tier, children: ChildKind
) -> None:
    """A saved cursor resumed twice: the first resume finishes the combinator and closes the group,
    so the second is refused `group_not_open` (decision 41) and starts nothing over; each child's
    side effect ran once."""
    s = Scope(children)
    name, gate = f"{s.id}-once", s.event("gate")
    group = s.group([count(name, "a"), event(gate)])
    async with Turn(tier) as t:
        started = t.all_settled(group, stop_after=1)
    await tier.emit(gate, "b")
    async with Turn(tier) as t:
        done = t.all_settled(group, resume=started.ok.saved)
    assert done.ok.value == [{"type": "ok", "value": "a"}, {"type": "ok", "value": "b"}]
    async with Turn(tier) as t:
        again = t.all_settled(group, resume=started.ok.saved)
    assert again.wire["error"]["code"] == "group_not_open", again.wire
    assert (await tier.counts()).count(name) == 1


@scenario("combinators")
async def a_bad_group_in_a_combinator_is_a_typed_error(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        refused = t.race(s.group([tool("missing-tool")], wake="first"))
    # The whole error body, not just its code: every tier answers with the one contract form.
    assert refused.wire == {
        "error": {
            "code": "child_unroutable",
            "message": "no executor is registered for tool 'missing-tool'",
            "group_key": s.key(),
            "position": 0,
            "replay_key": f"{s.key()}/c0",
        }
    }
    async with Turn(tier) as t:
        drift = t.race(s.group([s.echo(1)], wake="all"))
    assert drift.wire == {
        "error": {
            "code": "wake_rule_drift",
            "message": "race needs wake first, the group declares all",
            "group_key": s.key(),
        }
    }
    await tier.wait_closed(s.key())


@scenario("combinators")
async def each_result_carries_exactly_its_own_fields(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    group = s.group([event(s.event("gate")), fail("no", code="E1")], wake="first")
    async with Turn(tier) as t:
        suspended = t.race(group, stop_after=0)
    # The wire forms, whole: a field too many or too few is a departure from the contract. A host
    # may name the group it recorded in the cursor (decision 124), after the other three fields.
    named = json.loads(suspended.wire["ok"]["handle"]).get("incarnation")
    cursor = {"group_key": s.key(), "child_count": 2, "consumed": 0}
    assert suspended.wire["ok"] == {
        "status": "suspended",
        "group_key": s.key(),
        "order": [],
        "handle": json.dumps({**cursor, **({"incarnation": named} if named else {})}, separators=(",", ":")),
    }
    async with Turn(tier) as t:
        rejected = t.race(group, resume=suspended.ok.saved)
    assert rejected.wire["ok"] == {
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
    s2 = Scope(children)
    async with Turn(tier) as t:
        fulfilled = t.all(s2.group([s2.echo("a"), s2.echo("b")]))
    body = dict(fulfilled.wire["ok"])
    assert sorted(body.pop("order")) == [0, 1]  # which child settled first is the tier's business
    assert body == {"status": "fulfilled", "group_key": s2.key(), "value": ["a", "b"]}


@scenario("combinators")
async def combinators_over_no_children_decide_locally_on_every_surface(
    tier: Tier, children: ChildKind
) -> None:
    """ECMA-262: all([]) and allSettled([]) fulfil with [], any([]) rejects at once; race([]) never
    settles, so it is refused (decision 8). No group is opened for any of them (ADR)."""
    s = Scope(children)
    empty = s.group([])
    async with Turn(tier) as t:
        all_, all_settled, any_, race = (
            t.combine(kind, empty) for kind in ("all", "all_settled", "any", "race")
        )
    assert [r.ok.status for r in (all_, all_settled, any_)] == ["fulfilled", "fulfilled", "rejected"]
    assert all_.ok.value == all_settled.ok.value == []
    assert any_.ok.errors == []
    assert race.error.code == "empty_group"
    assert s.key() not in await tier.open_groups()
