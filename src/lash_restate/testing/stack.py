"""`LocalStack`: the one harness that builds every local Restate stack.

``lash-restate dev``, every test that needs a server, and the bench build their stacks
with it, out of the processes in `lash_restate.testing.processes`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, overload
from urllib.parse import quote

import httpx

from .._http import tls
from ..admin import AdminApi, AdminError
from ..engine import SIGNAL, named
from ..handlers import HandlerRef, handler_ref
from ..inspection import InspectionError, sql
from ..inspection import quote as sql_quote
from ..logs import stamp
from ..registration import PrefixTaken, RegistrationError, register_deployment
from .driver import TURN
from .processes import CallFailed, Endpoint, RestateServer, StackError, free_port, last_error, log_tail

__all__ = ["SIGNING_KEY_ENV", "AdminAt", "LocalStack"]

_In = TypeVar("_In")
_Out = TypeVar("_Out")

DEMO_RESOLVER = "lash_restate.testing.tools:demo_tools"  # what a local stack's endpoint serves
# The server setting that makes restate-server sign every request to an endpoint with this key.
SIGNING_KEY_ENV = "RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE"
PARTITIONS_ENV = "RESTATE_DEFAULT_NUM_PARTITIONS"
LOCAL_PARTITIONS = "4"  # a local server's partitions when nothing else says
# A local server does not fsync its log's writes (the log-server's, which a single node's default
# replicated loglet writes to, and the local loglet's): a server killed, as tests kill one, loses
# nothing the kernel holds; only the machine's crash would, and a local stack's data goes with it.
# A sixth of a conformance scenario's CPU, most of the server's system time.
NO_FSYNC = {
    "RESTATE_LOG_SERVER__ROCKSDB_DISABLE_WAL_FSYNC": "true",
    "RESTATE_BIFROST__LOCAL__ROCKSDB_DISABLE_WAL_FSYNC": "true",
}
# How long a report of no answer waits for the request's own invocation to fail before it names
# older ones: a handler that raises at once fails within this on a loaded 2-core machine.
FIRST_FAILURE = 10.0

AdminAt = RestateServer | str  # where a registration goes: a server of the stack, or any admin API URL


def _last_error_lines(log: Path, since: str) -> list[str]:
    """The last error ``log`` holds at ``since`` or after, with its traceback, indented (none if none)."""
    if not (error := last_error(log, since)):
        return []
    return [f"  {log}'s last error, {error[0]}:", *(f"    {line}" for line in error[1:])]


class LocalStack:
    """One local stack: restate-server nodes and endpoints, started together and ended by pid.

    Add servers and endpoints, then `start`: every server starts (at once: a cluster's nodes
    need each other to form their metadata quorum), then every endpoint, then each endpoint
    is registered with the first server. `stop` (or leaving the ``with`` block) ends every
    process by its pid and removes the servers' data, unless ``keep`` (default: whether
    ``$LASH_KEEP_STACK_LOGS`` is set to anything but ``0``, ``false`` or ``no``); a stack in a
    temporary directory (no ``base_dir``) goes entirely. Every process logs to
    ``base_dir/{name}.log``; the demo tools' `count` writes to `count_file`.

    The first server and endpoint are `server` and `endpoint`; `turn`, `emit`, `reject` and
    `call` go through the first server's ingress.
    """

    def __init__(self, base_dir: Path | None = None, *, keep: bool | None = None) -> None:
        self._temporary = base_dir is None
        self.base_dir = (base_dir or Path(tempfile.mkdtemp(prefix="lash-restate-"))).resolve()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        kept = os.environ.get("LASH_KEEP_STACK_LOGS", "").strip().lower() not in ("", "0", "false", "no")
        self.keep = kept if keep is None else keep
        self.servers: list[RestateServer] = []
        self.endpoints: list[Endpoint] = []

    @classmethod
    def single(
        cls,
        base_dir: Path | None = None,
        *,
        server_env: dict[str, str] | None = None,
        config_file: Path | None = None,
        module: str = "lash_restate",
        endpoint_args: Sequence[str] | None = None,
        endpoint_env: dict[str, str] | None = None,
        endpoint_server: str | None = None,
        keep: bool | None = None,
        app: str | None = None,
    ) -> LocalStack:
        """The common stack: one server and one endpoint (not started yet).

        Args:
            base_dir: where the stack keeps its data and logs (default: a temporary directory,
                removed at `stop` unless ``keep``).
            server_env: environment variables for the server (`add_server`'s ``env``).
            config_file: a restate-server configuration file.
            module: what the endpoint runs with ``python -m`` (see `Endpoint`).
            endpoint_args: the endpoint's arguments (default: ``--with-turn``, with the demo tools,
                for lash's own ``serve``; none for a module of yours, which takes ``--port`` alone).
            endpoint_env: environment variables for the endpoint.
            endpoint_server: the endpoint's HTTP server, ``hypercorn`` or ``granian`` (default:
                ``$LASH_SERVER``, else hypercorn).
            keep: keep the servers' data at `stop` (default: whether ``$LASH_KEEP_STACK_LOGS`` is
                set to anything but ``0``, ``false`` or ``no``).
            app: an application built with ``lash.app`` to serve, as ``module:attribute``
                (`add_endpoint`'s ``app``), in place of ``module``.
        """
        stack = cls(base_dir, keep=keep)
        stack.add_server(env=server_env, config_file=config_file)
        stack.add_endpoint(
            module=module, args=endpoint_args, env=endpoint_env, server=endpoint_server, app=app
        )
        return stack

    @property
    def count_file(self) -> Path:
        return self.base_dir / "counts.txt"

    def add_server(
        self,
        name: str = "restate",
        *,
        env: dict[str, str] | None = None,
        config_file: Path | None = None,
        node_name: str = "lash-dev",
        signing_key: Path | None = None,
        ingress_port: int | None = None,
        admin_port: int | None = None,
        fabric_port: int | None = None,
        binary: Path | None = None,
    ) -> RestateServer:
        """A server keeping its data in ``base_dir/name`` and its log in ``base_dir/{name}.log``.

        With ``signing_key`` (an ed25519 private key PEM file) it signs every request to an endpoint;
        ``binary`` is the restate-server it runs (default: `restate_server_binary` finds one).

        Args:
            name: the server's name in the stack: its data directory and log file.
            env: environment variables for the server, over this process's and the stack's own
                (when no ``config_file`` is given: ``RESTATE_DEFAULT_NUM_PARTITIONS=4``, and its
                log written without fsync, which a killed server does not need and a crashed machine
                would, `NO_FSYNC`).
            config_file: a restate-server configuration file.
            node_name: the node's name in its cluster.
            signing_key: an ed25519 private key PEM file to sign requests to endpoints with.
            ingress_port: the ingress port (default: a free one).
            admin_port: the admin API port (default: a free one).
            fabric_port: the port the nodes of a cluster talk on (default: a free one).
            binary: the restate-server to run.

        Returns:
            The server, added to `servers` (not started yet).
        """
        base = self.base_dir / name
        base.mkdir(parents=True, exist_ok=True)
        # Four partitions and no fsync unless a configuration file says otherwise: with Restate's
        # default (24) a local server takes more than twice the CPU to start, and half as much
        # again while it idles.
        local = {} if config_file is not None else {PARTITIONS_ENV: LOCAL_PARTITIONS, **NO_FSYNC}
        signing = {SIGNING_KEY_ENV: str(signing_key)} if signing_key else {}
        extra_env = {**local, **signing, **(env or {})}
        server = RestateServer(
            base_dir=base,
            ingress_port=ingress_port or free_port(),
            admin_port=admin_port or free_port(),
            fabric_port=fabric_port or free_port(),
            config_file=config_file,
            node_name=node_name,
            extra_env=extra_env,
            binary=binary,
            log_path=self.base_dir / f"{name}.log",
        )
        self.servers.append(server)
        return server

    def add_endpoint(
        self,
        name: str = "endpoint",
        *,
        module: str = "lash_restate",
        args: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        identity_keys: Sequence[str] = (),
        server: str | None = None,
        python: str | None = None,
        app: str | None = None,
        cwd: Path | None = None,
    ) -> Endpoint:
        """An endpoint logging to ``base_dir/{name}.log``; with ``identity_keys`` it serves only
        requests signed by one of them; ``server`` is its HTTP server (default: ``$LASH_SERVER``,
        else hypercorn); ``python`` the interpreter that runs it (default: this one).

        With ``app`` (``module:attribute``, an application built with ``lash.app``) it is
        ``lash-restate serve --app app ARGS``, run in ``cwd`` (default: this process's directory),
        where ``module`` is found; otherwise ``module`` with ``args`` (default: ``--with-turn``,
        with the demo tools, for lash's own ``serve``; none for a module of yours).

        Args:
            name: the endpoint's name in the stack: its log file.
            module: what it runs with ``python -m`` (see `Endpoint`); ignored with ``app``.
            args: its arguments (default: ``--with-turn`` for lash's own ``serve``; none with
                ``app`` or another module).
            env: environment variables for it, over this process's.
            identity_keys: Restate request identity keys: it serves only requests signed by one.
            server: its HTTP server, ``hypercorn`` or ``granian``.
            python: the interpreter that runs it.
            app: an application to serve, as ``module:attribute``.
            cwd: the directory it runs in (default: this process's).

        Returns:
            The endpoint, added to `endpoints` (not started yet).
        """
        if args is None:
            # The demo tools' endpoint for lash's own `serve`; a module of yours takes `--port` alone.
            args = ("--with-turn",) if app is None and module == "lash_restate" else ()
        keys = [arg for key in identity_keys for arg in ("--identity-key", key)]
        # `serve` has no default resolver; a local stack serves the demo tools unless told otherwise.
        resolver = {} if app is not None else {"LASH_RESOLVER": DEMO_RESOLVER}
        endpoint = Endpoint(
            module="lash_restate" if app is not None else module,
            args=("--app", app, *args, *keys) if app is not None else (*args, *keys),
            env={"LASH_COUNT_FILE": str(self.count_file), **resolver, **(env or {})},
            server=server,
            log_path=self.base_dir / f"{name}.log",
            python=python or sys.executable,
            cwd=cwd,
        )
        self.endpoints.append(endpoint)
        return endpoint

    @property
    def server(self) -> RestateServer:
        """The first server added; `StackError` if none was."""
        if not self.servers:
            raise StackError("this stack has no server: add_server() before using it")
        return self.servers[0]

    @property
    def endpoint(self) -> Endpoint:
        """The first endpoint added; `StackError` if none was."""
        if not self.endpoints:
            raise StackError("this stack has no endpoint: add_endpoint() before using it")
        return self.endpoints[0]

    @property
    def ingress_url(self) -> str:
        return self.server.ingress_url

    @property
    def admin_url(self) -> str:
        return self.server.admin_url

    def start(self, *, register: bool = True, server_timeout: float = 60) -> LocalStack:
        """Start every server, then every endpoint, then (with ``register``) register each endpoint."""
        try:
            self.start_servers(server_timeout)
            self.start_endpoints()
            if register:
                for endpoint in self.endpoints:
                    self.register(endpoint)
        except BaseException:
            self.stop()
            raise
        return self

    def start_servers(self, timeout: float = 60) -> None:
        with ThreadPoolExecutor(max_workers=max(1, len(self.servers))) as pool:
            list(pool.map(lambda server: server.start(timeout), self.servers))

    def start_endpoints(self) -> None:
        for endpoint in self.endpoints:
            endpoint.start()

    def register(
        self,
        endpoint: Endpoint | None = None,
        *,
        at: Sequence[AdminAt] = (),
        force: bool = True,
        take_over: bool = False,
    ) -> list[Any]:
        """Register ``endpoint`` (default: the first) with each of ``at`` (default: the first server).

        Returns each admin API's answer, in order. Refused (`PrefixTaken`) where another application
        serves lash's services under the endpoint's prefix, unless ``take_over``.

        Args:
            endpoint: the endpoint to register (default: the first).
            at: the servers, or admin API URLs, to register it with (default: the first server).
            force: register again over a deployment at the same URL.
            take_over: register even where another application serves lash's services under the
                endpoint's prefix.

        Raises:
            PrefixTaken: another application serves lash's services under that prefix.
            StackError: the admin API refused the registration or could not be reached.
        """
        endpoint = endpoint or self.endpoint
        urls = [t.admin_url if isinstance(t, RestateServer) else t for t in (at or [self.server])]
        try:
            return [register_deployment(url, endpoint.url, force=force, take_over=take_over) for url in urls]
        except PrefixTaken:
            raise  # typed: the tests of the refusal catch it as it is
        except RegistrationError as exc:
            raise StackError(str(exc)) from None

    def restart_endpoint(self, endpoint: Endpoint | None = None, /, **env: str | None) -> None:
        """SIGKILL the endpoint and serve again on the same port, optionally with changed environment:
        ``NAME="value"`` sets a variable from then on, ``NAME=None`` unsets it (the test run's own
        value of it too)."""
        endpoint = endpoint or self.endpoint
        endpoint.kill()
        for name, value in env.items():
            if value is None:
                endpoint.env.pop(name, None)
                endpoint.unset.add(name)
            else:
                endpoint.env[name] = value
                endpoint.unset.discard(name)
        endpoint.start(repick_port=False)

    def restart_server(self, server: RestateServer | None = None) -> None:
        """SIGKILL restate-server and start it again on its base directory (what it stored survives)."""
        server = server or self.server
        server.kill()
        server.start()

    def stop(self) -> None:
        """End every endpoint, then every server, by pid; remove the servers' data unless ``keep``.

        A stack that keeps nothing is SIGKILLed: its data goes with it, so a graceful stop (the
        endpoint's grace, the server's wait for what is in flight) would only cost time."""
        for endpoint in self.endpoints:
            if self.keep:
                endpoint.stop()
            else:
                endpoint.kill()
        for server in self.servers:
            if self.keep:
                server.stop()
            else:
                server.remove()
        if self._temporary and not self.keep:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def sql(self, query: str, *, timeout: float = 10) -> list[dict[str, Any]]:
        """The rows of ``query`` over the first server's admin SQL (``sys_invocation``, ``state``, …);
        a row leaves out each column that is null in it (read those with ``.get``). `InspectionError`
        if the admin API gives no answer within ``timeout`` seconds."""
        return sql(self.admin_url, query, timeout=timeout)

    def kill_invocation(self, invocation_id: str) -> None:
        """Kill the invocation ``invocation_id`` (``inv_…``), as ``restate invocations kill`` does: a
        handler a test left retried for ever on a stack the next tests share, say (the one a
        `call(..., retries=N)` names). `StackError` if the server refused it (an id it does not know).
        """
        try:
            answer = AdminApi(self.admin_url).patch(f"/invocations/{quote(invocation_id, safe='')}/kill")
        except AdminError as error:
            raise StackError(f"killing {invocation_id}: {error}") from None
        if not answer.is_success:
            said = f"{answer.status_code}: {answer.text}"
            raise StackError(f"killing {invocation_id}: the admin API answered {said}")

    def calls_of(self, scope: str, *, count: int = 1, within: float = 30) -> list[dict[str, Any]]:
        """The invocations of the handlers lash called for the groups of ``scope`` (a caller's
        invocation id: the scope of every group it opened without a ``key=``; else the scope of the
        key it gave), once at least ``count`` of them have started and every one started has
        ended: each row's ``id``, ``target`` (``"Payments/charge"``), ``status`` and, for one that
        failed, ``completion_failure`` (``"[409] cancelled"`` for a loser a `Cancel` close
        cancelled; a row leaves out a column that is null in it).

        Lash calls a call child's handler itself, under an idempotency key that begins with the
        group's key. Not among them: a call given an ``idempotency_key=`` of its own (which runs
        under that key), one of another deployment's service (called through a `LashChild`
        invocation, without one), and tool, sleep and event children (`LashChild` invocations). A
        call not started yet (a bounded group's next, a later group's) is not seen: give ``count``
        when the caller makes more than one. It waits (with ``time.sleep``): in an async test,
        ``await asyncio.to_thread(stack.calls_of, scope)``.

        Args:
            scope: the caller's invocation id, or the scope of the group keys it gave.
            count: how many calls to wait for (at least).
            within: how long to wait in all, in seconds.

        Raises:
            StackError: fewer than ``count`` calls of ``scope`` within ``within`` seconds, or one
                still running then.
        """
        __tracebackhide__ = True  # a failing test shows the StackError, not this method's source
        query = (
            "SELECT id, target, status, completion_failure FROM sys_invocation "
            f"WHERE starts_with(idempotency_key, {sql_quote(f'{scope}:group:')}) ORDER BY created_at"
        )
        deadline = time.monotonic() + within
        while True:
            rows = self.sql(query)
            running = [row for row in rows if row.get("status") != "completed"]  # Restate: ended
            if len(rows) >= max(count, 1) and not running:
                return rows
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        if len(rows) < max(count, 1):
            made = "no call was made" if not rows else f"only {len(rows)} of {count} calls were made"
            raise StackError(f"{made} for a group of {scope} within {within:g} s")
        still = ", ".join(f"{row['target']} ({row['status']})" for row in running)
        raise StackError(f"{len(running)} of {scope}'s calls had not ended within {within:g} s: {still}")

    def counts(self) -> list[str]:
        """Every name the demo tools' `count` has written: the side-effect witness."""
        return self.count_file.read_text().splitlines() if self.count_file.exists() else []

    @overload
    async def call_handler(
        self,
        handler: Callable[[Any, _In], Awaitable[_Out]],
        arg: _In,
        /,
        *,
        key: str | None = None,
        within: float = 60,
        retries: int | None = None,
    ) -> _Out: ...
    @overload
    async def call_handler(
        self,
        handler: Callable[[Any], Awaitable[_Out]],
        /,
        *,
        key: str | None = None,
        within: float = 60,
        retries: int | None = None,
    ) -> _Out: ...
    async def call_handler(
        self,
        handler: Any,
        arg: Any = None,
        /,
        *,
        key: str | None = None,
        within: float = 60,
        retries: int | None = None,
    ) -> Any:
        """Call the Restate handler ``handler`` (a function decorated with ``@service.handler()``, as
        ``ctx.service_call`` takes it) through the ingress, as `call` does: ``arg`` written by the
        handler's input serde, its answer read by its output serde, typed (a pydantic model, a
        msgspec Struct, a dataclass). The request is JSON and so is the answer read: a handler whose
        serdes write other bytes (``BytesSerde``) is called with `call` instead.

        Args:
            handler: the decorated handler function.
            arg: its argument (none for a handler that takes none; an optional one may be left out).
            key: the virtual object's or the workflow's key: required for their handlers, refused
                for a service's.
            within: as `call`'s.
            retries: as `call`'s.

        Returns:
            The handler's answer, as its output serde reads it.

        Raises:
            InvalidInput: ``handler`` is no Restate handler.
            StackError: ``key`` missing for a keyed handler or given for a service's, or what
                `call` raises (`CallFailed` for an error status).
        """
        __tracebackhide__ = True  # a failing test shows the error, not this method's source
        ref: HandlerRef[Any, Any] = handler_ref(handler)
        if ref.keyed != (key is not None):
            need = "needs a key=" if ref.keyed else "is a service's: it takes no key="
            raise StackError(f"{ref.target} {need}")
        path = f"{ref.service}/{quote(key, safe='')}/{ref.handler}" if key is not None else ref.target
        # An argument its serde writes as no bytes (None, to an optional one) is sent as no body at
        # all: Restate's ingress refuses an empty body that says it is JSON.
        content = (ref.arg.written(arg) or None) if ref.takes_input else None
        answer = await self.call(path, content=content, within=within, retries=retries)
        return ref.result.from_json(answer)

    async def call(
        self,
        path: str,
        body: Any = None,
        *,
        content: bytes | None = None,
        within: float = 60,
        retries: int | None = None,
    ) -> Any:
        """POST ``body`` as JSON (or ``content`` as is) to ``/{path}`` on the ingress; its JSON answer.

        Any answer but 200 raises `CallFailed` (a `StackError`) with its status and body, as the
        handler's client gets them; no answer within ``within`` seconds raises `StackError` saying
        what Restate is retrying (a handler that raised a plain exception, say) and each endpoint's
        last error, with its traceback. With ``retries``, the same `StackError` comes as soon as an
        invocation created since the call began has been retried that many times: a test of a
        handler that should never be retried fails in a second, not after ``within``.

        Args:
            path: the path on the ingress, ``Service/handler`` or ``Object/key/handler``.
            body: the request body, encoded as JSON.
            content: the request body as is, sent as JSON instead of ``body``.
            within: the request's timeout, in seconds.
            retries: fail once an invocation this call started (or any created since it began)
                has been retried this many times (None: wait ``within``).

        Returns:
            The answer's JSON value (None for an empty answer).

        Raises:
            CallFailed: the handler answered an error status (``status_code``, ``error_message``).
            StackError: no answer, no stack, or a 200 whose body is not JSON.
        """
        __tracebackhide__ = True  # a failing test shows the StackError, not this method's source
        if retries is not None and retries < 1:
            raise StackError(f"retries={retries}: a call can fail on its first retry at the soonest (1)")
        path = path.removeprefix("/")  # as the ingress client's paths are written, too
        url = f"{self.ingress_url}/{path}"
        started = datetime.now(UTC)
        try:
            async with httpx.AsyncClient(verify=tls(), timeout=within) as client:
                if content is not None:
                    posted = client.post(url, content=content, headers={"content-type": "application/json"})
                else:
                    posted = client.post(url, json=body)
                if retries is None:
                    response = await posted
                else:
                    response = await self._unless_retried(posted, retries, f"POST /{path}", started)
        except httpx.TimeoutException:
            why = await asyncio.to_thread(self.no_answer, f"POST /{path}", within, started)
            raise StackError(why) from None  # says why; the HTTP client's frames would come first
        except httpx.HTTPError as error:  # refused, reset: the server is down, or is not this one
            raise StackError(
                f"POST /{path}: the ingress at {self.ingress_url} did not answer: {error!r}"
            ) from error
        if response.status_code != 200:
            raise CallFailed(
                f"POST /{path} answered {response.status_code}: {response.text}",
                status_code=response.status_code,
                text=response.text,
            )
        if not response.content:
            return None  # a handler returning None sends no body
        try:
            return response.json()
        except ValueError:
            raise StackError(
                f"POST /{path} answered 200 with a body that is not JSON: {response.text[:300]!r}"
            ) from None

    async def _unless_retried(
        self, posted: Awaitable[httpx.Response], retries: int, request: str, started: datetime
    ) -> httpx.Response:
        """``posted``'s response, or `StackError` once an invocation created since ``started`` has
        been retried ``retries`` times (Restate counts every attempt: the first retry is attempt 2).
        It cuts the wait short; it asserts nothing of an answer that came first."""
        __tracebackhide__ = True  # a failing test shows the StackError, not this method's source
        task = asyncio.ensure_future(posted)
        since = started.isoformat(timespec="milliseconds")  # Restate's `created_at` has whole ms
        query = (
            "SELECT id, target FROM sys_invocation WHERE status != 'completed' "
            f"AND created_at >= '{since}' AND retry_count > {int(retries)}"
        )
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=0.25)
                if done:
                    return task.result()
                try:
                    retried = await asyncio.to_thread(self.sql, query)
                except InspectionError:
                    continue  # the admin API did not answer this time: the request's own timeout bounds it
                if retried and not task.done():
                    waited = (datetime.now(UTC) - started).total_seconds()
                    why = await asyncio.to_thread(self.no_answer, request, waited, started)
                    # What Restate retries and each endpoint's last error, under a first line of its own.
                    _, _, said = why.partition("\n")
                    which = ", ".join(f"{row['target']} {row['id']}" for row in retried)
                    first = f"{request}: an invocation started since has been retried {retries} time(s)"
                    stop = "stop it with kill_invocation(ID)"
                    raise StackError(f"{first} within {waited:.1f} s ({which}; {stop})\n{said}")
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError, httpx.HTTPError):
                await task  # its outcome read, so asyncio does not log it as never retrieved

    def no_answer(self, request: str, within: float, started: datetime) -> str:
        """Why ``request`` (``POST /Shop/quote``), sent at ``started``, had no answer within
        ``within`` seconds, as far as the stack can tell: what Restate is retrying (a handler that
        raised a plain exception is retried for ever), the invocations created since ``started``
        first (a stack shared by many tests holds others' too; one of those still running is given
        `FIRST_FAILURE` seconds to fail), and each endpoint's last error since
        ``started`` (its traceback), else how its log ends."""
        lines = [f"{request} had no answer within {within:g} s"]
        lines += self._retried(started, older=True)
        since = stamp(started.timestamp())  # as the endpoint's log writes a time
        for endpoint in self.endpoints:
            if endpoint.process is None or endpoint.process.poll() is not None:
                lines.append(
                    f"  the endpoint at {endpoint.url} is not running (killed, or not started again): "
                    "Restate keeps the request and runs it once the endpoint serves again "
                    "(restart_endpoint); a request sent one way (.../send) does not wait for it"
                )
            if endpoint.log_path is None:
                continue
            if error := _last_error_lines(endpoint.log_path, since):
                lines += error
            elif tail := log_tail(endpoint.log_path):
                lines += [f"  {endpoint.log_path} ends:", *(f"    {line}" for line in tail)]
        return "\n".join(lines)

    def went_wrong(self, started: datetime) -> list[str]:
        """What went wrong on the stack since ``started``, one line each (none if nothing did): the
        invocations created since that Restate is retrying, and each endpoint's last error since,
        with its traceback (a handler's plain exception, which Restate retries: a loser a group
        cancelled since, or a branch a test did not expect it to take, hides it otherwise)."""
        lines = self._retried(started, older=False)
        since = stamp(started.timestamp())  # as the endpoint's log writes a time
        for endpoint in self.endpoints:
            if endpoint.log_path is not None:
                lines += _last_error_lines(endpoint.log_path, since)
        return lines

    def _retried(self, started: datetime, *, older: bool) -> list[str]:
        """What Restate is retrying among the invocations created since ``started`` (``older``:
        else among any, when none of those is), one line each."""
        # Restate shows a retried invocation's last failure only while it backs off, not while it
        # runs its next attempt: a retry count past 1 (it counts every attempt) says so at any moment.
        failing = "SELECT target, retry_count, last_failure FROM sys_invocation "
        failing += "WHERE (last_failure IS NOT NULL OR retry_count > 1) AND status != 'completed' {since}"
        failing += "ORDER BY modified_at DESC LIMIT 5"
        lines = []
        since = f"AND created_at >= '{started.isoformat()}' "
        try:
            # Asked once, as a test has failed: a busy server's admin API is given its time.
            retried = self.sql(failing.format(since=since), timeout=30)
            if older and not retried:
                retried = self._first_failure(failing.format(since=since), since)
            if older and not retried:
                retried = self.sql(failing.format(since=""), timeout=30)  # none of its own: older ones
        except InspectionError as error:
            retried = []  # the logs say more
            lines.append(f"  Restate's admin API did not say what it retries: {error}")
        for row in retried:
            # The admin API leaves a null column out of its row: one running its next attempt has no failure.
            failure = next(iter(str(row.get("last_failure") or "").strip().splitlines()), "")[:300]
            failure = failure or "running an attempt again (its endpoint's log, below, has the failure)"
            attempt = row.get("retry_count")
            lines.append(f"  Restate is retrying {row['target']} (attempt {attempt}): {failure}")
        return lines

    def _first_failure(self, failing: str, since: str) -> list[dict[str, Any]]:
        """``failing``'s rows once one of the invocations created ``since`` (still running) has
        failed, waiting up to `FIRST_FAILURE` seconds: on a loaded server a call's own invocation
        may not have failed yet when its timeout came, and older ones would be named instead."""
        running = f"SELECT id FROM sys_invocation WHERE status != 'completed' {since}LIMIT 1"
        deadline = time.monotonic() + FIRST_FAILURE
        while self.sql(running, timeout=30) and time.monotonic() < deadline:
            time.sleep(0.25)  # polled: Restate has no way to wait for an invocation's failure
            if retried := self.sql(failing, timeout=30):
                return retried
        return []

    async def turn(self, *steps: dict[str, Any], within: float = 60) -> list[dict[str, Any]]:
        """Run ``steps`` as one fresh `LashTurn/run` invocation (see `lash_restate.testing.turn`)."""
        results: list[dict[str, Any]] = await self.call(f"{TURN}/run", {"steps": list(steps)}, within=within)
        return results

    def waiters(self, name: str) -> int:
        """How many children wait on the durable event ``name`` now, subscribed and not yet settled:
        poll it until your handler waits, to test an emit that reaches a waiting child (one emitted
        before reaches a later waiter at once). Read under this process's prefix, as `emit` sends:
        `StackError` if the application registered no such event service.

        Args:
            name: the event's name.
        """
        signal = named(SIGNAL)  # this process's prefix, as `emit` sends to
        if not self.sql(f"SELECT name FROM sys_service WHERE name = {sql_quote(signal)}"):
            raise StackError(
                f"no {signal} is registered: the application chose another prefix; import it in your "
                "tests, or call lash.use_prefix(...) with its prefix"
            )
        query = (
            f"SELECT key FROM state WHERE service_name = {sql_quote(signal)} "
            f"AND service_key = {sql_quote(name)} AND starts_with(key, 'waiter:')"
        )
        return len(self.sql(query))

    async def emit(self, name: str, value: Any = None, *, within: float = 60) -> None:
        """Fulfil every waiter of the durable event ``name`` with ``value``, now and later.

        Args:
            name: the event's name.
            value: its payload, a JSON value.
            within: the request's timeout, in seconds.
        """
        await self.call(f"{named(SIGNAL)}/{quote(name, safe='')}/emit", value, within=within)

    async def reject(self, name: str, message: str, *, within: float = 60) -> None:
        """Reject every waiter of the durable event ``name`` with ``message``.

        Args:
            name: the event's name.
            message: the rejection's message.
            within: the request's timeout, in seconds.
        """
        await self.call(f"{named(SIGNAL)}/{quote(name, safe='')}/reject", message, within=within)

    async def clear(self, name: str, *, within: float = 60) -> None:
        """Forget the durable event ``name``'s payload (or rejection): later waiters wait again, and
        those already waiting wait on, for its next emit or reject.

        Args:
            name: the event's name.
            within: the request's timeout, in seconds.
        """
        await self.call(f"{named(SIGNAL)}/{quote(name, safe='')}/clear", within=within)
