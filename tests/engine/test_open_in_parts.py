"""Decision 65: a group too large for one open message is opened in parts, and ranks as any other.

Each slice's children are staged with the pump that will run them (`LashPump/stage`, which routes
them), then `LashGroup/open_parts` records the group with the shape alone and starts the tree of
pumps. What must hold: every child ranked once, payloads read back, a child nobody can route
refusing the whole open with nothing kept, a resume reading the same ranks, and nothing left after
the close. The first test's children are large (about 110 KB each, so 300 of them do not fit one
open while each slice of 256 fits one part): the size is what sends them in parts. The others take
the same layout at a hundredth of the bytes and CPU, with small children on an endpoint told to open
in parts every group this wide (`LASH_PARTS_FROM`, the switch the conformance suite's batched tier
sets to 1); at N = 100,000 small children open in parts by size too (docs/performance.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import restate

from lash_restate.contract import (
    GroupWakePolicy,
    LoserPolicy,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ToolCall,
    opens_in_parts,
)
from lash_restate.engine.caller._open_parts import PARTS_FROM_ENV
from lash_restate.engine.child._routing import Routing
from lash_restate.engine.group._mode import PUMP_SLICE, slice_key
from lash_restate.engine.pump import _pump_run
from lash_restate.engine.wire._messages import PumpParts
from lash_restate.inspection import quote, sql
from lash_restate.testing import LocalStack
from tests.conformance.builders import (
    Scope,
    close,
    combine,
    count,
    echo,
    err,
    next_,
    ok,
    open_,
    save,
    tool,
    use,
)
from tests.engine.conftest import Stack, private_stack
from tests.engine.test_engine import _handle, _poll, _wait_run_completed, wait_tool_started
from tests.engine.test_operator import staged_query

WIDTH = PUMP_SLICE + 44  # two parts
BIG = "x" * 110_000


def _children(payload: str = "") -> list[dict[str, Any]]:
    return [echo(f"{i}:{payload}") for i in range(WIDTH)]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A stack of the test's own whose endpoint opens in parts every group of `WIDTH` children."""
    endpoint_env = {PARTS_FROM_ENV: str(WIDTH)}
    with LocalStack.single(tmp_path, endpoint_env=endpoint_env).start() as s:
        yield s


@pytest.fixture
def by_size(tmp_path: Path) -> Iterator[Stack]:
    """A stack of the test's own, as the engine tests' (what sends a group in parts is its size)."""
    with private_stack(tmp_path) as s:
        yield s


def test_these_children_need_two_parts() -> None:
    key = "s:group:b:0"
    envelopes = [
        RuntimeEffectEnvelope(
            command=ToolCall(tool="echo", args={"value": f"{i}:{BIG}"}), replay_key=f"{key}/{i}"
        )
        for i in range(WIDTH)
    ]
    group = RuntimeEffectGroup(
        key, envelopes, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.RUN_TO_COMPLETION
    )
    assert opens_in_parts(group)


async def _rows(stack: Stack, query: str) -> list[dict[str, Any]]:
    return await asyncio.to_thread(sql, stack.server.admin_url, query)


async def _parts(stack: Stack, group_key: str) -> list[str]:
    """The group's pumps' `stage` and `run_parts` invocations, by handler: what opening in parts ran."""
    rows = await _rows(
        stack,
        "SELECT target_handler_name AS h FROM sys_invocation WHERE target_service_name = 'LashPump' "
        f"AND ends_with(target_service_key, {quote(':' + group_key)})",
    )
    return sorted(r["h"] for r in rows if r["h"] in ("stage", "run_parts"))


def _left(group_key: str) -> str:
    return (
        "SELECT service_name, service_key, key FROM state WHERE service_key = "
        f"{quote(group_key)} OR ends_with(service_key, {quote(':' + group_key)})"
    )


@pytest.mark.slow
async def test_an_all_too_large_for_one_open_ranks_every_child_once_and_leaves_nothing(
    by_size: Stack,
) -> None:
    stack = by_size
    s = Scope()
    [result] = await stack.turn(combine("all", s.group(_children(BIG))), within=300)
    done = ok(result)
    assert done["status"] == "fulfilled"
    assert [v.split(":")[0] for v in done["value"]] == [str(i) for i in range(WIDTH)]
    assert sorted(done["order"]) == list(range(WIDTH))  # one rank per child
    assert await _parts(stack, s.key()) == ["run_parts", "run_parts", "stage", "stage"]
    await _poll(stack, _left(s.key()), lambda rows: not rows, within=120)


async def test_a_resume_of_a_group_opened_in_parts_reads_the_same_ranks(stack: Stack) -> None:
    s = Scope()
    group = s.group(_children())
    [_, first, _] = await stack.turn(open_(group), next_(), save(), within=300)
    assert (await _parts(stack, s.key())).count("stage") == 2  # its children went first, in two parts
    assert ok(first)["rank"] == 1
    [_, again, closed] = await stack.turn(use(_handle(s.key(), WIDTH, 0)), next_(), close(), within=300)
    assert ok(again) == ok(first)  # rank 1 again, from a cursor saved at 0
    assert "error" not in closed
    await _poll(stack, _left(s.key()), lambda rows: not rows, within=120)


async def test_a_child_nobody_can_route_refuses_an_open_in_parts_and_nothing_is_kept(stack: Stack) -> None:
    s = Scope()
    children = _children()
    children[PUMP_SLICE + 3] = tool("gone")  # in the second part
    bad = s.group(children)
    [a] = await stack.turn(combine("all", bad), within=300)
    [b] = await stack.turn(combine("all", bad), within=300)
    assert set(await _parts(stack, s.key())) == {"stage"}  # refused by its second part's stage
    assert err(a) == err(b)  # nothing was recorded: the second open is refused identically
    assert (err(a)["code"], err(a)["position"]) == ("child_unroutable", PUMP_SLICE + 3)
    await _poll(stack, _left(s.key()), lambda rows: not rows, within=120)


async def test_a_reopen_of_a_group_opened_in_parts_runs_again_a_child_whose_tool_came_back(
    stack: Stack,
) -> None:
    """Decision 48 on a group opened in parts: its child 0 ran while the endpoint lost its tool, so its
    run ended with no outcome and no rank, once the group had its report of the miss (decision 86).
    With the tool back, a reopen (which stages the children again, and releases them) runs again
    the child the group kept as missed (decision 95): it takes the last rank, as the reference
    host's reopen gives it, its side effect done once."""
    s = Scope()
    name = f"{s.id}-slow"
    children = _children()
    children[0] = count(name, "slow", delay_ms=60_000, slow_once=True)
    group = s.group(children)
    [opened] = await stack.turn(open_(group), within=300)
    assert (await _parts(stack, s.key())).count("stage") == 2  # its children went first, in two parts
    await wait_tool_started(stack, name)
    stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="count")  # the deployment lost the tool while it ran
    await _wait_run_completed(stack, f"{s.key()}/c0")
    stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="")  # the tool is back
    [reopened] = await stack.turn(open_(group), within=300)
    assert "ok" in reopened and "ok" in opened
    [_, last, closed] = await stack.turn(
        use(_handle(s.key(), WIDTH, WIDTH - 1)), next_(), close(), within=300
    )
    assert (ok(last)["rank"], ok(last)["position"]) == (WIDTH, 0)
    assert ok(last)["outcome"] == {"type": "ok", "value": "slow"}
    assert "error" not in closed
    assert stack.counts().count(name) == 1
    await _poll(stack, _left(s.key()), lambda rows: not rows, within=120)


async def test_a_reopen_in_parts_under_another_shape_is_refused_and_keeps_no_part(stack: Stack) -> None:
    """ADR: a reopen is fenced on group shape. A group opened in parts is opened again under its key
    with another wake rule: `open_parts` refuses it (`shape_mismatch`), and the parts that open staged
    are released, none left behind; the recorded group is untouched and closes as before."""
    s = Scope()
    [opened] = await stack.turn(open_(s.group(_children())), within=300)
    assert (await _parts(stack, s.key())).count("stage") == 2  # its children went first, in two parts
    assert "ok" in opened
    [refused] = await stack.turn(open_(s.group(_children(), wake="first")), within=300)
    assert (err(refused)["code"], err(refused)["group_key"]) == ("shape_mismatch", s.key())  # names its group
    await _poll(stack, staged_query(s.key()), lambda rows: not rows, within=120)
    [_, first, closed] = await stack.turn(use(_handle(s.key(), WIDTH, 0)), next_(), close(), within=300)
    assert ok(first)["rank"] == 1
    assert "error" not in closed
    await _poll(stack, _left(s.key()), lambda rows: not rows, within=120)


async def test_a_cancel_close_before_the_groups_own_pump_called_anything_releases_every_part(
    tmp_path: Path,
) -> None:
    """A `Cancel` group of two slices opened in parts, closed at once, while the group's own pump is
    held before its first call (`held_slices_app`, `HELD_SLICE=0`): cancelled there, it ends before
    it called the second slice's pump, and releases the part staged with it, which nothing else
    would (the close's `forget` reaches the pumps a pump called). It was kept for ever."""
    env = {PARTS_FROM_ENV: "1", "HELD_SLICE": "0"}
    held = "tests.engine.held_slices_app"
    app = LocalStack.single(tmp_path / "stack", module=held, endpoint_args=("--with-turn",), endpoint_env=env)
    with app.start() as stack:
        s = Scope()
        group = s.group([echo(i) for i in range(PUMP_SLICE + 10)], disposition="cancel")
        [opened, closed] = await stack.turn(open_(group), close(), within=120)
        assert ok(opened) and "error" not in closed
        await _poll(stack, _left(s.key()), lambda rows: not rows, within=120)
        assert await _poll(stack, staged_query(s.key()), lambda rows: True) == []


async def test_a_cancel_close_releases_the_part_a_cancelled_slices_pump_would_have_called(
    tmp_path: Path,
) -> None:
    """A `Cancel` race over six slices opened in parts. Its close cancels the tree of pumps while the
    pump of slices 1 and 2 is held before its first call (`held_slices_app`), so it ends cancelled
    with the part of slice 2 still staged. It ends after the group's own pump has heard from its report
    that the group is closed (here: the cancelled child of its own slice; the held pump goes on
    holding until the test's gate opens) and released what it knew of. That pump then releases
    the part of slice 2 too, which no pump will ever run: nothing of the group is left."""
    gate = tmp_path / "gate"
    env = {PARTS_FROM_ENV: "1", "HELD_SLICE": "1", "HELD_GATE": str(gate)}
    held = "tests.engine.held_slices_app"
    app = LocalStack.single(tmp_path / "stack", module=held, endpoint_args=("--with-turn",), endpoint_env=env)
    with app.start() as stack:
        s = Scope()
        slow = count(f"{s.id}-slow", "slow", delay_ms=600_000)  # still running at the close
        children = [slow, *[echo(i) for i in range(1, 5 * PUMP_SLICE + 40)]]
        group = s.group(children, wake="first", disposition="cancel")
        [raced] = await stack.turn(combine("race", group), within=300)
        assert "ok" in raced
        # The pumps that ran have released their stores: the group's own once it heard it is closed.
        kept = (
            "SELECT service_key FROM state WHERE service_name = 'LashPump' AND key = 'slices' "
            f"AND ends_with(service_key, {quote(':' + s.key())})"
        )
        await _poll(stack, kept, lambda rows: not rows, within=120)
        staged = await _poll(stack, staged_query(s.key()), lambda rows: True)
        assert any(r["service_key"].endswith(f".2:{s.key()}") for r in staged), staged
        gate.touch()
        await _poll(stack, _left(s.key()), lambda rows: not rows, within=120)


async def test_a_further_slices_pump_cancelled_before_its_calls_releases_the_slices_below_it_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decision 110: the pump of slices 2 to 4 of a group opened in parts, cancelled (a `Cancel`
    close) before it called the pumps of slices 3 and 4, releases the parts staged with those two,
    which no pump will run; not its own slice, nor those of the pumps above or beside it (a unit test:
    the pump's own steps stand in for Restate's)."""
    released: list[str] = []

    class Nothing:
        """A state read of nothing (never awaited here: the cancel comes first)."""

        def __await__(self) -> Generator[None, None, None]:
            return None
            yield  # a generator, as an awaitable's __await__ must be

    class Context:
        def get(self, name: str, serde: object = None) -> Nothing:
            return Nothing()

    async def cancelled(*_: object) -> bool:
        raise restate.TerminalError("cancelled", 409)

    monkeypatch.setattr(_pump_run, "_runs_first", cancelled)
    monkeypatch.setattr(_pump_run, "release_store_and_slices", lambda ctx, keys: released.extend(keys))
    run = PumpParts(group_key="g", incarnation="p-" + "0" * 36, first=2, count=3, listens=False)
    with pytest.raises(restate.TerminalError):
        await _pump_run.on_run_parts(cast("restate.ObjectContext", Context()), run, cast(Routing, None))
    assert released == [slice_key("g", run.incarnation, k * PUMP_SLICE) for k in (3, 4)]
