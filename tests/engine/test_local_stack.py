"""The local-stack harness itself: port races, restarts on the registered port, registration, teardown."""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import assert_type

import httpx
import pytest

from lash_restate._http import tls
from lash_restate.testing import CallFailed, LocalStack, StackError, free_port, processes
from lash_restate.testing.processes import listeners
from lash_restate.testing.stack import NO_FSYNC
from lash_restate.testing.targets import Label, Parcel, Quote, QuoteRequest, describe, quote, weigh
from tests.conformance.builders import Scope, call, combine, echo, err, event, next_, open_
from tests.engine.test_operator import until

pytestmark = pytest.mark.restate


def test_a_server_whose_port_was_taken_starts_on_fresh_ports(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stack = LocalStack(tmp_path)
        server = stack.add_server(ingress_port=port)
        with stack.start():
            assert server.ingress_port != port
            assert server.ready()
    assert server.process is not None and server.process.poll() is not None


def test_an_endpoint_whose_port_was_taken_serves_on_a_fresh_one(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()  # listening, so only an HTTP answer tells the endpoint from the squatter
        port = taken.getsockname()[1]
        stack = LocalStack(tmp_path)
        endpoint = stack.add_endpoint()
        endpoint.port = port
        with stack:
            stack.start_endpoints()
            assert endpoint.port != port
            assert endpoint.ready()


def test_an_endpoint_whose_port_another_endpoint_answers_on_is_not_taken_for_it(tmp_path: Path) -> None:
    """Another endpoint (a restarting one of another test, say) already serves the port this one
    was given: its health answer is not taken for this endpoint's. A first start moves to a fresh
    port; a restart, which must keep its port, says who holds it."""
    stack = LocalStack(tmp_path)
    first, second = stack.add_endpoint(), stack.add_endpoint()
    with stack:
        first.start()
        second.port = first.port
        second.start()
        assert second.port != first.port
        assert listeners(second.port) == {second.pid} and listeners(first.port) == {first.pid}
        second.kill()
        second.port = first.port
        with pytest.raises(StackError, match=rf"port {first.port} \(pid {first.pid}\) is served by another"):
            second.start(repick_port=False)
        assert second.process is not None and second.process.poll() is not None  # the one started was ended


def test_free_port_gives_each_worker_its_own_ports_outside_those_of_outgoing_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A port of an endpoint killed and restarted is not given meanwhile to another stack: not by
    this process, not by another pytest-xdist worker, not to an outgoing connection."""
    outgoing = processes._outgoing_ports()
    picked = [free_port() for _ in range(50)]
    assert len(set(picked)) == 50
    assert not any(port in outgoing for port in processes._pool())
    assert set(picked) <= set(processes._pool())
    shares = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        processes._pool.cache_clear()
        shares.append({free_port() for _ in range(20)})
    processes._pool.cache_clear()  # the worker's own again, from its own environment
    monkeypatch.undo()
    assert {port % 2 for port in shares[0]} == {0} and {port % 2 for port in shares[1]} == {1}


async def test_a_restarted_endpoint_comes_back_on_its_registered_port_with_changed_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`restart_endpoint(NAME=None)` unsets a variable, the test run's own value too, and
    `NAME="value"` sets it; each holds over later restarts until changed. A request while the
    endpoint is down says so when it times out."""
    monkeypatch.setenv("LASH_DEMO_TOOLS_OFF", "echo")  # the run's own: served without `echo`

    async def echo_code(stack: LocalStack) -> str | None:
        [opened] = await stack.turn(open_(Scope().group([echo(1)])))
        return err(opened)["code"] if "error" in opened else None

    with LocalStack.single(tmp_path).start() as stack:
        assert await echo_code(stack) == "child_unroutable"
        before, port = stack.endpoint.process, stack.endpoint.port
        stack.restart_endpoint(LASH_DEMO_TOOLS_OFF=None)
        assert before is not None and before.poll() is not None  # the old process was killed
        assert stack.endpoint.port == port
        # The server reaches the new process through the registered URL, and it runs `echo`.
        assert await echo_code(stack) is None
        stack.restart_endpoint()
        assert await echo_code(stack) is None  # still unset
        stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="echo")
        assert await echo_code(stack) == "child_unroutable"
        # A request while the endpoint is down waits for it, and its timeout says so.
        stack.endpoint.kill()
        with pytest.raises(StackError, match=r"the endpoint at http://127\.0\.0\.1:\d+ is not running"):
            await stack.turn(open_(Scope().group([echo(1)])), within=3)


def test_one_endpoint_registers_with_several_admin_apis_and_stop_ends_every_process(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    first, second = stack.add_server("first"), stack.add_server("second")
    endpoint = stack.add_endpoint()
    with stack.start(register=False):
        answers = stack.register(at=[first, second.admin_url])
        assert len(answers) == 2
        for server in (first, second):
            listed = httpx.get(f"{server.admin_url}/deployments", timeout=10, verify=tls()).json()[
                "deployments"
            ]
            assert [d["uri"].rstrip("/") for d in listed] == [endpoint.url]
        processes = [owned.process for owned in (first, second, endpoint)]
    assert all(p is not None and p.poll() is not None for p in processes)
    assert not first.base_dir.exists() and not second.base_dir.exists()  # the servers' data went
    assert (tmp_path / "endpoint.log").exists() and (tmp_path / "first.log").exists()  # the logs stay


def test_a_kept_stack_leaves_the_servers_data_after_stopping(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path, keep=True)
    server = stack.add_server()
    with stack.start():
        pass
    assert server.process is not None and server.process.poll() is not None
    assert any(server.base_dir.iterdir())


@pytest.mark.parametrize(
    ("value", "kept"),
    [(None, False), ("1", True), ("yes", True), ("0", False), ("false", False), ("", False)],
)
def test_lash_keep_stack_logs_keeps_the_data_unless_it_says_no(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None, kept: bool
) -> None:
    if value is None:
        monkeypatch.delenv("LASH_KEEP_STACK_LOGS", raising=False)
    else:
        monkeypatch.setenv("LASH_KEEP_STACK_LOGS", value)
    assert LocalStack(tmp_path).keep is kept
    assert LocalStack(tmp_path, keep=not kept).keep is not kept  # the argument wins


def _servers_on(base_dir: Path) -> list[int]:
    """The pids of restate-server binaries (not their npm launcher, a node script) on ``base_dir``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # ended meanwhile, or not a process
        if str(base_dir).encode() in argv and b"node" not in Path(argv[0].decode()).name.encode():
            found.append(int(proc.name))
    return found


def test_a_server_run_by_npms_launcher_is_restarted_and_stopped_with_what_the_launcher_runs(
    tmp_path: Path,
) -> None:
    """npm's `restate-server` (what `npm i -g` puts on PATH) is a node script that runs the binary as
    its child and forwards SIGINT and SIGTERM only: a SIGKILL of the script's pid alone left the
    server running, so a restart found the old one answering, and the stack's end left it behind."""
    launcher = Path(__file__).parents[2] / "node_modules/.bin/restate-server"
    stack = LocalStack(tmp_path)
    server = stack.add_server(binary=launcher)
    with stack.start():
        [before] = _servers_on(server.base_dir)
        stack.restart_server()
        [after] = _servers_on(server.base_dir)
        assert after != before
    assert _servers_on(server.base_dir) == []


def test_a_process_already_running_is_not_started_twice(tmp_path: Path) -> None:
    """A second `start` of a running endpoint is refused: it would have started another process,
    taken the first's answers on the port for its own, and left the first out of `stop`'s reach."""
    endpoint = LocalStack(tmp_path).add_endpoint()
    # A process group of its own, as the stack's processes are, which `kill` ends whole.
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    endpoint.process = subprocess.Popen(sleeper, start_new_session=True)
    try:
        with pytest.raises(StackError, match=r"endpoint is already running \(pid \d+\)"):
            endpoint.start()
    finally:
        endpoint.kill()
    assert endpoint.process.poll() is not None


def test_a_process_that_exits_as_it_starts_says_what_it_logged(tmp_path: Path) -> None:
    """A start whose process exits says what the process logged, which a stack in a temporary
    directory deletes as it stops."""
    stack = LocalStack(tmp_path)
    stack.add_endpoint(module="no_such_module_here", args=())
    with pytest.raises(
        StackError, match=r"(?s)exited with code 1; its log, .*No module named no_such_module_here"
    ):
        stack.start_endpoints()


def test_a_stacks_endpoint_asks_no_admin_api_named_in_the_shell_it_was_started_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The developer's shell may name another cluster's admin API (as Restate's CLI reads it): a
    stack's endpoint would ask it who serves a declared call target, and who holds its prefix. It
    inherits everything else; an address given to the endpoint itself is kept."""
    monkeypatch.setenv("RESTATE_ADMIN_URL", "http://elsewhere:9070")
    monkeypatch.setenv("LASH_ADMIN_URL", "http://elsewhere:9070")
    monkeypatch.setenv("RESTATE_AUTH_TOKEN", "theirs")
    monkeypatch.setenv("LASH_PREFIX", "Shop")
    stack = LocalStack(tmp_path)
    env = stack.add_endpoint()._env()
    assert not {"RESTATE_ADMIN_URL", "LASH_ADMIN_URL", "RESTATE_AUTH_TOKEN"} & env.keys()
    assert env["LASH_PREFIX"] == "Shop"
    given = stack.add_endpoint("second", env={"LASH_ADMIN_URL": "http://127.0.0.1:1"})._env()
    assert given["LASH_ADMIN_URL"] == "http://127.0.0.1:1"


async def test_a_call_the_ingress_does_not_answer_is_a_stack_error(tmp_path: Path) -> None:
    """A call to a server that is not running, or a stack without one, raises `StackError` as the
    documentation says, not the HTTP client's own error or an `IndexError`."""
    stack = LocalStack(tmp_path)
    with pytest.raises(StackError, match="no server"):
        await stack.call("Svc/handler")
    with pytest.raises(StackError, match="no endpoint"):
        stack.restart_endpoint()
    stack.add_server()
    with pytest.raises(
        StackError, match=r"POST /Svc/handler: the ingress at http://127\.0\.0\.1:\d+ did not answer"
    ):
        await stack.call("/Svc/handler")


def test_a_restarted_server_keeps_its_ports_or_says_it_cannot(tmp_path: Path) -> None:
    """A restart keeps the ports the server's clients (and a cluster's other nodes) know it by: one
    taken meanwhile fails the restart, where it moved the server to other ports unseen."""
    stack = LocalStack(tmp_path)
    server = stack.add_server()
    with stack.start(register=False):
        port = server.ingress_port
        server.kill()
        with socket.socket() as taken:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            taken.bind(("127.0.0.1", port))
            taken.listen()
            with pytest.raises(StackError, match="restate-server"):
                stack.restart_server()
        assert server.ingress_port == port
        assert server.process is not None and server.process.poll() is not None  # nothing left running
        stack.restart_server()  # free again: back on it, ready (`start` waited for that)
        assert server.ingress_port == port


async def test_waiters_counts_the_children_waiting_on_an_event_until_it_is_emitted(
    restate_stack: LocalStack,
) -> None:
    """`waiters(name)` is what a test polls before emitting to a handler parked on the event: none
    before the handler waits, one while it does, none once the emit settled it."""
    s = Scope()
    name = s.event("approval")
    assert restate_stack.waiters(name) == 0
    group = s.group([event(name)])
    waiting = asyncio.create_task(restate_stack.turn(open_(group), next_()))

    async def one_waits() -> bool:
        return restate_stack.waiters(name) == 1

    await until(one_waits)
    await restate_stack.emit(name, "yes")
    [_, settled] = await waiting
    assert settled["ok"]["outcome"]["value"] == "yes", settled
    assert restate_stack.waiters(name) == 0


def test_waiters_under_a_prefix_the_application_did_not_choose_says_so(
    restate_stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked under another prefix than the application's, `waiters` raises saying so, rather than
    count none for ever."""
    monkeypatch.setattr("lash_restate.testing.stack.named", lambda role: f"Elsewhere{role}")
    with pytest.raises(StackError, match="no ElsewhereSignal is registered"):
        restate_stack.waiters("anything")


async def test_calls_of_gives_the_calls_a_callers_groups_made_once_each_has_ended(
    restate_stack: LocalStack,
) -> None:
    """`calls_of(scope)`: a race's winner and its cancelled loser, each as the handler it called, once
    both ended; a scope that made no call, fewer than ``count``, or whose call still runs, is a
    `StackError` saying so."""
    s = Scope()
    winner = call("DemoCalls", "echo", {"value": "fast"})
    loser = call("DemoCalls", "echo", {"value": "slow", "delay_ms": 600_000})
    race = s.group([winner, loser], wake="first", disposition="cancel")
    [raced] = await restate_stack.turn(combine("race", race))
    assert raced["ok"]["value"] == "fast", raced
    calls = await asyncio.to_thread(restate_stack.calls_of, s.id)
    ended = sorted((c["target"], c.get("completion_failure") or "") for c in calls)
    assert ended == [("DemoCalls/echo", ""), ("DemoCalls/echo", "[409] cancelled")], calls
    with pytest.raises(StackError, match="no call was made for a group of"):
        await asyncio.to_thread(restate_stack.calls_of, Scope().id, within=0.5)
    with pytest.raises(StackError, match="only 2 of 3 calls were made for a group of"):
        await asyncio.to_thread(functools.partial(restate_stack.calls_of, s.id, count=3, within=0.5))
    running = Scope()
    left = running.group([loser, winner], wake="first")  # run to completion: the slow call runs on
    await restate_stack.turn(combine("race", left))
    with pytest.raises(StackError, match=r"1 of .*'s calls had not ended within 1 s: DemoCalls/echo \("):
        await asyncio.to_thread(restate_stack.calls_of, running.id, within=1)


async def test_a_call_told_how_many_retries_to_allow_fails_once_restate_retries_that_often(
    restate_stack: LocalStack,
) -> None:
    """`call(..., retries=N)`: a handler that raises a plain exception, which Restate retries for
    ever, fails the call once Restate has retried it N times, naming the handler, its invocation and
    its failure, instead of after ``within``; the invocation is then the test's to end."""
    with pytest.raises(
        StackError, match=r"an invocation started since has been retried 2 time\(s\)"
    ) as failed:
        await restate_stack.call("DemoCalls/stall", {"message": "plain boom"}, retries=2)
    assert "Restate is retrying DemoCalls/stall" in str(failed.value), failed.value
    assert "(DemoCalls/stall inv_" in str(failed.value), failed.value
    assert "plain boom" in str(failed.value), failed.value
    [row] = restate_stack.sql(
        "SELECT id FROM sys_invocation WHERE target = 'DemoCalls/stall' AND status != 'completed'"
    )
    restate_stack.kill_invocation(row["id"])  # retried for ever otherwise, on the session's stack
    status = f"SELECT status FROM sys_invocation WHERE id = '{row['id']}'"

    async def ended() -> bool:
        return [r.get("status") for r in restate_stack.sql(status)] == ["completed"]

    await until(ended)  # killed, it ends
    with pytest.raises(StackError, match=r"killing inv_1forged: the admin API answered 4\d\d"):
        restate_stack.kill_invocation("inv_1forged")
    with pytest.raises(StackError, match="at the soonest"):
        await restate_stack.call("DemoCalls/echo", {"value": 1}, retries=0)


async def test_a_handler_is_called_with_its_own_types_as_ctx_service_call_takes_it(
    restate_stack: LocalStack,
) -> None:
    """`call_handler(handler, arg, key=...)`: the argument written by the handler's input serde, the
    answer read by its output serde (a pydantic model, a msgspec Struct); a keyed handler needs its
    key (the empty one too), a service's takes none; a callee's terminal error is `CallFailed` with
    its status."""
    quoted = assert_type(await restate_stack.call_handler(quote, QuoteRequest(sku="a", qty=2)), Quote)
    assert quoted == Quote(sku="a", total=14)
    key = f"ledger-{Scope().id}"
    first = await restate_stack.call_handler(weigh, Parcel(grams=5), key=key)
    assert await restate_stack.call_handler(weigh, Parcel(grams=2), key=key) == Label(
        key=key, grams=2, total=7
    )
    assert first == Label(key=key, grams=5, total=5)
    # The object keyed "" (its ingress path `DemoLedger//weigh`), as `ctx.object_call` reaches it.
    before = await restate_stack.call_handler(weigh, Parcel(grams=3), key="")
    after = await restate_stack.call_handler(weigh, Parcel(grams=2), key="")
    assert (before.key, after.key, after.total) == ("", "", before.total + 2)
    assert await restate_stack.call_handler(describe, None) == "nothing"  # no body, as a native call
    with pytest.raises(StackError, match="DemoLedger/weigh needs a key="):
        await restate_stack.call_handler(weigh, Parcel(grams=1))
    with pytest.raises(StackError, match="DemoTyped/quote is a service's: it takes no key="):
        await restate_stack.call_handler(quote, QuoteRequest(sku="a", qty=1), key="k")
    with pytest.raises(CallFailed) as refused:
        await restate_stack.call_handler(quote, QuoteRequest(sku="a", qty=1, refuse="out of stock"))
    assert (refused.value.status_code, refused.value.error_message) == (409, "out of stock")


def test_a_process_that_opens_and_closes_files_as_it_is_looked_at_is_still_seen() -> None:
    """A file a process closes between the listing of its descriptors and their reading dropped the
    whole process from what the stack saw open (a user's trial: a busy restate-server's own port was
    then taken for another process's, and its restart refused). A process that opens and closes files
    without pause is seen with what it holds, however its descriptors change meanwhile."""
    churn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os\nwhile True:\n    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(50)]\n"
            "    [os.close(f) for f in fds]",
        ],
        start_new_session=True,
    )
    try:
        seen = [churn.pid in processes._fds(churn.pid) for _ in range(200)]
    finally:
        churn.kill()
        churn.wait()
    assert all(seen), f"missed {seen.count(False)} of 200 looks"


def test_a_local_server_writes_its_log_without_fsync_unless_its_configuration_file_says(
    tmp_path: Path,
) -> None:
    """The variables a local server is given name settings the pinned restate-server has (a misspelt
    one is ignored without a word): its configuration, dumped with them, turns off the fsync of both
    loglets' writes. A server given a configuration file is left to it."""
    stack = LocalStack(tmp_path)
    server = stack.add_server()
    assert NO_FSYNC.items() <= server.extra_env.items()
    dumped = subprocess.run(
        [str(processes.restate_server_binary()), "--dump-config"],
        env={**os.environ, **server.extra_env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert dumped.count("rocksdb-disable-wal-fsync = true") == len(NO_FSYNC) == 2
    assert "rocksdb-disable-wal-fsync = false" not in dumped
    configured = tmp_path / "restate.toml"
    configured.write_text("")
    assert not NO_FSYNC.keys() & stack.add_server("other", config_file=configured).extra_env.keys()
