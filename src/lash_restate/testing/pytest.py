"""lash's pytest plugin: your handlers, served in a subprocess, against a real restate-server. No Docker.

Load it where your tests are configured (it is not loaded by merely installing lash-restate):

    [tool.pytest.ini_options]
    addopts = "-p lash_restate.testing.pytest"
    lash_app = "shop:app"            # module:attribute of what lash.app(...) built

or ``pytest_plugins = ["lash_restate.testing.pytest"]`` in your root ``conftest.py``. Then:

    def test_checkout(lash_ingress):
        assert lash_ingress.post("/Checkout/pay", json={...}).json() == {...}

Fixtures:

- `lash_app`: the application under test, ``module:attribute``: the ``lash_app`` marker's argument
  (``@pytest.mark.lash_app("shop:app")`` on a test, class or module), else ``--lash-app``, else the
  ``lash_app`` ini setting. Override the fixture to compute it.
- `lash_stack`: a `LocalStack` serving it: a restate-server on free loopback ports, the app in a
  subprocess (``lash-restate serve --app``, run in pytest's rootdir, so ``shop`` is found there),
  registered. ``lash_stack.restart_endpoint()`` SIGKILLs the endpoint and serves it again on its port
  (``restart_endpoint(NAME="value")`` with a variable changed, for this test: the next one meets
  the session's environment); ``lash_stack.endpoint.kill()`` only kills it (the next test gets it
  back); ``lash_stack.restart_server()`` does the same to the server, whose data survives. One stack
  per application for the whole session: give each test keys of its own. An application that
  serves none of lash's services, or is no ASGI app, fails its tests at once, saying so.
- `lash_ingress`: an ``httpx.Client`` on the server's ingress (``lash_stack.ingress_url``).

The restate-server is ``--lash-restate-server=PATH`` (ini ``lash_restate_server``, relative to the
configuration file), else the one ``LASH_RESTATE_SERVER`` names, else the pinned npm package's in a
``node_modules`` of pytest's rootdir or above, or of the current directory or above, else one on
``PATH``; when there is none, the test fails saying how to get it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from .._http import tls
from .processes import SERVER_ENV, Endpoint, RestateServer, StackError, log_tail, restate_server_binary
from .stack import LocalStack

__all__ = ["lash_app", "lash_ingress", "lash_stack"]

_MARKER = "lash_app"
_NAME_IT = (
    "name the application under test, module:attribute of what lash.app(...) built: mark the test "
    '(@pytest.mark.lash_app("shop:app"), or pytestmark in its module), pass --lash-app shop:app, set '
    "lash_app = shop:app in your pytest configuration, or override the lash_app fixture"
)
_SERVER_OPTION = "or pass --lash-restate-server=PATH (ini lash_restate_server)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lash", "lash-restate: handlers against a real restate-server")
    group.addoption(
        "--lash-app",
        dest="lash_app",
        metavar="MODULE:ATTRIBUTE",
        help="the application the lash_stack fixture serves (ini: lash_app)",
    )
    group.addoption(
        "--lash-restate-server",
        dest="lash_restate_server",
        metavar="PATH",
        help="the restate-server binary to run (ini: lash_restate_server; env: LASH_RESTATE_SERVER)",
    )
    parser.addini("lash_app", "the application the lash_stack fixture serves, module:attribute")
    parser.addini("lash_restate_server", "the restate-server binary lash's fixtures run")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{_MARKER}(spec): the application (module:attribute) the lash_stack fixture serves"
    )
    # A run ended by SIGTERM (a CI job's timeout, `timeout`, an IDE's stop) ends as Ctrl-C does:
    # pytest tears its fixtures down, so the servers they started (each in a session of its own,
    # which the signal does not reach) stop with it. Only where nothing else handles the signal.
    main = threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupted)
        config.add_cleanup(_restore_sigterm)


def _restore_sigterm() -> None:
    if signal.getsignal(signal.SIGTERM) is _interrupted:  # not one set since, by whoever set it
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _interrupted(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the run at once
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: the test run was asked to stop")


def _alive(process: RestateServer | Endpoint) -> bool:
    return process.process is not None and process.process.poll() is None


# A test after the first that found no restate-server: the whole message once is enough.
_NO_SERVER_AGAIN = "no restate-server: the first test that failed for it says how to get one"


class _Stacks:
    """The session's stacks, one per application, each started when a test first asks for it."""

    def __init__(self, config: pytest.Config, base_dir: Path) -> None:
        self._config = config
        self._base_dir = base_dir
        self._stacks: dict[str, LocalStack] = {}
        self._failed: dict[str, str] = {}
        # Where a lookup found no restate-server: said once, in full; a later test looking in the same
        # places points back to it (one that sets the variable, or runs elsewhere, looks again).
        self._no_server: tuple[str, str, str] | None = None

    def _binary(self) -> Path:
        given: str | Path | None = self._config.getoption("lash_restate_server")
        configured = self._config.getini("lash_restate_server")
        if not given and configured:
            # A path in the configuration is relative to its file, wherever pytest runs from.
            inipath = self._config.inipath
            given = (inipath.parent if inipath else self._config.rootpath) / Path(configured).expanduser()
        places = (str(given or ""), os.environ.get(SERVER_ENV, ""), str(Path.cwd()))
        if places == self._no_server:
            pytest.fail(_NO_SERVER_AGAIN, pytrace=False)
        try:
            return restate_server_binary(given or None, near=self._config.rootpath)
        except StackError as exc:
            missing = f"{exc}\n  {_SERVER_OPTION}"
        self._no_server = places
        pytest.fail(missing, pytrace=False)  # outside the except: the message alone, no chained error

    def get(self, app: str) -> LocalStack:
        if app in self._failed:
            pytest.fail(self._failed[app], pytrace=False)
        stack = self._stacks.get(app)
        if stack is None:
            stack = self._start(app)
        else:  # an earlier test may have killed or paused a process and left it so
            failed = None
            try:
                for process in (stack.server, stack.endpoint):
                    process.resume()
                if not _alive(stack.server):
                    stack.server.start()
                if not _alive(stack.endpoint):
                    stack.endpoint.start(repick_port=False)
            except StackError as exc:
                failed = f"cannot serve {app!r} again after an earlier test: {exc}"
            if failed is not None:
                pytest.fail(failed, pytrace=False)  # outside the except: the message alone
        return stack

    def _start(self, app: str) -> LocalStack:
        binary = self._binary()
        stack = LocalStack(self._base_dir / f"stack-{len(self._stacks) + len(self._failed)}", keep=False)
        stack.add_server(binary=binary)
        endpoint = stack.add_endpoint(app=app, cwd=self._config.rootpath, env=self._pythonpath())
        try:
            stack.start()
        except StackError as exc:
            tail = "\n".join(log_tail(endpoint.log_path) if endpoint.log_path else [])
            shown = not tail or str(endpoint.log_path) in str(exc)  # a failed start shows its own log
            self._failed[app] = f"cannot serve {app!r}: {exc}" + (
                "" if shown else f"\n  its log, {endpoint.log_path}, ends:\n{tail}"
            )
        else:
            try:
                serves = _serves_groups(stack)
            except BaseException as exc:
                stack.stop()  # started, and not yet the session's to stop
                if not isinstance(exc, Exception):
                    raise
                self._failed[app] = f"cannot serve {app!r}: its services could not be read: {exc}"
            else:
                if not serves:
                    # Each group its handlers open would wait on a group object nobody serves.
                    stack.stop()
                    self._failed[app] = (
                        f"cannot serve {app!r}: it serves none of lash's services (no group object "
                        "among what it registered): name what lash.app(...) returned, with your "
                        "services in it"
                    )
        if app in self._failed:
            pytest.fail(self._failed[app], pytrace=False)  # outside the except: no chained error
        self._stacks[app] = stack
        return stack

    def _pythonpath(self) -> dict[str, str]:
        """pytest's ``pythonpath`` setting reaches the endpoint's interpreter too."""
        paths = [str(p) for p in self._config.getini("pythonpath")]
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        return {"PYTHONPATH": os.pathsep.join(paths)} if paths else {}

    def stop(self) -> None:
        for stack in self._stacks.values():
            stack.stop()


def _serves_groups(stack: LocalStack) -> bool:
    """Whether the stack's endpoint registered lash's group object, under whatever prefix."""
    answer = httpx.get(f"{stack.admin_url}/services", timeout=30, verify=tls())
    answer.raise_for_status()
    return any(
        {"open", "close", "operator_close"} <= {h.get("name") for h in service.get("handlers", [])}
        for service in answer.json().get("services", [])
    )


@pytest.fixture(scope="session")
def _lash_stacks(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[_Stacks]:
    stacks = _Stacks(request.config, tmp_path_factory.mktemp("lash"))
    try:
        yield stacks
    finally:
        stacks.stop()


@pytest.fixture
def lash_app(request: pytest.FixtureRequest) -> str:
    """The application under test, ``module:attribute``."""
    marker = request.node.get_closest_marker(_MARKER)
    if marker is not None:
        if len(marker.args) != 1 or not isinstance(marker.args[0], str):
            pytest.fail(
                f'@pytest.mark.lash_app takes one "module:attribute", got {marker.args!r}', pytrace=False
            )
        spec: Any = marker.args[0]
    else:
        spec = request.config.getoption("lash_app") or request.config.getini("lash_app")
    if not spec:
        pytest.fail(_NAME_IT, pytrace=False)
    module, _, attribute = str(spec).partition(":")
    if not module or not attribute:
        pytest.fail(f"lash_app must be module:attribute, got {spec!r}", pytrace=False)
    return str(spec)


# The stack a test asked for, and when: a failing test's report says what went wrong on it since.
_WATCHED = pytest.StashKey[tuple[LocalStack, datetime]]()


@pytest.fixture
def lash_stack(lash_app: str, _lash_stacks: _Stacks, request: pytest.FixtureRequest) -> Iterator[LocalStack]:
    """A restate-server and the application under test, served in a subprocess and registered.

    A test that serves the endpoint with its environment changed (``restart_endpoint(NAME=...)``)
    has it served again as it was once the test ends, so the next test meets the session's. A test
    that fails is reported with what went wrong on the stack meanwhile: what Restate is retrying,
    and the endpoint's last error with its traceback (a handler's plain exception)."""
    stack = _lash_stacks.get(lash_app)
    request.node.stash[_WATCHED] = (stack, datetime.now(UTC))
    endpoint = stack.endpoint
    env, unset = dict(endpoint.env), set(endpoint.unset)
    yield stack
    if (endpoint.env, endpoint.unset) != (env, unset):
        endpoint.env, endpoint.unset = env, unset
        if _alive(endpoint):
            stack.restart_endpoint()  # else the next test's `get` serves it, with this environment


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    watched = item.stash.get(_WATCHED, None)
    if watched is not None and report.when == "call" and report.failed:
        stack, started = watched
        try:
            said = stack.went_wrong(started)
        except Exception as error:  # a report's aid must never end the run (pytest's INTERNALERROR)
            said = [f"  could not look: {error!r}"]
        if said:
            report.sections.append(("what went wrong on the lash stack during this test", "\n".join(said)))
    return report


@pytest.fixture
def lash_ingress(lash_stack: LocalStack) -> Iterator[httpx.Client]:
    """An HTTP client on the restate-server's ingress: ``lash_ingress.post("/Service/handler", json=...)``.

    A request with no answer within its timeout (60 s unless the request gives one) raises
    `httpx.ReadTimeout`, saying what Restate is retrying and the endpoint's last error since."""
    with _Ingress(lash_stack, verify=tls(), base_url=lash_stack.ingress_url, timeout=60) as client:
        yield client


class _Ingress(httpx.Client):
    """`httpx.Client` whose timeouts say why no answer came (`LocalStack.no_answer`)."""

    def __init__(self, stack: LocalStack, **options: Any) -> None:
        super().__init__(**options)
        self._stack = stack

    def send(self, request: httpx.Request, **options: Any) -> httpx.Response:
        __tracebackhide__ = True  # a failing test shows the error, not this method's source
        started = datetime.now(UTC)
        try:
            return super().send(request, **options)
        except httpx.ReadTimeout as error:  # sent, and no answer came (not a connection that failed)
            within = (request.extensions.get("timeout") or {}).get("read") or 0
            why = self._stack.no_answer(f"{request.method} {request.url.raw_path.decode()}", within, started)
            raise httpx.ReadTimeout(why, request=request) from error
