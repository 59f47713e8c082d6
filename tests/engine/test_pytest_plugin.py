"""lash's pytest plugin as a user meets it: a project of their own, run by pytest in a subprocess."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from lash_restate.inspection import InspectionError
from lash_restate.testing.pytest import _WATCHED, pytest_runtest_makereport
from lash_restate.testing.stack import LocalStack

INI = """
[pytest]
addopts = -p lash_restate.testing.pytest -p no:cacheprovider
filterwarnings = error
{extra}
"""

SHOP = """
import os

import restate

import lash_restate as lash

shop = restate.Service("Shop")
tools = lash.ToolRegistry()


@tools.tool("double")
async def double(value: int) -> int:
    return 2 * value


@shop.handler()
async def doubles(ctx: restate.Context, value: int) -> list[int]:
    return await lash.all(ctx, [lash.tool("double", value), lash.tool("double", value + 1)])


@shop.handler()
async def broken(ctx: restate.Context, value: int) -> int:
    raise ValueError("a plain exception, which Restate retries for ever")


@shop.handler()
async def setting(ctx: restate.Context) -> str:
    return os.environ.get("SHOP_SETTING", "unset")


app = lash.app(shop, tools=tools)
"""

# A plain `restate.app` of the same services: lash's are built (by shop's lash.app) but not served.
PLAIN = """
import restate

from shop import shop

app = restate.app([shop])
"""

TESTS = """
import time

import httpx
import pytest


def test_a_handler_runs_its_group_through_the_ingress(lash_ingress: httpx.Client) -> None:
    assert lash_ingress.post("/Shop/doubles", json=3).json() == [6, 8]


def test_killing_the_endpoint(lash_stack) -> None:
    lash_stack.endpoint.kill()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{lash_stack.endpoint.url}/health", timeout=1)


def test_the_next_test_gets_the_endpoint_back(lash_ingress: httpx.Client) -> None:
    assert lash_ingress.post("/Shop/doubles", json=5).json() == [10, 12]


def test_pausing_the_endpoint(lash_stack) -> None:
    lash_stack.endpoint.pause()


def test_the_next_test_gets_a_paused_endpoint_back(lash_ingress: httpx.Client) -> None:
    assert lash_ingress.post("/Shop/doubles", json=1).json() == [2, 4]


def test_a_restarted_endpoint_serves_again(lash_stack, lash_ingress: httpx.Client) -> None:
    killed = lash_stack.endpoint.pid
    lash_stack.restart_endpoint()
    assert lash_stack.endpoint.pid != killed
    assert lash_ingress.post("/Shop/doubles", json=0).json() == [0, 2]


def test_a_request_no_answer_comes_to_names_what_restate_retries(lash_ingress: httpx.Client) -> None:
    with pytest.raises(httpx.ReadTimeout) as timed_out:
        lash_ingress.post("/Shop/broken", json=1, timeout=8)  # time for a failure, logged, on a busy machine
    assert "POST /Shop/broken had no answer within 8 s" in str(timed_out.value)
    assert "Restate is retrying Shop/broken" in str(timed_out.value)
    assert 'raise ValueError("a plain exception' in str(timed_out.value)  # the endpoint's traceback


def test_serving_the_endpoint_with_a_setting(lash_stack, lash_ingress: httpx.Client) -> None:
    lash_stack.restart_endpoint(SHOP_SETTING="3")
    assert lash_ingress.post("/Shop/setting").json() == "3"


def test_the_next_test_meets_the_sessions_environment(lash_ingress: httpx.Client) -> None:
    assert lash_ingress.post("/Shop/setting").json() == "unset"


def test_a_failing_test_is_told_what_went_wrong_on_the_stack(lash_stack, lash_ingress: httpx.Client) -> None:
    assert lash_ingress.post("/Shop/broken/send", json=1).is_success
    retried = "SELECT id FROM sys_invocation WHERE target = 'Shop/broken' AND retry_count > 2"
    while not lash_stack.sql(retried):
        time.sleep(0.1)
    assert False, "the branch a crashed handler made the test take"


@pytest.mark.lash_app("broken:app")
def test_an_application_that_cannot_be_served(lash_ingress: httpx.Client) -> None:
    pass


@pytest.mark.lash_app("plain:app")
def test_an_application_that_serves_no_group(lash_ingress: httpx.Client) -> None:
    pass


@pytest.mark.lash_app("shop:doubles")
def test_a_handler_named_as_the_application(lash_ingress: httpx.Client) -> None:
    pass
"""


def pytest_in(
    project: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LASH_", "PYTEST_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=110,
        env={**clean, **(env or {})},
    )


def project(tmp_path: Path, tests: str, *, ini: str = "", files: dict[str, str] | None = None) -> Path:
    (tmp_path / "pytest.ini").write_text(INI.format(extra=ini))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_it.py").write_text(textwrap.dedent(tests))
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_plugin_serves_the_users_application_kills_and_restarts_it(tmp_path: Path) -> None:
    """The application is found in the project's directory (pytest's rootdir, wherever pytest runs)
    and named by the ini setting or a marker; an application that cannot be served, serves none of
    lash's services or is no application fails its tests with its own error, at once; a test that
    served the endpoint with a setting leaves the next the session's environment; a failing test
    is told what went wrong on the stack meanwhile."""
    files = {"shop.py": SHOP, "broken.py": "import no_such_module\n", "plain.py": PLAIN}
    root = project(tmp_path, TESTS, ini="lash_app = shop:app", files=files)
    run = pytest_in(root / "tests")  # run from below the rootdir: shop.py is found in the rootdir
    outcomes = {
        line.split()[1].rpartition("::")[2]: line.split()[0]
        for line in run.stdout.splitlines()
        if line.startswith(("PASSED ", "FAILED ", "ERROR "))
    }
    assert outcomes == {
        "test_a_handler_runs_its_group_through_the_ingress": "PASSED",
        "test_killing_the_endpoint": "PASSED",
        "test_the_next_test_gets_the_endpoint_back": "PASSED",
        "test_pausing_the_endpoint": "PASSED",
        "test_the_next_test_gets_a_paused_endpoint_back": "PASSED",
        "test_a_restarted_endpoint_serves_again": "PASSED",
        "test_a_request_no_answer_comes_to_names_what_restate_retries": "PASSED",
        "test_serving_the_endpoint_with_a_setting": "PASSED",
        "test_the_next_test_meets_the_sessions_environment": "PASSED",
        "test_a_failing_test_is_told_what_went_wrong_on_the_stack": "FAILED",
        "test_an_application_that_cannot_be_served": "ERROR",
        "test_an_application_that_serves_no_group": "ERROR",
        "test_a_handler_named_as_the_application": "ERROR",
    }, run.stdout + run.stderr
    # A failing test's report says what went wrong on the stack meanwhile: the handler Restate is
    # retrying, and the endpoint's traceback of it (one section, that test's only).
    assert run.stdout.count("what went wrong on the lash stack during this test") == 1, run.stdout
    _, _, told = run.stdout.partition("what went wrong on the lash stack during this test")
    assert "Restate is retrying Shop/broken" in told and 'raise ValueError("a plain exception' in told
    assert "cannot serve 'broken:app'" in run.stdout
    assert "No module named 'no_such_module'" in run.stdout  # from the endpoint's own log
    assert "cannot serve 'plain:app': it serves none of lash's services" in run.stdout
    assert "'shop:doubles' is not an ASGI app (it cannot take scope, receive and send" in run.stdout


def test_unused_it_starts_nothing_and_unnamed_it_says_how_to_name_the_application(tmp_path: Path) -> None:
    tests = """
    def test_without_lash() -> None:
        pass

    def test_without_an_application(lash_ingress) -> None:
        pass
    """
    # A server that cannot exist: a test that asks for none must not look for one.
    run = pytest_in(project(tmp_path, tests), "--lash-restate-server", str(tmp_path / "nowhere"))
    assert "PASSED tests/test_it.py::test_without_lash" in run.stdout, run.stdout
    assert "ERROR tests/test_it.py::test_without_an_application" in run.stdout, run.stdout
    assert '@pytest.mark.lash_app("shop:app")' in run.stdout
    assert "--lash-app shop:app" in run.stdout
    assert "Traceback" not in run.stdout


def test_without_a_restate_server_it_says_how_to_get_one(tmp_path: Path) -> None:
    tests = """
    def test_it(lash_ingress) -> None:
        pass

    def test_it_again(lash_ingress) -> None:
        pass
    """
    missing = tmp_path / "bin" / "restate-server"
    run = pytest_in(
        project(tmp_path, tests, ini="lash_app = shop:app"), env={"LASH_RESTATE_SERVER": str(missing)}
    )
    assert "ERROR tests/test_it.py::test_it " in run.stdout, run.stdout
    assert f"LASH_RESTATE_SERVER is {missing}, which is not an executable file" in run.stdout
    # Said in full once; the next test points back to it. (Counted in the errors section: pytest's
    # short summary repeats a message whole where it runs in CI, cut to one line elsewhere.)
    errors = run.stdout.split("short test summary info")[0]
    assert errors.count("npm install --save-dev @restatedev/restate-server@1.7.12") == 1, run.stdout
    assert "ERROR tests/test_it.py::test_it_again - Failed: no restate-server: the first" in run.stdout
    assert "--lash-restate-server=PATH" in run.stdout
    assert "Traceback" not in run.stdout


def test_a_restate_server_in_the_configuration_is_found_relative_to_it_wherever_pytest_runs(
    tmp_path: Path,
) -> None:
    """``lash_restate_server`` in the configuration names a path relative to its file, as
    ``lash_app`` is found in the rootdir: run from a subdirectory, the same setting names the same
    file (here a missing one, so nothing starts)."""
    tests = """
    def test_it(lash_ingress) -> None:
        pass
    """
    root = project(tmp_path, tests, ini="lash_app = shop:app\nlash_restate_server = bin/restate-server")
    run = pytest_in(root / "tests")
    missing = root / "bin" / "restate-server"
    assert f"the restate-server given is {missing}, which is not an executable file" in run.stdout, run.stdout


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (an unreaped one has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_run_stopped_by_sigterm_stops_the_servers_it_started(tmp_path: Path) -> None:
    """SIGTERM (a CI job's timeout, `timeout`, an IDE's stop button) ends the run as Ctrl-C does: the
    restate-server and the endpoint, each in a session of its own that the signal does not reach,
    stop with it rather than outlive it holding their ports and data."""
    tests = """
    import time
    from pathlib import Path

    def test_waits(lash_stack) -> None:
        Path("started.tmp").write_text(f"{lash_stack.server.pid} {lash_stack.endpoint.pid}")
        Path("started.tmp").rename("started")  # whole once it is there
        time.sleep(100)
    """
    root = project(tmp_path, tests, ini="lash_app = shop:app", files={"shop.py": SHOP})
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LASH_", "PYTEST_"))}
    command = [sys.executable, "-m", "pytest"]
    run = subprocess.Popen(command, cwd=root, env=clean, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started, pids = root / "started", []
    try:
        deadline = time.monotonic() + 90
        while not started.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), run.communicate(timeout=30)[0].decode() if run.poll() is not None else ""
        pids = [int(pid) for pid in started.read_text().split()]
        assert len(pids) == 2 and all(_running(pid) for pid in pids), pids
        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=60)[0].decode()
        assert "KeyboardInterrupt" in output, output
        assert [pid for pid in pids if _running(pid)] == [], output
    finally:
        run.kill()
        for pid in pids:  # what a failed check left, so the machine is left clean
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_what_went_wrong_reads_a_row_without_its_null_failure(tmp_path: Path) -> None:
    """The admin API leaves a null column out of its row: an invocation Restate runs again has no
    `last_failure` then, and is said to be running an attempt again (it raised `KeyError`)."""
    stack = LocalStack(tmp_path)
    rows = [{"target": "Shop/broken", "retry_count": 3}]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stack, "sql", lambda query, timeout: rows)
        assert stack.went_wrong(datetime.now(UTC)) == [
            "  Restate is retrying Shop/broken (attempt 3): running an attempt again (its endpoint's "
            "log, below, has the failure)"
        ]


def test_what_went_wrong_says_the_admin_api_did_not_answer(tmp_path: Path) -> None:
    """A busy server's admin API that gives no answer is said, where the report said nothing of what
    Restate retries, as if it retried nothing."""
    stack = LocalStack(tmp_path)

    def silent(query: str, timeout: float) -> list[dict[str, Any]]:
        raise InspectionError("timed out")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stack, "sql", silent)
        assert stack.went_wrong(datetime.now(UTC)) == [
            "  Restate's admin API did not say what it retries: timed out"
        ]


def test_a_failing_tests_report_survives_a_stack_it_cannot_read(tmp_path: Path) -> None:
    """What the plugin adds to a failing test's report never ends the run: a stack it cannot read
    (any error) is said in one line, where an error in the hook was pytest's INTERNALERROR, and
    every test after it went unrun."""
    stack = LocalStack(tmp_path)
    item = SimpleNamespace(stash=pytest.Stash())
    item.stash[_WATCHED] = (stack, datetime.now(UTC))
    report = SimpleNamespace(when="call", failed=True, sections=[])

    def unreadable(started: datetime) -> list[str]:
        raise KeyError("last_failure")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stack, "went_wrong", unreadable)
        hook = pytest_runtest_makereport(cast(pytest.Item, item))
        next(hook)
        with pytest.raises(StopIteration) as ended:
            hook.send(cast(pytest.TestReport, report))
    assert ended.value.value is report
    assert report.sections == [
        ("what went wrong on the lash stack during this test", "  could not look: KeyError('last_failure')")
    ]
