from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _pytest.nodeid import NodeId

from lash_restate.engine.caller._open_parts import PARTS_FROM_ENV
from lash_restate.engine.serving._endpoint import PAGE_FROM_ENV
from lash_restate.engine.wire._formats import ERROR_METADATA_ENV
from lash_restate.inspection import quote
from lash_restate.testing import LocalStack
from lash_restate.testing.conformance import MemoryTier, RestateTier, Tier
from lash_restate.testing.processes import FORK_ENV

from .mutation import hits

# Each endpoint a test starts is forked from a process that imported lash once (a start costs a
# quarter of the CPU a fresh interpreter's does), where its interpreter and environment allow.
os.environ.setdefault(FORK_ENV, "1")

# Every conformance test runs on each tier; "restate-replay" forces every suspension to replay
# (inactivity timeout 0, as the SDK's own harness does), the cheapest way to find non-determinism;
# "restate-batched" settles every group, however small, through the batch pump (decision 20), its
# ranks in pages as a group wider than a slice keeps them (decision 65): with "restate" (direct tool
# groups, pumped call groups) every scenario runs on every rank layout;
# "restate-v7" turns on the server's newest service protocol (server-side combinator evaluation).
TIERS = ["memory", "restate", "restate-replay", "restate-batched", "restate-v7"]
# Each Restate tier's session stack, by tier.
TIER_STACKS = {
    "restate": "restate_stack",
    "restate-replay": "restate_replay_stack",
    "restate-batched": "restate_batched_stack",
    "restate-v7": "restate_v7_stack",
}


# What starts a real restate-server. A test that reaches one of these, through a fixture or a call
# (its own, or a helper's of the same module), gets the `restate` mark: `pytest -m "not restate"`
# then runs everything a machine without a server can.
STARTS_A_SERVER = frozenset(
    {"LocalStack", "private_stack", "pause_stack", "proxied_cluster", "RestateServer", "start_server"}
)


def _names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the functions nested in it refer to."""
    found = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= _names(const)
    return found


def _starts_a_server(fn: Any, seen: set[Any]) -> bool:
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None or fn in seen:
        return False
    seen.add(fn)
    names = _names(code)
    if names & STARTS_A_SERVER:
        return True
    module = inspect.getmodule(fn)
    helpers = (getattr(module, name, None) for name in names)
    return any(
        inspect.isfunction(h) and inspect.getmodule(h) is module and _starts_a_server(h, seen)
        for h in helpers
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(item, "callspec", None)
        on_restate = params is not None and str(params.params.get("tier", "")).startswith("restate")
        if not on_restate and isinstance(item, pytest.Function):
            seen: set[Any] = set()
            fixtures = [d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs]
            on_restate = any(_starts_a_server(fn, seen) for fn in (item.function, *fixtures))
        if on_restate:
            item.add_marker(pytest.mark.restate)
        stack = _session_stack(item) or _module_stack(item)
        if stack is not None and item.get_closest_marker("xdist_group") is None:
            # One worker runs every test of a session or module stack, so the stack starts once per
            # run, not once per worker that draws one of its tests (docs/test-suite.md).
            item.add_marker(pytest.mark.xdist_group(stack))


def _session_stack(item: pytest.Item) -> str | None:
    """The session stack ``item`` runs on, if it runs on one of the tiers'."""
    params = getattr(item, "callspec", None)
    tier = str(params.params.get("tier", "")) if params is not None else ""
    if tier in TIER_STACKS:
        return TIER_STACKS[tier]
    used = [name for name in getattr(item, "fixturenames", ()) if name in TIER_STACKS.values()]
    return used[0] if len(used) == 1 else None


def _module_stack(item: pytest.Item) -> str | None:
    """The module-scoped fixture of ``item``'s own module that starts a server, if it uses one."""
    if not isinstance(item, pytest.Function):
        return None
    for name in item.fixturenames:
        for fixturedef in item._fixtureinfo.name2fixturedefs.get(name, ()):
            fn = fixturedef.func
            own = inspect.getmodule(fn) is inspect.getmodule(item.function)
            if fixturedef.scope == "module" and own and _starts_a_server(fn, set()):
                return f"{item.module.__name__.rpartition('.')[2]}.{name}"
    return None


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")  # after pytest-xdist's (below)
def pytest_collection_modifyitems_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    _slow_modules_first(items)
    _keep_xdist_groups(config, items)


def _slow_modules_first(items: list[pytest.Item]) -> None:
    """Hand the workers the slowest tests first, so the run ends on sub-second ones.

    `--dist loadgroup` hands out each `xdist_group` first, then the other tests in collection
    order; a 60 s test collected last kept one worker busy a minute after the others had
    finished (docs/test-suite.md). So the modules holding a `slow` test come first, then those
    that start a server of their own, then the rest; a module moves whole, so its module-scoped
    fixtures start once per worker, as in collection order.
    """
    rank: dict[Any, int] = {}
    for item in items:
        module = item.getparent(pytest.Module)
        mark = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("restate") else 2
        rank[module] = min(rank.get(module, 2), mark)
    items.sort(key=lambda item: rank[item.getparent(pytest.Module)])  # stable: collection order within


def _keep_xdist_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--dist loadgroup` sends the tests of one `xdist_group` to one worker by a suffix on their node
    ids, which pytest-xdist 3.8 still writes to `_nodeid`; pytest 9.2 reads a structured `_id`, so
    every group was silently spread over the workers (pytest-dev/pytest-xdist#1386). Until xdist
    writes it, the worker's collection writes it here. Drop this once that issue is fixed."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        marks = item.iter_markers("xdist_group")
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
        if names and "@" not in item.nodeid.rpartition("]")[2]:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def pytest_configure(config: pytest.Config) -> None:
    hits.setup_environment()  # a mutation run only (docs/mutation.md)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    hits.mark_test_start()


@pytest.hookimpl(tryfirst=True)  # before mutmut's own teardown hook reads what the test reached
def pytest_runtest_teardown(item: pytest.Item) -> None:
    hits.credit_hits()


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_teardown")
def pytest_runtest_teardown_stop_stacks(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Stop a tier's session stack once the next test does not use it, not at the worker's end.

    Its tests are one `xdist_group`, run back to back on one worker, so nothing later on that worker
    uses it: kept, its idle server cost about 3% of a core for the minutes the worker went on
    (docs/test-suite.md). Were a later test to ask for it, pytest would start it again."""
    yield
    if not getattr(item.config.option, "loadgroup", False) or not hasattr(item.config, "workerinput"):
        return  # elsewhere (`-n 0`, a mutation run) a tier's tests interleave: kept to the session's end
    stack = _session_stack(item)
    if stack is None or nextitem is None or _session_stack(nextitem) == stack:
        return  # the worker's own end stops it, as it stops every session fixture
    for fixturedef in item.session._fixturemanager.getfixturedefs(stack, item) or ():
        fixturedef.finish(item._request)  # type: ignore[attr-defined]  # reads only its `node`


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests on a fresh event loop (no plugin needed for that)."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**kwargs))
        return True
    return None


def _stack(
    tmp: Path, replay: bool, batch_from: int | None = None, *, v7: bool = False, paged: bool = False
) -> Iterator[LocalStack]:
    env = {
        "RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT": "0s" if replay else "1m",
        # One-way for a cluster, so only this tier's own fresh server gets it.
        **({"RESTATE_EXPERIMENTAL_ENABLE_PROTOCOL_V7": "true"} if v7 else {}),
    }
    endpoint_env = {} if batch_from is None else {"LASH_BATCH_FROM": str(batch_from)}
    endpoint_env["LASH_VERBOSE"] = "1"  # every group event logged, for `check_group_events`
    endpoint_env[ERROR_METADATA_ENV] = "1"  # a rejection's metadata written, as the reference host keeps it
    if paged:  # every group paged, and opened in parts (decision 65): the widest layout, at any width
        endpoint_env[PAGE_FROM_ENV] = "1"
        endpoint_env[PARTS_FROM_ENV] = "1"
    with LocalStack.single(tmp, server_env=env, endpoint_env=endpoint_env).start() as stack:
        yield stack
        failed = failed_sends(stack)
    check_group_events(tmp / "endpoint.log")
    assert not failed, f"a handler lash only sends to failed: {failed[:10]}"


# The handlers lash only sends to: no caller awaits their answer, so one that fails (other than by a
# close's cancel or a test's kill) or that Restate keeps retrying, or paused, for its own failure is
# a defect no answer shows, a watch that could not read what it was sent, say.
SENT_ONLY = {
    "LashGroup": (
        "settle", "missed", "watch", "caller_ended", "hold", "held", "saved",
        "watch_runs", "run_ended", "reclaim", "guard",
    ),
    "LashChild": ("fail", "forget"),
}  # fmt: skip


def failed_sends(stack: LocalStack) -> list[dict[str, Any]]:
    """The invocations of `SENT_ONLY`'s handlers on ``stack`` that failed, or that Restate retries or
    has paused (its retries ran out) for a failure of their own."""
    targets = " OR ".join(
        f"(target_service_name = {quote(service)} AND target_handler_name IN ({', '.join(map(quote, ns))}))"
        for service, ns in SENT_ONLY.items()
    )
    own = f":{stack.endpoint.port}/"
    query = (
        "SELECT target, status, completion_failure, last_failure FROM sys_invocation "
        f"WHERE ({targets}) AND (status IN ('backing-off', 'paused') OR completion_result = 'failure')"
    )
    deadline = time.monotonic() + 30
    while True:
        failed = [row for row in stack.sql(query) if not _expected_failure(row, own)]
        if not any(map(_cut_off, failed)) or time.monotonic() > deadline:
            return failed
        time.sleep(0.5)  # Restate retries them, and nothing here can be awaited


def _cut_off(row: dict[str, Any]) -> bool:
    """Backing off because its endpoint was cut off (a test killed and restarted the stack's own):
    Restate tries it again within `HANDLER_RETRY`'s ten seconds, against the endpoint back."""
    last = str(row.get("last_failure") or "")
    return row["status"] == "backing-off" and ("error when calling" in last or "reading the response" in last)


def _expected_failure(row: dict[str, Any], own_endpoint: str) -> bool:
    failure, last = str(row.get("completion_failure") or ""), str(row.get("last_failure") or "")
    return (
        # Cancelled (a close cancels the watches and guards the group kept), or killed by a test (a
        # kill of a caller reaches what the caller sent, its `saved`): these stacks kill nothing else.
        (failure.startswith("[409]") and ("cancel" in failure.lower() or "kill" in failure.lower()))
        # A batch naming no child, which a test hands the group on purpose (test_claims).
        or (row["target"].endswith("/settle") and "invalid_settlement" in failure)
        # Pinned to another deployment a test registered, and stopped since (never the stack's own).
        or ("error when calling" in last and own_endpoint not in last)
    )


# What each group event an endpoint logs carries besides its group's key and its invocation's id:
# the operate guide's events, which an operator filters and a trace or a metric is built from.
GROUP_EVENTS: dict[str, tuple[str, ...]] = {
    "group.opened": ("children", "wake", "disposition", "mode"),
    "group.reopened": (),
    "group.ranked": ("rank", "position"),
    "group.woken": ("rank",),
    "group.cancelled": ("cancelled", "mode"),
    "group.closed": ("disposition", "settled"),
    "group.operator_closed": (),
    "group.missed": ("children",),
    "group.redispatched": ("children",),
    "group.run_ended": ("children", "code"),
    "group.caller_gone_cancel": (),
    "group.reclaimed": (),
    "group.record_gone": ("waiters",),
}


def check_group_events(log: Path) -> None:
    """Every group event in ``log`` (a session stack's endpoint, verbose) is one the operate guide
    names, with its group's key, its invocation's id and its own fields (a teardown failure if not)."""
    wrong = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # not a log line of lash's (the server's HTTP stack's, say)
        name = record.get("event") if isinstance(record, dict) else None
        if name is None or name.startswith(("endpoint.", "child.")):
            continue
        fields = record
        needed = ("group_key", "invocation_id", *GROUP_EVENTS.get(name, ("a known event name",)))
        if name == "group.ranked" and fields.get("rank") == 1:
            needed = (*needed, "opened_at_ms")  # the first rank carries when its group opened
        if missing := [key for key in needed if fields.get(key) in (None, "")]:
            wrong.append(f"{name}: no {', '.join(missing)} in {line}")
    assert not wrong, "\n".join(wrong[:10])


@pytest.fixture(scope="session")
def restate_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from _stack(tmp_path_factory.mktemp("stack"), replay=False)


@pytest.fixture(scope="session")
def restate_replay_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from _stack(tmp_path_factory.mktemp("stack-replay"), replay=True)


@pytest.fixture(scope="session")
def restate_batched_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from _stack(tmp_path_factory.mktemp("stack-batched"), replay=False, batch_from=1, paged=True)


@pytest.fixture(scope="session")
def restate_v7_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from _stack(tmp_path_factory.mktemp("stack-v7"), replay=False, v7=True)


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest) -> Iterator[Tier]:
    """Every conformance test runs once per tier; the test id carries the tier name."""
    if request.param == "memory":
        # asyncio.run cancels the host's leftover child tasks when each test's loop ends.
        yield MemoryTier(request.getfixturevalue("tmp_path") / "counts.txt")
        return
    yield RestateTier(request.param, request.getfixturevalue(TIER_STACKS[request.param]))
