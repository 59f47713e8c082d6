"""Upgrades with groups in flight: groups opened by the previous release, resumed and closed by this one.

The baseline release is materialised from this repository's own history (`tests.engine.baseline`)
and served with its own interpreter; the current checkout is the upgrade. Groups cover both
settlement paths (direct and pumped), one wider than a pump slice, every wake rule, both
dispositions, children still running at the upgrade (tools held mid-call, durable timers, a Restate
call whose callee is itself a parked caller), event children pending, cursors saved after some ranks
by a turn that returned normally, and baseline callers parked on every group across the upgrade.

- Side by side (Restate's rolling upgrade): the current code registered as a new deployment beside
  the baseline's, which stays up, so invocations pinned to it keep running baseline code while they
  settle into group objects whose new invocations run the current code.
- In place: the baseline endpoint stopped and the current code started on the same URL, registered
  again with ``force``; invocations pinned to that deployment then replay their journals on the
  current code.

After the upgrade every group is re-read from a cursor saved at 0 and resumed from its saved handle on
the current code: every rank's position and payload must be what the baseline served and what the
group's durable order says, the verdict the one ECMA-262 gives for that order, and the close must
leave no lash state and no unfinished invocation.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote as url_quote

import httpx
import pytest

from lash_restate.engine import BASELINE, BASELINE_HANDLERS  # the release every later one resumes (format 1)
from lash_restate.engine.wire._formats import ERROR_METADATA_ENV
from lash_restate.inspection import RollbackBlocker, quote, rollback_blockers, sql
from lash_restate.testing import LocalStack
from lash_restate.testing.processes import Endpoint, StackError
from tests.conformance.builders import (
    Scope,
    call,
    close,
    combine,
    event,
    fail,
    next_,
    ok,
    open_,
    sleep,
    tool,
    use,
)
from tests.engine.baseline import REPO, Baseline, BaselineError, materialise
from tests.engine.cli_main import run_main
from tests.engine.upgrade_app import APP
from tests.engine.upgrade_tools import RESOLVER

# Each pytest-xdist worker that runs one of these tests asks for the baseline; the first builds it
# (`materialise` takes a lock). A hang guard only: every wait in these tests fails on its own once
# nothing progresses (`Progress`), and a healthy upgrade on a busy machine takes longer than the
# suite's default guard of 120 s.
pytestmark = [pytest.mark.restate, pytest.mark.slow, pytest.mark.timeout(900)]

PARKED_S = 3600  # a turn's own HTTP deadline: none to speak of; `Progress` tells a stuck wait (see there)
# How long a wait may see nothing at all progress before it is called stuck: longer than any quiet
# spell of a healthy upgrade (a retry's backoff, a pump's linger, a gate tool running), and counted
# from the cluster's last progress, so a loaded machine, slower at everything, is never a failure.
QUIET_S = 45
T = TypeVar("T")
SLEEP_MS = 3000  # a durable timer that usually fires after the upgrade
NEVER_MS = 600_000  # a timer that only a Cancel close ends
WIDE = 257  # wider than one pump slice (256): two pumps, the first calling the second
# A wide group's plain awaits start this many ranks before its last: a baseline group answers each
# await with every rank after the cursor (and its caller reads all their outcomes), so reading a wide
# group one await at a time from 0 costs its square; the ranks before are read in bulk (`tail_from`).
TAIL = 8
LASH = ("LashGroup", "LashChild", "LashPump", "LashSignal")
WAKE = {"all": "all", "all_settled": "all", "race": "first", "any": "first_success"}
# Both releases serve the demo tools and `gate` (tests/engine/upgrade_tools.py, imported from this checkout).
TOOLS_ENV = {"LASH_RESOLVER": RESOLVER, "PYTHONPATH": str(REPO)}
# A callee's rejection that gives metadata (the baseline reads an outcome strictly: none of it).
REFUSES = {"message": "late refusal", "status": 409, "metadata": {"left": "0"}}
APP_ENV = {"PYTHONPATH": str(REPO)}  # an application of its own names its tools (tests/engine/upgrade_app.py)


@pytest.fixture(scope="session")
def baseline() -> Baseline:
    try:
        release = materialise(BASELINE)
    except BaselineError as exc:
        pytest.fail(str(exc))
    # What the baseline endpoint will run: its interpreter, with the tools module both releases serve.
    where = release.imported_from(RESOLVER.partition(":")[0], TOOLS_ENV)
    assert where == (release.source / "lash_restate").resolve(), (
        f"the baseline runs lash_restate from {where}"
    )
    return release


# -- the groups ----------------------------------------------------------------------------------

# A child spec says what the child is and how it settles. Held across the upgrade by the test:
# "slow" (the `gate` tool, mid-call until the test opens its gate), "event" / "reject" (until the test
# emits or rejects it), "call_wait" (a Restate call to `LashTurn/run`, itself a caller racing a group
# over one event, until the test emits that), "never" (a 10-minute timer: only a Cancel close ends it).
# "sleep" is a durable timer that usually fires after the upgrade; the rest settle at once.


@dataclass
class Case:
    name: str
    kind: str
    specs: list[str]
    stop_after: int
    disposition: str = "run_to_completion"
    gate: str = ""  # the file whose creation releases the group's "slow" children
    scope: Scope = field(default_factory=Scope)
    # Filled in on the baseline:
    handle0: str = ""  # the cursor saved at 0, right after the open
    saved: dict[str, Any] = field(default_factory=dict)  # the suspended result, with its handle
    served: list[dict[str, Any]] = field(default_factory=list)  # the ranks the baseline served
    # A wide group's cursor where its plain awaits start (0: every rank is read one await at a time):
    # the baseline consumes the ranks before it in bulk, a combinator's run from the cursor at 0.
    tail_from: int = 0
    handle_tail: str = ""  # the cursor saved at ``tail_from``
    bulk: list[int] = field(default_factory=list)  # the positions of the ranks before it, as read

    @property
    def key(self) -> str:
        return self.scope.key()

    def event_name(self, i: int) -> str:
        return self.scope.event(f"e{i}")

    def value(self, i: int) -> str:
        return f"{self.name}-{i}"

    def inner(self, i: int) -> dict[str, Any]:
        """The group a "call_wait" child's callee races: one event, under this case's scope."""
        return self.scope.group([event(self.scope.event(f"w{i}"))], wake="first", batch=f"inner{i}")

    @property
    def events(self) -> list[tuple[str, str]]:
        """Every event the test emits (value ``ev-…``) or rejects (message ``no-…``) for this group."""
        named = []
        for i, spec in enumerate(self.specs):
            if spec == "event":
                named.append((self.event_name(i), "emit"))
            elif spec == "reject":
                named.append((self.event_name(i), "reject"))
            elif spec == "call_wait":
                named.append((self.scope.event(f"w{i}"), "emit"))
        return named

    def event_value(self, name: str) -> str:
        return f"ev-{name}"

    def command(self, i: int) -> dict[str, Any]:
        spec, value = self.specs[i], self.value(i)
        if spec == "ok":
            return tool("echo", {"value": value})
        if spec == "slow":
            return tool("gate", {"name": value, "value": value, "gate": self.gate})
        if spec == "fail":
            return fail(value, code="boom")
        if spec == "sleep":
            return sleep(SLEEP_MS)
        if spec == "never":
            return sleep(NEVER_MS)
        if spec == "call_ok":
            return _call("DemoCalls", "echo", {"value": value})
        if spec == "call_fail":
            return _call("DemoCalls", "fail", {"message": value, "status": 409})
        if spec == "call_wait":
            return _call("LashTurn", "run", {"steps": [combine("race", self.inner(i))]})
        return event(self.event_name(i))

    @property
    def group(self) -> dict[str, Any]:
        commands = [self.command(i) for i in range(len(self.specs))]
        return self.scope.group(commands, wake=WAKE[self.kind], disposition=self.disposition)

    def outcome(self, i: int) -> dict[str, Any]:
        """How child ``i`` settles (a "never" child never does before the close)."""
        spec, value = self.specs[i], self.value(i)
        if spec == "fail":
            return {"type": "err", "message": value, "code": "boom"}
        if spec == "call_fail":
            return {"type": "err", "message": value, "code": "409"}
        if spec == "reject":
            return {"type": "err", "message": f"no-{self.event_name(i)}", "code": "rejected"}
        if spec == "event":
            return {"type": "ok", "value": self.event_value(self.event_name(i))}
        if spec == "call_wait":
            inner = self.inner(i)["key"]
            won = self.event_value(self.scope.event(f"w{i}"))
            answer = {"status": "fulfilled", "group_key": inner, "order": [0], "value": won}
            return {"type": "ok", "value": [{"ok": answer}]}
        return {"type": "ok", "value": None if spec == "sleep" else value}

    @property
    def settling(self) -> int:
        """How many ranks the group records before its close: every child but the "never" ones."""
        return sum(spec != "never" for spec in self.specs)

    def settlement(self, rank: int, position: int) -> dict[str, Any]:
        return {
            "rank": rank,
            "position": position,
            "replay_key": f"{self.key}/c{position}",
            "outcome": self.outcome(position),
        }

    def verdict(self, order: list[int]) -> dict[str, Any]:
        """ECMA-262 over the durable rank ``order`` (the oracle): the combinator's whole answer."""
        n, outcomes = len(self.specs), [self.outcome(p) for p in range(len(self.specs))]
        failed = [outcomes[p]["type"] != "ok" for p in order]
        base = {"group_key": self.key}
        if self.kind == "all":
            for rank, (position, bad) in enumerate(zip(order, failed, strict=True), 1):
                if bad:
                    reason = self.settlement(rank, position)
                    return {**base, "status": "rejected", "order": order[:rank], "reason": reason}
            values = [o["value"] for o in outcomes]
            return {**base, "status": "fulfilled", "order": order[:n], "value": values}
        if self.kind == "all_settled":
            return {**base, "status": "fulfilled", "order": order[:n], "value": outcomes}
        if self.kind == "race":
            first = order[0]
            if failed[0]:
                return {**base, "status": "rejected", "order": [first], "reason": self.settlement(1, first)}
            return {**base, "status": "fulfilled", "order": [first], "value": outcomes[first]["value"]}
        for rank, (position, bad) in enumerate(zip(order, failed, strict=True), 1):
            if not bad:
                value = outcomes[position]["value"]
                return {**base, "status": "fulfilled", "order": order[:rank], "value": value}
        return {**base, "status": "rejected", "order": order[:n], "reason": outcomes}


def _call(service: str, handler: str, arg: Any) -> dict[str, Any]:
    return {"type": "call", "service": service, "handler": handler, "arg": arg}


def in_flight_cases(gate: Path) -> list[Case]:
    """Groups with children still running at the upgrade, covering every path the upgrade must carry:
    at most two children settle directly, three or more through pumps (one group through two)."""
    cases = [
        # direct
        Case("race-direct", "race", ["event", "never"], 0, "cancel"),
        Case("any-direct", "any", ["fail", "slow"], 1),
        Case("all-direct", "all", ["ok", "event"], 1),
        Case("settled-direct", "all_settled", ["sleep", "reject"], 0),
        # pumped
        Case("settled-pumped", "all_settled", ["ok", "fail", "event", "sleep", "slow", "call_wait"], 2),
        Case("race-pumped", "race", ["never", "slow", "call_ok", "event"], 0, "cancel"),
        Case("any-pumped", "any", ["fail", "call_fail", "event", "never"], 2, "cancel"),
        Case("all-pumped", "all", ["ok", "ok", "reject", "slow"], 2),
        # wider than a pump slice, its last child an event in the second slice
        Case("all-wide", "all", ["ok"] * WIDE + ["event"], 10, tail_from=WIDE + 1 - TAIL),
    ]
    for case in cases:
        case.gate = str(gate)
    return cases


def settled_cases() -> list[Case]:
    """Groups whose children all settle on their own at once: nothing of theirs runs at the upgrade."""
    return [
        Case("all-direct-settled", "all", ["ok", "call_ok"], 1),
        Case("race-direct-settled", "race", ["fail", "ok"], 0, "cancel"),
        Case("settled-pumped-settled", "all_settled", ["ok", "fail", "call_ok", "call_fail"], 3),
        Case("any-pumped-settled", "any", ["fail", "call_fail", "fail"], 2, "cancel"),
        Case("all-wide-settled", "all", ["ok"] * WIDE, 10, tail_from=WIDE - TAIL),
    ]


# -- driving them --------------------------------------------------------------------------------


async def open_on_baseline(stack: LocalStack, case: Case) -> None:
    """Open, keep the cursor at 0, consume ``stop_after`` ranks and return normally with the handle."""
    [opened, suspended] = await turn(
        stack, open_(case.group), combine(case.kind, case.group, stop_after=case.stop_after)
    )
    case.handle0 = ok(opened)
    case.saved = ok(suspended)
    assert case.saved["status"] == "suspended", (case.name, case.saved)
    assert len(case.saved["order"]) == case.stop_after
    if case.tail_from:
        [bulk] = await turn(
            stack, combine(case.kind, case.group, handle=case.handle0, stop_after=case.tail_from)
        )
        read = ok(bulk)
        assert read["status"] == "suspended", (case.name, read)
        case.handle_tail, case.bulk = read["handle"], read["order"]


async def read_served(stack: LocalStack, case: Case) -> None:
    """The ranks the baseline serves for the consumed prefix, read on the baseline before the upgrade."""
    if case.stop_after:
        results = await turn(stack, use(case.handle0), *[next_() for _ in range(case.stop_after)])
        case.served = [ok(r) for r in results[1:]]


def lash_state(scope_ids: list[str]) -> str:
    """Every state row a lash service keeps for these scopes (pump keys end with the group's key)."""
    match = " OR ".join(f"strpos(service_key, {quote(s)}) > 0" for s in scope_ids)
    services = ", ".join(quote(s) for s in LASH)
    return (
        f"SELECT service_name, service_key, key FROM state WHERE service_name IN ({services}) AND ({match})"
    )


UNFINISHED = (
    "SELECT id, target_service_name AS service, target_handler_name AS handler, status, "
    "pinned_deployment_id FROM sys_invocation WHERE status != 'completed'"
)
FAILING = (
    "SELECT target_service_name AS service, target_handler_name AS handler, pinned_deployment_id, "
    "retry_count, last_failure FROM sys_invocation WHERE status != 'completed' AND last_failure IS NOT NULL"
)


async def turn(stack: LocalStack, *steps: dict[str, Any]) -> list[dict[str, Any]]:
    """`LocalStack.turn`, and if it stops progressing, the failures Restate keeps retrying: an upgrade
    that breaks a format shows as a handler failing to decode what the other release wrote."""
    try:
        return await Progress(stack).unless_stuck(stack.turn(*steps, within=PARKED_S), "a turn")
    except (httpx.HTTPError, StackError) as exc:
        raise AssertionError(f"a turn did not answer ({exc!r}); {await failing(stack)}") from None


class Progress:
    """Whether anything in the cluster still moves: an invocation started, ended, or grew its journal.

    A wait fails once nothing has moved for QUIET_S, not after a fixed time: on a busy machine every
    step is slower, and a wait sized from an idle one fails there though nothing is wrong.
    """

    _QUERY = "SELECT count(*) AS n, sum(journal_size) AS j FROM sys_invocation"

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.mark: Any = None
        self.since = asyncio.get_running_loop().time()
        self.checked = -1.0

    async def stuck(self) -> bool:
        """Whether nothing has moved for QUIET_S (asked at most once a second)."""
        now = asyncio.get_running_loop().time()
        if now - self.checked < 1:
            return False
        self.checked = now
        mark = await asyncio.to_thread(sql, self.stack.admin_url, self._QUERY)
        if mark != self.mark:
            self.mark, self.since = mark, now
        return now - self.since > QUIET_S

    async def unless_stuck(self, waited: Awaitable[T], what: str) -> T:
        """``waited``'s result, or an AssertionError naming ``what`` once nothing moves for QUIET_S."""
        task = asyncio.ensure_future(waited)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=1)
                if done:
                    return task.result()
                if await self.stuck():
                    raise AssertionError(
                        f"{what}: nothing progressed for {QUIET_S}s; {await failing(self.stack)}"
                    )
        finally:
            task.cancel()


async def failing(stack: LocalStack) -> str:
    rows = await asyncio.to_thread(sql, stack.admin_url, FAILING)
    # Restate leaves a column out of a row where it is null: a call no deployment took has no pin.
    seen = {(r["service"], r["handler"], r.get("pinned_deployment_id"), r["last_failure"]) for r in rows}
    lines = [f"{s}/{h} on {d}: {str(f).splitlines()[0][:300]}" for s, h, d, f in sorted(seen, key=str)]
    return "invocations retrying:\n" + "\n".join(lines) if lines else "no invocation is retrying"


async def poll(
    stack: LocalStack, query: str, done: Any, what: str, key: str | None = None
) -> list[dict[str, Any]]:
    """``query``'s rows once ``done`` says so; an AssertionError once nothing progresses (`Progress`),
    with what the endpoints logged of the group ``key``, if given."""
    rows: list[dict[str, Any]] = []
    progress = Progress(stack)
    while True:
        rows = await asyncio.to_thread(sql, stack.admin_url, query)
        if done(rows):
            return rows
        if await progress.stuck():
            logged = (
                "" if key is None else f"\nthe endpoints' lines naming {key}:\n{group_events(stack, key)}"
            )
            raise AssertionError(
                f"{what}: nothing progressed for {QUIET_S}s; last rows: {rows[:10]}; {await failing(stack)}"
                + logged
            )
        await asyncio.sleep(0.05)


def durable_order(rows: list[dict[str, Any]]) -> list[int]:
    """The group's rank -> position map from its `meta` state row (empty if the group is gone)."""
    if not rows:
        return []
    packed = base64.b64decode(json.loads(rows[0]["value_utf8"])["order"])
    return [position for (position,) in struct.iter_unpack("<I", packed)]


def meta_query(case: Case) -> str:
    return group_meta(case.key)


def group_meta(key: str) -> str:
    where = f"service_name = 'LashGroup' AND service_key = {quote(key)} AND key = 'meta'"
    return f"SELECT value_utf8 FROM state WHERE {where}"


async def settle_pending(stack: LocalStack, cases: list[Case], gate: Path | None) -> dict[str, list[int]]:
    """Emit or reject every event and open the gate, then await every group's durable order reaching
    its settling count."""
    for case in cases:
        for name, how in case.events:
            if how == "emit":
                await stack.emit(name, case.event_value(name))
            else:
                await stack.reject(name, f"no-{name}")
    if gate is not None:
        await asyncio.to_thread(gate.touch)
    orders = {}
    for case in cases:
        rows = await poll(
            stack,
            meta_query(case),
            lambda rows, c=case: len(durable_order(rows)) == c.settling,
            f"{case.name}: every child but the never-ending ones ranked",
            case.key,
        )
        orders[case.name] = durable_order(rows)
    return orders


async def read_all(stack: LocalStack, case: Case) -> list[dict[str, Any]]:
    """Every rank the group will record before its close, read from the cursor saved at 0."""
    results = await turn(stack, *_read_steps(case))
    return [ok(r) for r in results[1:]]


async def read_parked(stack: LocalStack, case: Case) -> list[dict[str, Any]]:
    """`read_all` by a caller parked across the upgrade: nothing it waits for can progress before the
    test settles the group, so it is watched for progress only from then on."""
    results = await stack.turn(*_read_steps(case), within=PARKED_S)
    return [ok(r) for r in results[1:]]


def _read_steps(case: Case) -> list[dict[str, Any]]:
    start = case.handle_tail if case.tail_from else case.handle0
    return [use(start), *[next_() for _ in range(case.settling - case.tail_from)]]


def check_ranks(case: Case, reread: list[dict[str, Any]], order: list[int], who: str) -> None:
    """``reread``, every rank from ``case.tail_from`` on, against the durable ``order``."""
    where = f"{case.name}, read by {who}"
    expected = [case.settlement(r, p) for r, p in enumerate(order, 1)]
    first = case.tail_from
    assert case.bulk == order[:first], f"{case.name}: the ranks read in bulk differ from the durable order"
    assert case.served == expected[: len(case.served)], f"{case.name}: the baseline served a wrong rank"
    tail = [s["position"] for s in reread]
    assert tail == order[first:], f"{where}: the ranks differ from the durable order"
    if not first:  # a wide group's served ranks are before its tail: checked above, and by the resume
        assert reread[: len(case.served)] == case.served, f"{where}: a rank the baseline served changed"
    assert reread == expected[first:], f"{where}: a payload differs"


async def resume_on_current(stack: LocalStack, case: Case, order: list[int]) -> None:
    """Re-read every rank from the cursor saved at 0, then resume from the saved handle and close."""
    check_ranks(case, await read_all(stack, case), order, "the current code")
    [resumed] = await turn(stack, combine(case.kind, case.group, handle=case.saved["handle"]))
    answer = ok(resumed)
    assert answer["order"][: case.stop_after] == case.saved["order"], f"{case.name}: consumed ranks moved"
    assert answer == case.verdict(order), f"{case.name}: the verdict is not ECMA-262's for {order}"


async def clear_events(stack: LocalStack, cases: list[Case]) -> None:
    for case in cases:
        for name, _ in case.events:
            await stack.call(f"LashSignal/{url_quote(name, safe='')}/clear")


async def nothing_left(stack: LocalStack, cases: list[Case]) -> None:
    scopes = [case.scope.id for case in cases]
    await poll(stack, lash_state(scopes), lambda rows: not rows, "no lash state left after every close")
    await poll(stack, UNFINISHED, lambda rows: not rows, "no unfinished invocation after every close")


def ran_on(stack: LocalStack, key: str | None = None) -> dict[tuple[str, str], set[str]]:
    """The deployments each (service, handler) ran on (for ``key`` alone, if given): who ran what,
    old code or new."""
    query = (
        "SELECT target_service_name AS s, target_handler_name AS h, pinned_deployment_id AS d "
        "FROM sys_invocation" + ("" if key is None else f" WHERE target_service_key = {quote(key)}")
    )
    ran: dict[tuple[str, str], set[str]] = {}
    for row in sql(stack.admin_url, query):
        ran.setdefault((row["s"], row["h"]), set()).add(row["d"])
    return ran


def baseline_stack(tmp: Path, baseline: Baseline) -> tuple[LocalStack, Endpoint]:
    stack = LocalStack(tmp)
    stack.add_server()
    return stack, stack.add_endpoint("baseline", python=baseline.python, env=TOOLS_ENV)


def current_endpoint(stack: LocalStack) -> Endpoint:
    # Every group event logged, so a failure can say what the current code did with the group.
    return stack.add_endpoint("current", env={**TOOLS_ENV, "LASH_VERBOSE": "1"})


def group_events(stack: LocalStack, key: str, last: int = 30) -> str:
    """The last lines of every endpoint's log that name ``key``: what each code did with the group."""
    lines = []
    for endpoint in stack.endpoints:
        if endpoint.log_path is not None and endpoint.log_path.exists():
            named = [
                line for line in endpoint.log_path.read_text(errors="replace").splitlines() if key in line
            ]
            lines += [f"  {endpoint.log_path.name}: {line[:400]}" for line in named[-last:]]
    return "\n".join(lines) or "  no endpoint logged it"


# -- the tests -----------------------------------------------------------------------------------

Upgrade = Callable[[], Awaitable[tuple[str, str]]]  # performs the upgrade; the old and new deployment ids


async def upgrade_with_groups_in_flight(
    stack: LocalStack, groups: list[Case], upgrade: Upgrade, gate: Path | None
) -> tuple[str, str]:
    """Open ``groups`` on the baseline, park a baseline caller on each, upgrade, settle what is pending,
    then check every rank and verdict on the current code and that the closes leave nothing."""
    await asyncio.gather(*(open_on_baseline(stack, c) for c in groups))
    await asyncio.gather(*(read_served(stack, c) for c in groups))
    # Callers parked across the upgrade: baseline turns reading every rank from 0, which then
    # decode what the current code's group objects answer them and wake them with. None can finish
    # before the test releases its group's held children.
    # Their wait spans the whole upgrade, however long a loaded machine takes over it: it is bounded
    # from the settle on, when they can answer, not from here.
    parked = {c.name: asyncio.create_task(read_parked(stack, c)) for c in groups}
    waiting_calls = sum(c.specs.count("call_wait") for c in groups)
    await poll(
        stack,
        f"{UNFINISHED} AND target_service_name = 'LashTurn'",
        lambda rows: (
            len(rows) == len(groups) + waiting_calls and all(r.get("pinned_deployment_id") for r in rows)
        ),
        "every parked caller (and every call child's callee) runs on the baseline",
    )
    gates = [f"gate:{c.value(i)}" for c in groups for i, spec in enumerate(c.specs) if spec == "slow"]
    await poll_counts(stack, lambda seen: all(g in seen for g in gates), "every gate tool is mid-call")
    running = {
        (r["service"], r["handler"]) for r in await asyncio.to_thread(sql, stack.admin_url, UNFINISHED)
    }
    for pinned in [("LashChild", "run"), ("LashChild", "execute"), ("LashPump", "run"), ("LashTurn", "run")]:
        assert pinned in running, f"no {pinned} is running on the baseline before the upgrade"
    old_id, new_id = await upgrade()

    orders = await settle_pending(stack, groups, gate)
    for case in groups:
        reread = await Progress(stack).unless_stuck(parked[case.name], f"{case.name}: its parked caller")
        check_ranks(case, reread, orders[case.name], "a caller parked on the baseline")
    await asyncio.gather(*(resume_on_current(stack, c, orders[c.name]) for c in groups))
    await clear_events(stack, groups)
    await nothing_left(stack, groups)
    return old_id, new_id


async def poll_counts(stack: LocalStack, done: Callable[[list[str]], bool], what: str) -> None:
    """Until ``done`` holds of the tools' count file; an AssertionError once nothing progresses."""
    progress = Progress(stack)
    while not done(stack.counts()):
        if await progress.stuck():
            raise AssertionError(f"{what}: nothing progressed for {QUIET_S}s; {await failing(stack)}")
        await asyncio.sleep(0.05)


async def test_groups_opened_by_the_baseline_resume_and_close_on_the_current_code_side_by_side(
    baseline: Baseline, tmp_path: Path
) -> None:
    """Restate's rolling upgrade: the current code registered as a new deployment beside the baseline's,
    which stays up for the invocations pinned to it."""
    stack, old = baseline_stack(tmp_path, baseline)
    new = current_endpoint(stack)
    with stack:
        stack.start(register=False)
        [registered] = stack.register(old, force=False)

        # A caller pinned to the baseline that opens a group after the upgrade: the current code
        # records it and its pump calls the callee, whose rejection gives metadata that the baseline
        # caller could not read; the current code leaves it out unless told (decision 118).
        late = Scope()
        first = late.group([event(late.event("go"))], wake="first")
        second = late.group([call("DemoCalls", "fail", REFUSES)], batch="after")
        steps = [open_(first), next_(), close(), combine("all_settled", second)]
        opens_late: list[asyncio.Task[list[dict[str, Any]]]] = []

        async def side_by_side() -> tuple[str, str]:
            opens_late.append(asyncio.create_task(stack.turn(*steps, within=PARKED_S)))
            await poll(stack, group_meta(first["key"]), bool, "the late caller's first group opened")
            # And its child's run started: Restate creates it once the open's send crosses to the
            # child's partition, and pins it to a deployment as it first runs, so one that starts
            # after the upgrade runs on the current code (a full run once ran that order).
            child = f"starts_with(target_service_key, {quote(first['key'])}) AND target_handler_name = 'run'"
            await poll(
                stack,
                f"SELECT pinned_deployment_id FROM sys_invocation WHERE {child}",
                lambda rows: len(rows) == 1 and "pinned_deployment_id" in rows[0],
                "the late caller's child",
            )
            [upgraded] = stack.register(new, force=False)  # a new deployment; the baseline's stays up
            assert upgraded["id"] != registered["id"]
            await stack.emit(late.event("go"), "go")  # the late caller goes on to its second open
            return registered["id"], upgraded["id"]

        old_id, new_id = await upgrade_with_groups_in_flight(
            stack, in_flight_cases(tmp_path / "gate"), side_by_side, tmp_path / "gate"
        )
        *_, settled = await Progress(stack).unless_stuck(opens_late[0], "the late caller")
        assert ok(settled)["value"] == [{"type": "err", "message": REFUSES["message"], "code": "409"}]
        # Children, pumps and parked callers ran on the baseline only; what the resumes asked of the
        # groups and the pumps' stores ran on the current code, while baseline children and pumps still
        # settled into them.
        ran = ran_on(stack)
        for handler in [("LashChild", "execute"), ("LashPump", "run")]:
            assert ran[handler] == {old_id}, (handler, ran[handler])
        # A resume's reopen of a baseline group dispatches its unsettled children again (decision 95),
        # queued behind their first runs: the close cancels them there, or, on a loaded machine, once
        # they have started on the current code. Every run the baseline dispatched ran on it.
        runs = sql(
            stack.admin_url,
            "SELECT r.pinned_deployment_id AS d, o.pinned_deployment_id AS by FROM sys_invocation r "
            "JOIN sys_invocation o ON r.invoked_by_id = o.id "
            "WHERE r.target_service_name = 'LashChild' AND r.target_handler_name = 'run'",
        )
        assert {row.get("d") for row in runs if row.get("by") == old_id} == {old_id}, runs
        assert {row.get("by") for row in runs} <= {old_id, new_id}, runs
        for handler in [("LashGroup", "wait"), ("LashGroup", "close"), ("LashPump", "outcomes")]:
            assert new_id in ran[handler], (handler, ran[handler])
        assert ran["LashGroup", "settle"] == {old_id, new_id}
        assert ran["LashTurn", "run"] == {old_id, new_id}


def in_place(stack: LocalStack, old: Endpoint, *, kill: bool = False) -> Upgrade:
    """Stop the baseline endpoint (SIGTERM, or SIGKILL with ``kill``), serve the current code on its
    URL, register it again with force."""

    async def replace() -> tuple[str, str]:
        [deployment] = await asyncio.to_thread(sql, stack.admin_url, "SELECT id FROM sys_deployment")
        if kill:
            old.kill()
        else:
            old.stop()
        new = current_endpoint(stack)
        new.port = old.port
        new.start(repick_port=False)
        [replaced] = stack.register(new, force=True)
        assert replaced["id"] == deployment["id"]  # the same deployment, now served by the current code
        return deployment["id"], replaced["id"]

    return replace


async def test_groups_whose_children_all_settled_survive_an_in_place_replacement(
    baseline: Baseline, tmp_path: Path
) -> None:
    """What an in-place replacement must keep: every group with no child still running."""
    stack, old = baseline_stack(tmp_path, baseline)
    with stack:
        stack.start()
        groups = settled_cases()
        await asyncio.gather(*(open_on_baseline(stack, c) for c in groups))
        await asyncio.gather(*(read_served(stack, c) for c in groups))
        orders = await settle_pending(stack, groups, None)
        await poll(stack, UNFINISHED, lambda rows: not rows, "every baseline invocation finished")
        await in_place(stack, old)()
        await asyncio.gather(*(resume_on_current(stack, c, orders[c.name]) for c in groups))
        await nothing_left(stack, groups)


async def test_groups_with_children_in_flight_survive_an_in_place_replacement_of_identical_handlers(
    baseline: Baseline, tmp_path: Path
) -> None:
    """Children, pumps, calls and callers still running when the endpoint is replaced replay their
    journals on the current code: that holds while lash's handlers journal the same steps as the
    baseline's. A tool mid-call at the replacement runs again on the current code."""
    stack, old = baseline_stack(tmp_path, baseline)
    with stack:
        stack.start()
        groups = in_flight_cases(tmp_path / "gate")
        # Killed, not stopped: a release before decision 75 waits for Restate's connections to close
        # when stopped with invocations in flight, so a SIGTERM only added the harness's 15 s before its
        # SIGKILL, and Restate's retries backed off meanwhile (up to 10 s), past a loaded turn's wait.
        # Nothing the gates hold could finish within a grace anyway: the journals carried are the same.
        replace = in_place(stack, old, kill=True)
        await upgrade_with_groups_in_flight(stack, groups, replace, tmp_path / "gate")
        gates = [f"gate:{c.value(i)}" for c in groups for i, spec in enumerate(c.specs) if spec == "slow"]
        counts = stack.counts()
        assert all(counts.count(g) >= 2 for g in gates), "a gate tool mid-call was not run again"


GUARD_S = 6  # how soon the current code's guard of a waiting caller looks, in the rollback test


# The handlers the baseline serves: before a rollback to it, what is pending for any other handler
# of lash's is killed (docs/guides/upgrade.md, Rolling back, which gives this query).
async def test_a_rollback_as_the_upgrade_guide_says_resumes_a_group_the_baseline_opened(
    baseline: Baseline, tmp_path: Path
) -> None:
    """Upgraded side by side, a caller of the current code waits on a group the baseline opened, which
    schedules the group's guard (a handler the baseline does not serve); then the rollback the upgrade
    guide describes: what is pending for such handlers is killed, and the baseline is served and
    registered again as the newest deployment. The group's event then settles on the baseline, the
    waiting caller reads its rank, and a caller on the baseline resumes the group and closes it.
    Without the kill, the guard, due once the rollback is done, is retried on the baseline (404)
    holding the group's key, and the settle never runs. `lash-restate rollback-check` first lists what
    else a rollback would break, each kind once (a group of the current code, its event child's waiter
    entry, its callee's rejection stored with metadata), until the test clears them, and it kills the
    pending guard."""
    stack, old = baseline_stack(tmp_path, baseline)
    # The guard looks a few seconds after the wait, not five minutes: due within the test.
    env = {**TOOLS_ENV, "LASH_WAITER_CHECK": f"{GUARD_S}s", ERROR_METADATA_ENV: "1"}
    new = stack.add_endpoint("current", env=env)
    with stack:
        stack.start(register=False)
        [registered] = stack.register(old, force=False)
        served = {s["name"]: {h["name"] for h in s["handlers"]} for s in registered["services"]}
        lash_roles = {f"Lash{role}": set(handlers) for role, handlers in BASELINE_HANDLERS.items()}
        assert lash_roles == {name: served[name] for name in lash_roles}, "the baseline serves others"
        case = Case("all-rolled-back", "all", ["ok", "event"], 1)
        await open_on_baseline(stack, case)
        await read_served(stack, case)
        stack.register(new, force=False)
        waiting = asyncio.create_task(stack.turn(*_read_steps(case), within=PARKED_S))
        # A group of the current code: an event child waiting, a callee's rejection with metadata.
        mine = Scope()
        refuses = call("DemoCalls", "fail", {"message": "no", "status": 409, "metadata": {"k": "v"}})
        group = mine.group([event(mine.event("e")), refuses], wake="first", disposition="cancel")
        [opened, _] = await turn(stack, open_(group), next_())
        kinds = {"group", "waiter", "pending", "metadata"}
        found = await until_blocked(stack, lambda blockers: {b.kind for b in blockers} == kinds)
        [mine_open, waiter, stored] = [b for b in found if b.kind != "pending"]
        assert (mine_open.where, waiter.where) == (group["key"], mine.event("e"))
        # Its pump, `{incarnation}:{group key}`, stored the rejection with metadata.
        assert stored.where.startswith("LashPump/") and stored.where.endswith(f":{group['key']}"), stored
        guard = f"LashGroup/{case.key}/guard ("  # and what else runs for the open group: its pump, say
        assert any(b.what.startswith(guard) for b in found if b.kind == "pending"), found
        checked = run_main(["rollback-check", "--admin-url", stack.admin_url])
        assert checked.returncode == 5 and "is not safe yet" in checked.stdout, checked
        # Nothing killed while a group of the current code is open: its pump is pending too, working.
        refused = run_main(["rollback-check", "--kill-pending", "--admin-url", stack.admin_url, "--json"])
        assert refused.returncode == 4 and json.loads(refused.stdout)["killed"] == [], refused
        await turn(stack, use(ok(opened)), close("cancel"))  # its event child unsubscribes, its pump forgets
        await until_blocked(stack, lambda blockers: {b.kind for b in blockers} == {"pending"})

        # A guard that runs meanwhile, on the current code, schedules its next: the check kills until none.
        rolled = run_main(["rollback-check", "--kill-pending", "--admin-url", stack.admin_url])
        assert rolled.returncode == 0, rolled
        assert rolled.stdout.startswith("killed ") and "nothing stands in the way" in rolled.stdout, rolled
        due = time.monotonic() + GUARD_S  # later than any guard scheduled before the kill
        again = stack.add_endpoint("baseline-again", python=baseline.python, env=TOOLS_ENV)
        again.start()
        [rolled_back] = stack.register(again, force=False)  # the newest: new invocations run the baseline
        # Past the killed guard's time, so that a guard left pending would have run on the baseline.
        await asyncio.sleep(max(0.0, due - time.monotonic()) + 1)

        orders = await settle_pending(stack, [case], None)
        reread = [ok(r) for r in (await Progress(stack).unless_stuck(waiting, "the waiting caller"))[1:]]
        check_ranks(case, reread, orders[case.name], "a caller of the current code across the rollback")
        await resume_on_current(stack, case, orders[case.name])  # now the baseline's code
        await clear_events(stack, [case])
        await nothing_left(stack, [case])
        ran = ran_on(stack, case.key)  # the event's settle and the close ran on the baseline served again
        assert rolled_back["id"] in ran["LashGroup", "settle"] and ran["LashGroup", "close"] == {
            rolled_back["id"]
        }


async def until_blocked(
    stack: LocalStack, done: Callable[[list[RollbackBlocker]], bool]
) -> list[RollbackBlocker]:
    """What `rollback_blockers` finds, once ``done`` says so; an AssertionError once nothing progresses."""
    progress = Progress(stack)
    while not done(found := await asyncio.to_thread(rollback_blockers, stack.admin_url)):
        if await progress.stuck():
            raise AssertionError(f"rollback blockers: nothing progressed for {QUIET_S}s; last found: {found}")
        await asyncio.sleep(0.2)
    return found


async def test_a_users_handlers_waiting_in_lashs_combinators_survive_an_in_place_replacement(
    baseline: Baseline, tmp_path: Path
) -> None:
    """An application's own handlers (`tests/engine/upgrade_app.py`), each suspended in `lash.all` or
    `lash.race` on a group the baseline opened, replay their journals on the current code when the
    endpoint is replaced in place: their groups' events, emitted after, reach them, and each answers
    what it would have on the baseline."""
    stack = LocalStack(tmp_path)
    stack.add_server()
    old = stack.add_endpoint("baseline", python=baseline.python, app=APP, cwd=REPO, env=APP_ENV)
    with stack:
        stack.start()
        callers = {}
        async with httpx.AsyncClient(timeout=30) as client:
            for handler in ("gather", "first"):
                sent = await client.post(f"{stack.ingress_url}/UpgradeShop/{handler}/send", json=handler)
                callers[handler] = sent.json()["invocationId"]
        await poll(
            stack,
            "SELECT count(*) AS n FROM sys_invocation WHERE target_handler_name = 'subscribe' "
            "AND status = 'completed'",
            lambda rows: rows[0]["n"] == 2,
            "each handler's event child subscribed, its caller waiting on its group",
        )
        [deployment] = await asyncio.to_thread(sql, stack.admin_url, "SELECT id FROM sys_deployment")
        old.kill()
        new = stack.add_endpoint("current", app=APP, cwd=REPO, env=APP_ENV)
        new.port = old.port
        new.start(repick_port=False)
        [replaced] = stack.register(new, force=True)
        assert replaced["id"] == deployment["id"]  # the same deployment, now the current code
        for handler in callers:
            await stack.emit(f"{handler}-go", f"{handler}-payload")
        async with httpx.AsyncClient(timeout=30) as client:
            answers = {
                handler: await Progress(stack).unless_stuck(
                    client.get(
                        f"{stack.ingress_url}/restate/invocation/{invocation}/attach", timeout=PARKED_S
                    ),
                    f"UpgradeShop/{handler}",
                )
                for handler, invocation in callers.items()
            }
        assert {h: (a.status_code, a.json()) for h, a in answers.items()} == {
            "gather": (200, ["gather", "gather-payload"]),
            "first": (200, "first-payload"),
        }, await failing(stack)
