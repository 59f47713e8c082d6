"""The test kit's fork server (`lash_restate.testing._forkserver`): a forked endpoint is the process
``python -m`` would have started, and one it cannot be is spawned."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lash_restate.testing import processes
from lash_restate.testing._forkserver import Spawn
from lash_restate.testing.processes import _FORK_SERVER, FORK_ENV, Endpoint, _ForkServer


@pytest.fixture
def server() -> Iterator[_ForkServer]:
    """A fork server of the test's own, started with the environment the test sets."""
    server = _ForkServer()
    yield server
    server.close()


def _serving() -> Spawn:
    """A child that runs until it is killed: an HTTP server on a free port."""
    return Spawn(module="http.server", args=["0"], env=dict(os.environ), cwd=None, log=None)


def _facts(output: str) -> dict[str, object]:
    [line] = [line for line in output.splitlines() if line.startswith("{")]
    facts: dict[str, object] = json.loads(line)
    return facts


def test_a_forked_process_is_what_python_m_would_have_started(tmp_path: Path, server: _ForkServer) -> None:
    """Its module run as `__main__`, `sys.argv` and `sys.path[0]` as `-m` sets them, its working
    directory and exactly the environment it was given, a session of its own, stdin from /dev/null,
    no descriptor of the fork server's left open, and the interpreter's own exit: `atexit`, the code."""
    env = {**os.environ, "PROBE_GIVEN": "yes"}
    # A module found only in the child's working directory, which is not this process's.
    shutil.copy(Path(__file__).with_name("fork_probe.py"), tmp_path / "fork_probe.py")
    os.environ["PROBE_NOT_GIVEN"] = "the fork server's"  # its environment, which the child must not see
    try:
        spawned = subprocess.run(
            [sys.executable, "-m", "fork_probe", "a", "b c"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            start_new_session=True,
            check=False,
        )
        log = tmp_path / "forked.log"
        forked = server.spawn(
            Spawn(module="fork_probe", args=["a", "b c"], env=env, cwd=str(tmp_path), log=str(log))
        )
        assert forked.wait(30) == spawned.returncode == 3
    finally:
        del os.environ["PROBE_NOT_GIVEN"]
    assert _facts(log.read_text()) == _facts(spawned.stdout)  # the same fds open: the listing's own
    assert log.read_text().splitlines()[-1] == spawned.stdout.splitlines()[-1] == "atexit ran"


def test_a_forked_process_killed_ends_as_a_spawned_one_does(server: _ForkServer) -> None:
    """Killed, its code is the signal's, negative, as `subprocess` gives it; and a fork server that
    ends (its test process gone) kills what it forked and still runs."""
    forked = server.spawn(_serving())
    # Its own process group, as the stack signals it, from the moment its pid is known.
    os.killpg(forked.pid, signal.SIGKILL)
    assert forked.wait(30) == -signal.SIGKILL
    assert forked.poll() == -signal.SIGKILL  # asked again, the same answer
    left = server.spawn(_serving())
    with pytest.raises(subprocess.TimeoutExpired):
        left.wait(0.2)
    server.close()
    with pytest.raises(ProcessLookupError):  # killed and reaped: no such process
        os.kill(left.pid, 0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_ctrl_c_of_the_test_run_leaves_the_fork_server_to_end_what_it_forked(
    server: _ForkServer, sig: signal.Signals
) -> None:
    """The fork server leads a session of its own, so a Ctrl-C or a SIGTERM to the test run's process
    group does not reach it (the stack then stops what it forked, by pid); and told to end all the
    same, it kills and reaps what it forked before it ends."""
    forked = server.spawn(_serving())
    assert server._process is not None
    fork_server = server._process.pid
    assert os.getsid(fork_server) == fork_server != os.getsid(0)
    os.kill(fork_server, sig)
    assert server._process.wait(30) == 128 + sig
    with pytest.raises(ProcessLookupError):
        os.kill(forked.pid, 0)


def test_an_answer_an_interrupted_asker_never_read_is_not_taken_for_the_next(server: _ForkServer) -> None:
    """A timeout's signal between a request and its answer leaves the answer in the pipe: the next
    request reads it off first, and gets its own."""
    forked = server.spawn(_serving())
    assert server._process is not None and server._process.stdin is not None
    server._process.stdin.write(json.dumps({"spawn": _serving()}).encode() + b"\n")  # its answer: a pid
    server._process.stdin.flush()
    server._owed += 1
    os.killpg(forked.pid, signal.SIGKILL)
    assert forked.wait(30) == -signal.SIGKILL  # not the other request's {"pid": ...}


@pytest.mark.parametrize(
    ("python", "env", "forked"),
    [
        (sys.executable, {}, True),
        (sys.executable, {"LASH_ANYTHING": "1"}, True),  # read when it serves: the child has it
        ("/some/other/python", {}, False),  # another environment's lash, say an earlier release
        (sys.executable, {"PYTHONPATH": "/elsewhere"}, False),  # read as the interpreter starts
        (sys.executable, {"OTEL_PYTHON_CONTEXT": "other"}, False),  # read as opentelemetry is imported
        (sys.executable, {"TZ": "Asia/Tokyo"}, False),  # read as the interpreter starts
    ],
)
def test_only_an_endpoint_its_interpreter_and_imports_would_start_alike_is_forked(
    monkeypatch: pytest.MonkeyPatch, python: str, env: dict[str, str], forked: bool
) -> None:
    monkeypatch.setenv(FORK_ENV, "1")
    assert _FORK_SERVER.agrees(python, {**os.environ, **env}) is forked
    monkeypatch.setenv(FORK_ENV, "0")
    assert not _FORK_SERVER.agrees(python, {**os.environ, **env})


def test_an_endpoint_is_forked_stopped_by_its_pid_and_spawned_when_it_starts_again(tmp_path: Path) -> None:
    """A restart is spawned: forked endpoints share the fork server's hash seed, and one restarted
    after a crash must replay under another for a test to see what that changes."""
    endpoint = Endpoint(
        env={"LASH_RESOLVER": "lash_restate.testing.tools:demo_tools"}, log_path=tmp_path / "e.log"
    )
    endpoint.start()
    try:
        assert endpoint.process is not None
        assert not isinstance(endpoint.process, subprocess.Popen)  # forked: lash's tests set LASH_TEST_FORK
        assert endpoint.ready()
    finally:
        endpoint.stop()
    assert endpoint.process.poll() == 0  # SIGTERM: it stopped cleanly
    endpoint.start(repick_port=False)
    try:
        assert isinstance(endpoint.process, subprocess.Popen)
        assert endpoint.ready()
    finally:
        endpoint.stop()


def test_a_forked_endpoint_runs_in_the_test_processs_directory_of_the_moment(
    tmp_path: Path, server: _ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given no directory, an endpoint runs where the test process is when it starts it (as a spawned
    one would), not where the fork server was started; its log, named relatively, lands there too."""
    first, then = tmp_path / "first", tmp_path / "then"
    for folder in (first, then):
        folder.mkdir()
        shutil.copy(Path(__file__).with_name("fork_probe.py"), folder / "fork_probe.py")
    monkeypatch.setattr(processes, "_FORK_SERVER", server)
    monkeypatch.chdir(first)
    server.spawn(Spawn(module="fork_probe", args=[], env=dict(os.environ), cwd=None, log=None)).wait(30)
    monkeypatch.chdir(then)
    endpoint = Endpoint(module="fork_probe", log_path=Path("probe.log"))
    endpoint._spawn(endpoint._command(), endpoint._env(), endpoint.log_path)
    assert endpoint.process is not None
    assert endpoint.process.wait(30) == 3
    assert _facts((then / "probe.log").read_text())["cwd"] == str(then)
