"""Both HTTP servers of `serve` (decision 33): one pid owns the endpoint, SIGTERM stops it
gracefully, SIGKILL leaves nothing serving; and a CI-sized subset of the engine tests on granian.

The subset is tests of other modules imported here: pytest collects them again in this module,
where `stack` and `tier` are a stack whose endpoint runs under granian. They cover the combinators
on both settlement paths, oversized outcomes, a select, the 1000-request connection (decision 18),
and crashes: the endpoint SIGKILLed while a caller is parked, mid-tool, and inside a first turn.
``LASH_SERVER=granian pytest`` runs the whole suite on granian.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lash_restate._http import tls
from lash_restate.engine import SERVERS
from lash_restate.testing import Endpoint, LocalStack
from lash_restate.testing.conformance import SCENARIOS, ChildKind, RestateTier, pytest_tests
from lash_restate.testing.processes import listeners
from tests.engine.test_crash_matrix import run_scenario
from tests.engine.test_engine import (
    test_a_child_whose_tool_left_the_deployment_ends_with_a_terminal_404,  # noqa: F401
    test_killed_endpoint_mid_group_serves_identical_ranks_to_a_fresh_invocation,  # noqa: F401
    test_the_endpoint_keeps_one_http2_connection_past_a_thousand_requests,  # noqa: F401
)
from tests.engine.test_operator import open_group

pytestmark = pytest.mark.restate

# The conformance scenarios of the subset, through the suite's public entry point.
ON_GRANIAN = {
    "all_rejects_at_the_first_consumed_rejection_while_losers_run_on",
    "race_with_cancel_losers_ends_the_loser_without_waiting_it_out",
    "stop_and_resume_in_a_fresh_invocation_gives_the_uninterrupted_result",
    "select_returns_the_event_and_cancels_the_deadline_arm",
    "outcomes_too_large_to_ride_the_wake_are_served_the_same_live_and_after",
    "run_to_completion_losers_take_ranks_after_the_caller_is_gone",
}
globals().update(pytest_tests(s for s in SCENARIOS if s.name in ON_GRANIAN))


def granian_stack(tmp: Path) -> LocalStack:
    return LocalStack.single(tmp, endpoint_server="granian").start()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    """The engine tests' own stack (tests/engine/conftest.py), its endpoint under granian."""
    with granian_stack(tmp_path) as s:
        assert httpx.get(f"{s.endpoint.url}/health", timeout=5, verify=tls()).headers["server"] == "granian"
        yield s


@pytest.fixture(scope="module")
def shared_granian_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with granian_stack(tmp_path_factory.mktemp("granian")) as s:
        yield s


@pytest.fixture
def tier(shared_granian_stack: LocalStack) -> RestateTier:
    """The conformance tests' tier (tests/conftest.py), on one stack whose endpoint runs under granian."""
    return RestateTier("restate-granian", shared_granian_stack)


@pytest.fixture
def children() -> ChildKind:
    """The conformance tests' child kind (tests/conformance/conftest.py): tools only, on granian."""
    return "tools"


def _children(pid: int) -> set[int]:
    """Every live process whose parent is ``pid``."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text.rsplit(")", 1)[1].split()[1]) == pid:  # the field after the state is the ppid
            found.add(int(stat.parent.name))
    return found


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _serving(tmp_path: Path, server: str) -> tuple[LocalStack, Endpoint]:
    stack = LocalStack(tmp_path)
    return stack, stack.add_endpoint(server=server)


def _owns_its_port_alone(endpoint: Endpoint, server: str) -> None:
    answer = httpx.get(f"{endpoint.url}/health", timeout=5, verify=tls())
    assert answer.headers["server"].startswith(server)  # the server asked for is the one answering
    assert listeners(endpoint.port) == {endpoint.pid}  # one pid owns the endpoint's port …
    assert endpoint.pid is not None and _children(endpoint.pid) == set()  # … and it started no worker process


@pytest.mark.parametrize("server", SERVERS)
def test_sigterm_stops_the_endpoint_gracefully_and_frees_its_port(tmp_path: Path, server: str) -> None:
    stack, endpoint = _serving(tmp_path, server)
    with stack:
        stack.start_endpoints()
        _owns_its_port_alone(endpoint, server)
        assert endpoint.process is not None
        endpoint.process.send_signal(signal.SIGTERM)
        assert endpoint.process.wait(30) == 0  # it stopped on its own, cleanly, not killed
        assert listeners(endpoint.port) == set()
        assert _refused(endpoint.port)


@pytest.mark.parametrize("server", SERVERS)
async def test_sigterm_stops_an_endpoint_with_invocations_in_flight_quietly_and_loses_nothing(
    tmp_path: Path, server: str
) -> None:
    """Restate holds its HTTP/2 connections open while invocations run on them: the stop cuts what is
    still in flight after the grace, exits 0 with no error logged, and the next endpoint serves on."""
    verbose = {"LASH_VERBOSE": "1"}  # for the stop's own event
    with LocalStack.single(tmp_path, endpoint_server=server, endpoint_env=verbose).start() as stack:
        s, opener = await open_group(stack)  # its caller waits on the endpoint for rank 2
        process = stack.endpoint.process
        assert process is not None
        await asyncio.to_thread(stack.endpoint.stop)  # SIGTERM; a SIGKILL after 15 s
        assert process.returncode == 0  # it stopped on its own, not killed
        log = (tmp_path / "endpoint.log").read_text()
        assert [line for line in log.splitlines() if '"level": "error"' in line or "Traceback" in line] == []
        [stopped] = [json.loads(line) for line in log.splitlines() if '"endpoint.stopped"' in line]
        assert stopped["in_flight"] >= 1, stopped  # the waiting caller's request, at least
        stack.endpoint.start(repick_port=False)
        await stack.emit(s.event("never"), "late")
        assert (await opener).status_code == 200  # the cut caller ran again and got its rank 2


@pytest.mark.parametrize("server", SERVERS)
def test_sigkill_of_the_endpoint_leaves_nothing_serving(tmp_path: Path, server: str) -> None:
    """What every crash test relies on: the pid the harness kills is all there is of the endpoint."""
    stack, endpoint = _serving(tmp_path, server)
    with stack:
        stack.start_endpoints()
        _owns_its_port_alone(endpoint, server)
        endpoint.kill()
        assert listeners(endpoint.port) == set()
        assert _refused(endpoint.port)


# A sample of the crash matrix (tests/engine/test_crash_matrix.py) with the endpoint's crashes:
# SIGKILLed while the resumed caller is parked on a batched group, inside a first turn mid-tool on
# a race, and inside a first turn of a batched `all` whose open, pump or settles it may find.
CRASHES = [
    {
        "kind": "all_settled",
        "children": ["tool_ok", "tool_slow", "event_ok", "event_reject", "tool_fail"],
        "stop_after": 1,
        "crash": "endpoint_parked",
        "kill_after_ms": 0,
        "emit_order": [3, 2],
    },
    {
        "kind": "race",
        "children": ["tool_slow", "event_ok"],
        "stop_after": 0,
        "crash": "endpoint_inflight",
        "kill_after_ms": 20,
        "emit_order": [1],
    },
    {
        "kind": "all",
        "children": ["tool_ok", "tool_slow", "tool_ok", "event_ok"],
        "stop_after": 2,
        "crash": "endpoint_inflight",
        "kill_after_ms": 40,
        "emit_order": [3],
    },
]


@pytest.mark.crash
@pytest.mark.parametrize("scenario", CRASHES, ids=lambda sc: f"{sc['kind']}-{sc['crash']}")
def test_the_endpoint_crashes_of_the_matrix_on_granian(
    shared_granian_stack: LocalStack, scenario: dict[str, Any]
) -> None:
    asyncio.run(asyncio.wait_for(run_scenario(shared_granian_stack, scenario), 120))
