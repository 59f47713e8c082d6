"""The effect-group contract, as behaviour every tier must show (ADR, Decision and Normative sections)."""

from __future__ import annotations

from ...contract import Err, GroupHandle, Ok
from ._scenario import scenario
from ._steps import Scope, event, fail, sleep, tool
from ._tier import ChildKind, Tier
from ._turn import Turn

__all__: list[str] = []


@scenario("groups")
async def open_returns_once_recorded_with_cursor_at_zero(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        g = t.open(s.group([event(s.event("never")), event(s.event("never2"))]))
    # ADR: open returns once the group is durably recorded, not when a child settles. The host may
    # name the group it recorded (decision 124): the cursor then reads no group opened under the key later.
    assert g.opened.ok == GroupHandle(s.key(), 2, 0, incarnation=g.opened.ok.incarnation)
    assert s.key() in await tier.open_groups()


@scenario("groups")
async def ranks_follow_settlement_order_not_input_order(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    a, b, c = s.event("a"), s.event("b"), s.event("c")
    async with Turn(tier) as t:
        opened = t.open(s.group([event(a), event(b), event(c)])).opened
    await tier.emit(c, "C")
    async with Turn(tier) as t:
        g = t.resume(opened.ok)
        first, h1 = g.next(), g.save()
    await tier.emit(a, "A")
    async with Turn(tier) as t:
        g = t.resume(h1.ok)
        second, h2 = g.next(), g.save()
    await tier.emit(b, "B")
    async with Turn(tier) as t:
        third = t.resume(h2.ok).next()
    ranks = [(r.ok.rank, r.ok.position, r.ok.outcome) for r in (first, second, third)]
    assert ranks == [(1, 2, Ok(value="C")), (2, 0, Ok(value="A")), (3, 1, Ok(value="B"))]


@scenario("groups")
async def same_rank_is_served_again_to_a_fresh_invocation(tier: Tier, children: ChildKind) -> None:
    """ADR cursor rule: awaiting rank consumed+1 before and after a crash yields the same settlement."""
    s = Scope(children)
    first_ev, second_ev = s.event("x"), s.event("y")
    async with Turn(tier) as t:
        saved = t.open(s.group([event(first_ev), event(second_ev)])).opened
    await tier.emit(second_ev, 2)
    async with Turn(tier) as t:
        before = t.resume(saved.ok).next()
    await tier.emit(first_ev, 1)
    # A fresh invocation holding only the saved cursor (consumed=0) reads rank 1 again.
    async with Turn(tier) as t:
        g = t.resume(saved.ok)
        after, again = g.next(), g.next()
    assert after.ok == before.ok
    assert before.ok.position == 1
    assert again.ok.rank == 2 and again.ok.position == 0


@scenario("groups")
async def outcomes_too_large_to_ride_the_wake_are_served_the_same_live_and_after(
    tier: Tier, children: ChildKind
) -> None:
    """Outcomes past the inline limit (16 KiB on Restate) are read from where they live: served
    the same to the live caller and to a fresh invocation, for a pair and for a wider group."""
    for width in (2, 3):  # on Restate: the direct path, then the batched one (decision 20)
        s = Scope(children)
        sizes = [20_000 + i for i in range(width)]
        async with Turn(tier) as t:
            g = t.open(s.group([tool("blob", {"size": n}) for n in sizes]))
            served = [g.next() for _ in sizes]
            g.save()
        assert sorted(len(r.ok.outcome.value) for r in served if isinstance(r.ok.outcome, Ok)) == sizes
        async with Turn(tier) as t:
            again = t.resume(g.opened.ok)
            reread = [again.next() for _ in sizes]
            again.close()
        assert [r.ok for r in reread] == [r.ok for r in served]
        await tier.wait_closed(s.key())


@scenario("groups")
async def reopen_returns_zero_and_the_callers_cursor_wins(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    group = s.group([s.echo("v0"), s.echo("v1"), s.echo("v2")])
    async with Turn(tier) as t:
        g = t.open(group)
        r1, r2, saved = g.next(), g.next(), g.save()
    assert saved.ok.consumed == 2
    async with Turn(tier) as t:
        reopened = t.open(group)
        r3 = t.resume(saved.ok).next()
    assert reopened.opened.ok.consumed == 0
    assert r3.ok.rank == 3
    assert {r1.ok.position, r2.ok.position, r3.ok.position} == {0, 1, 2}


@scenario("groups")
async def cursor_overrun_is_refused_not_clamped(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        g = t.open(s.group([s.echo(1)]))
        first, overrun, saved = g.next(), g.next(), g.save()
    assert first.ok.rank == 1
    assert overrun.error.code == "cursor_overrun"
    assert saved.ok.consumed == 1


@scenario("groups")
async def a_handle_with_another_child_count_is_refused(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        t.open(s.group([s.echo(1), s.echo(2)]))
    async with Turn(tier) as t:
        mismatch = t.resume(GroupHandle(s.key(), 3, 0)).next()  # forged: the group has two
    assert mismatch.error.code == "handle_mismatch"


@scenario("groups")
async def cancelled_await_leaves_cursor_and_rank_untouched(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    late = s.event("late")
    async with Turn(tier) as t:
        g = t.open(s.group([event(late), s.echo("now", 0)]))
        cancelled, saved = g.next(), g.save()
    # Rank 1 is the immediate echo; rank 2 waits for an event nobody has emitted yet.
    async with Turn(tier) as t:
        g = t.resume(saved.ok)
        waiting, after_cancel = g.next(cancel_after_ms=50), g.save()
    assert waiting.error.code == "await_cancelled"
    assert after_cancel.ok == saved.ok
    await tier.emit(late, "L")
    async with Turn(tier) as t:
        served = t.resume(saved.ok).next()
    assert served.ok.rank == 2 and served.ok.outcome == Ok(value="L")
    assert cancelled.ok.rank == 1


@scenario("groups")
async def a_cleared_event_is_waited_for_again_and_what_it_settled_stays(
    tier: Tier, children: ChildKind
) -> None:
    """An event stays emitted until it is cleared: a child whose group opens after the emit settles
    with it at once; after the clear, a child waits for the next emit, and what the first settled
    with stays."""
    s = Scope(children)
    gate = s.event("gate")
    await tier.emit(gate, "one")
    async with Turn(tier) as t:
        before = t.open(s.group([event(gate)], occurrence=0)).next()
    await tier.clear(gate)
    async with Turn(tier) as t:
        g = t.open(s.group([event(gate)], occurrence=1))
        waiting, saved = g.next(cancel_after_ms=200), g.save()
    assert waiting.error.code == "await_cancelled"  # cleared: nothing to settle with yet
    await tier.emit(gate, "two")
    async with Turn(tier) as t:
        after = t.resume(saved.ok).next()
        again = t.resume(GroupHandle(s.key(occurrence=0), 1, 0)).next()
    assert before.ok.outcome == again.ok.outcome == Ok(value="one")
    assert after.ok.outcome == Ok(value="two")


@scenario("groups")
async def await_on_a_group_never_opened_is_refused(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        refused = t.resume(GroupHandle(s.key(), 1, 0)).next()  # a cursor of a group nobody opened
    assert refused.error.code == "group_not_open"


@scenario("groups")
async def failures_settle_as_errors_with_their_code(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        settled = t.open(s.group([fail("boom", code="E42")])).next()
    assert settled.ok.outcome == Err(message="boom", code="E42")


@scenario("groups")
async def reopen_is_fenced_on_shape(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    pending = [event(s.event("p0")), event(s.event("p1")), event(s.event("p2"))]
    async with Turn(tier) as t:
        t.open(s.group(pending))
    async with Turn(tier) as t:
        shrunk = t.open(s.group(pending[:2]))
        rewoken = t.open(s.group(pending, wake="first"))
        redisposed = t.open(s.group(pending, disposition="cancel"))
        changed = t.open(s.group([pending[0], event(s.event("other")), pending[2]]))
    refusals = [g.opened.error for g in (shrunk, rewoken, redisposed, changed)]
    assert [e.code for e in refusals] == [
        "shape_mismatch",
        "shape_mismatch",
        "shape_mismatch",
        "replay_mismatch",
    ]
    assert refusals[3].position == 1
    assert refusals[3].replay_key == f"{s.key()}/c1"
    assert {e.group_key for e in refusals} == {s.key()}  # each names the group it was refused by
    async with Turn(tier) as t:
        same = t.open(s.group(pending))
    assert same.opened.ok.consumed == 0


@scenario("groups")
async def first_open_with_an_unroutable_child_refuses_whole_and_records_nothing(
    tier: Tier, children: ChildKind
) -> None:
    s = Scope(children)
    bad = s.group([s.echo(1), tool("no-such-tool", {}), s.echo(3)])
    async with Turn(tier) as t:
        first = t.open(bad)
    async with Turn(tier) as t:
        second = t.open(bad)
    # ADR, Decision, `open_effect_group`: two identical refusals are the observable form of
    # "the refusal journals nothing".
    assert first.opened.error == second.opened.error
    assert first.opened.error.code == "child_unroutable"
    assert first.opened.error.position == 1 and first.opened.error.replay_key == f"{s.key()}/c1"
    await tier.wait_closed(s.key())
    # Nothing was recorded: a differently shaped group under the same key opens as a *first* open.
    async with Turn(tier) as t:
        fresh = t.open(s.group([s.echo("only")]))
        settled = fresh.next()
    assert fresh.opened.ok.child_count == 1
    assert settled.ok.outcome == Ok(value="only")


@scenario("groups")
async def group_constructor_refusals_reach_the_caller_typed(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    member = {"group_key": s.key(), "position": 0, "wake": "all", "disposition": "run_to_completion"}
    cases = {
        "foreign_group_key": [{**member, "group_key": s.key(batch="other")}, None],
        "permuted_position": [None, {**member, "position": 0}],
        "wake_rule_drift": [{**member, "wake": "first"}, None],
        "disposition_drift": [{**member, "disposition": "cancel"}, None],
    }
    for code, memberships in cases.items():
        async with Turn(tier) as t:
            refused = t.open(s.group([s.echo(1), s.echo(2)], memberships=memberships))
        assert refused.opened.error.code == code
    async with Turn(tier) as t:
        empty = t.open(s.group([]))
    assert empty.opened.error.code == "empty_group"
    async with Turn(tier) as t:
        dup = t.open(s.group([s.echo(1), s.echo(2)], replay_keys=["same", "same"]))
    assert dup.opened.error.code == "duplicate_replay_key" and dup.opened.error.position == 1
    await tier.wait_closed(s.key())


@scenario("groups")
async def identical_batches_with_distinct_occurrences_do_not_share_a_counter(
    tier: Tier, children: ChildKind
) -> None:
    """ADR: two textually identical race calls in one iteration differ only by occurrence."""
    s = Scope(children)
    e0, e1 = s.event("e0"), s.event("e1")
    g0 = s.group([event(e0), s.echo("x")], occurrence=0, replay_keys=[f"{s.id}/r0/a", f"{s.id}/r0/b"])
    g1 = s.group([event(e1), s.echo("x")], occurrence=1, replay_keys=[f"{s.id}/r1/a", f"{s.id}/r1/b"])
    async with Turn(tier) as t:
        h0, h1 = t.open(g0).opened, t.open(g1).opened
    await tier.emit(e1, "one")
    async with Turn(tier) as t:
        g = t.resume(h1.ok)
        a1, b1 = g.next(), g.next()
    async with Turn(tier) as t:
        a0 = t.resume(h0.ok).next()
    assert [a1.ok.rank, b1.ok.rank, a0.ok.rank] == [1, 2, 1]
    assert {a1.ok.position, b1.ok.position} == {0, 1}
    assert a0.ok.position == 1
    assert {s.key(occurrence=0), s.key(occurrence=1)} <= await tier.open_groups()


@scenario("groups")
async def a_child_that_answers_nothing_fulfils_with_null(tier: Tier, children: ChildKind) -> None:
    """A tool that returns None, or a handler that does (Restate carries its answer as an empty
    body), fulfils with null: an answer of no bytes is no value, not an answer that is not JSON."""
    s = Scope(children)
    async with Turn(tier) as t:
        g = t.open(s.group([s.echo(None), s.echo(0)]))
        first, second = g.next(), g.next()
    outcomes = {first.ok.position: first.ok.outcome, second.ok.position: second.ok.outcome}
    assert outcomes == {0: Ok(value=None), 1: Ok(value=0)}


@scenario("groups")
async def awaits_past_the_first_wakes_serve_every_rank_held_or_still_to_settle(
    tier: Tier, children: ChildKind
) -> None:
    """A caller reading rank by rank past the ranks its open registered wakes for (32 on Restate) is
    served every rank in order, whether the group holds it already (the children that answer at
    once) or settles it while the caller waits (the two later ones, each after the one before)."""
    s = Scope(children)
    width = 36
    at_once = [s.echo(i) for i in range(width - 2)]
    async with Turn(tier) as t:
        g = t.open(s.group([*at_once, s.echo("later", 500), s.echo("last", 800)]))
        read = [g.next() for _ in range(width)]
    assert [r.ok.rank for r in read] == list(range(1, width + 1))
    assert sorted(r.ok.position for r in read[: width - 2]) == list(range(width - 2))
    assert [(r.ok.position, r.ok.outcome) for r in read[width - 2 :]] == [
        (width - 2, Ok(value="later")),
        (width - 1, Ok(value="last")),
    ]


@scenario("groups")
async def sleep_children_are_durable_timers_that_fulfil_with_null(tier: Tier, children: ChildKind) -> None:
    s = Scope(children)
    async with Turn(tier) as t:
        g = t.open(s.group([sleep(300), sleep(1)]))
        first, second = g.next(), g.next()
    assert first.ok.outcome == Ok(value=None)
    assert {first.ok.position, second.ok.position} == {0, 1}
