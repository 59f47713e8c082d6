"""The processes of a local stack: restate-server nodes (the pinned binary) and endpoints.

Each is started on free loopback ports, owned by one pid, and ended by that pid;
`lash_restate.testing.stack.LocalStack` assembles them.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import functools
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import httpx

from .._http import tls
from ..contract import LashError, RuntimeErrorCode
from ._forkserver import IMPORT_TIME, Spawn

__all__ = [
    "FORK_ENV",
    "SERVER_ENV",
    "SERVER_VERSION",
    "CallFailed",
    "Endpoint",
    "ProcessHandle",
    "RestateServer",
    "StackError",
    "free_port",
    "how_to_get_the_server",
    "listeners",
    "restate_server_binary",
]

SERVER_PACKAGE = "@restatedev/restate-server"


class StackError(LashError, RuntimeError):
    """A part of the local stack could not be found, started or reached; the message says which."""

    code = RuntimeErrorCode.STACK

    def __str__(self) -> str:
        return self.message


class CallFailed(StackError):
    """A handler a test called through the ingress (`LocalStack.call`) answered an error status:
    what its client gets. ``status_code`` is the status (a handler's uncaught
    ``TerminalError("out of stock", 409)`` answers 409), ``error_message`` the failure's message as
    Restate's ingress words it (``"out of stock"``; None when the body carries none), ``text`` the
    body as it came."""

    code = RuntimeErrorCode.CALL_FAILED

    def __init__(self, message: str, *, status_code: int, text: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.text = text

    @property
    def error_message(self) -> str | None:
        """The ``message`` of the ingress's JSON failure body, or None when it has none."""
        try:
            body = json.loads(self.text)
        except ValueError:
            return None
        message = body.get("message") if isinstance(body, dict) else None
        return message if isinstance(message, str) else None


_LOWEST_PORT = 10_000  # below it, well-known services' ports


def _outgoing_ports() -> range:
    """The ports the kernel gives outgoing connections (and a bind to port 0)."""
    try:
        low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 49152, 65535  # IANA's dynamic range, macOS's default
    return range(low, high + 1)


def _worker() -> tuple[int, int]:
    """This pytest-xdist worker's number and how many there are; (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if name[:2] == "gw" and name[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(name[2:]) % int(count), int(count)  # a worker restarted in place of one gets its share
    return 0, 1


@functools.cache
def _pool() -> tuple[int, ...]:
    """Where this process picks ports: outside the outgoing connections' range, in its own share."""
    outgoing = _outgoing_ports()
    worker, workers = _worker()
    return tuple(p for p in range(_LOWEST_PORT, 65536) if p not in outgoing and p % workers == worker)


_picked = [-1]  # the index in `_pool` of the port last handed out; -1 until the first
_picking = threading.Lock()  # a stack starts its servers from threads, each of which may pick


def free_port() -> int:
    """A loopback port nobody listens on now, and that no other local stack of this test run is
    given: an endpoint restarted after a kill must find its port still free. So not a port of the
    range outgoing connections take, each pytest-xdist worker has a share of the rest, and a
    process hands its ports out in turn from a random start (a second run at the same time starts
    elsewhere)."""
    pool = _pool()
    with _picking:
        at = _picked[0] if _picked[0] >= 0 or not pool else random.SystemRandom().randrange(len(pool))
        for _ in pool:
            at = (at + 1) % len(pool)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", pool[at]))
                except OSError:  # taken: by another program, or by a stack of another run
                    continue
            _picked[0] = at
            return pool[at]
    # None of ours is free (or the outgoing range leaves none): any the kernel has.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SERVER_VERSION = "1.7.12"  # the pinned restate-server: package.json's, which a test holds to this
SERVER_ENV = "LASH_RESTATE_SERVER"  # a restate-server binary to run instead of looking for one
_HERE = Path(__file__).resolve().parent  # where the package is installed: a source checkout's node_modules


def _platform() -> tuple[str, str]:
    system = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system(), platform.system().lower())
    machine = {"x86_64": "x64", "AMD64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine(), platform.machine()
    )
    return system, machine


def _platform_package() -> str:
    system, machine = _platform()
    return f"restate-server-{system}-{machine}"


def _release_archive() -> str:
    """The binary archive of the pinned release for this machine, on GitHub."""
    system, machine = _platform()
    arch = {"x64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    target = "apple-darwin" if system == "darwin" else "unknown-linux-musl"
    return (
        f"https://github.com/restatedev/restate/releases/download/v{SERVER_VERSION}/"
        f"restate-server-{arch}-{target}.tar.xz"
    )


def how_to_get_the_server() -> str:
    """Every way lash finds a restate-server, each as what to do: for a message that none was found."""
    return (
        f"lash runs the pinned restate-server {SERVER_VERSION}; get it one of these ways:\n"
        f"  npm install --save-dev {SERVER_PACKAGE}@{SERVER_VERSION}   (here or in a parent directory: lash "
        "finds node_modules/)\n"
        f"  download and unpack {_release_archive()}, then put its restate-server on PATH\n"
        f"  or point {SERVER_ENV} at a restate-server binary"
    )


def restate_server_binary(
    explicit: str | os.PathLike[str] | None = None, *, near: Path | None = None
) -> Path:
    """The restate-server to run: ``explicit``, else ``$LASH_RESTATE_SERVER``, else the npm package's
    binary in a ``node_modules`` of ``near`` or a parent, of the current directory or a parent
    (``make setup`` installs the pinned one there), or of the directories above this package, else
    one on ``PATH``.

    A binary named but missing, and none found, are `StackError`s that say how to get one."""
    for named, source in ((explicit, "the restate-server given"), (os.environ.get(SERVER_ENV), SERVER_ENV)):
        if named:
            path = Path(named).expanduser()
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise StackError(
                    f"{source} is {path}, which is not an executable file. {how_to_get_the_server()}"
                )
            return path
    relative = Path("node_modules/@restatedev") / _platform_package() / "bin/restate-server"
    for start in (*([near] if near is not None else []), Path.cwd(), _HERE):
        for folder in [start, *start.parents]:
            candidate = folder / relative
            if candidate.is_file():
                return candidate
    found = shutil.which("restate-server")
    if found:
        return Path(found)
    raise StackError(f"restate-server not found. {how_to_get_the_server()}")


_BIND_ATTEMPTS = 3


def _lost_port_race(log_path: Path | None, offset: int) -> bool:
    """Whether the start that logged from ``offset`` on failed because a port was already in use."""
    if log_path is None or not log_path.exists():
        return False
    with log_path.open("rb") as log:
        log.seek(offset)
        return b"in use" in log.read().lower()


_LOG_TAIL = 15  # lines of a process's log a failure shows (a call with no answer, a failed start)
_TAIL_BYTES = 16 * 1024  # read from the end of a log for them: a shared stack's log grows long


def log_tail(log: Path) -> list[str]:
    """The last `_LOG_TAIL` lines of ``log`` (none if it is not there)."""
    return _tail(log, _TAIL_BYTES)[-_LOG_TAIL:]


def _tail(log: Path, tail_bytes: int) -> list[str]:
    try:
        with log.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - tail_bytes))
            text = file.read().decode(errors="replace")
    except OSError:
        return []
    return text.strip().splitlines()


_ERROR_LINES = 20  # of the last error's traceback a failure shows: its end names the handler's line


def last_error(log: Path, since: str = "") -> list[str]:
    """The last error an endpoint logged with a traceback (a handler's plain exception, which
    Restate retries) at ``since`` (an ISO 8601 time in UTC, as the log writes it) or after, as its
    time and message, then the end of the traceback, one line each; none if the end of ``log`` holds
    none. Each retry logs the same traceback again, on one line."""
    for line in reversed(_tail(log, 4 * _TAIL_BYTES)):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # not a JSON log line (the HTTP server's own, say)
        if not isinstance(record, dict) or str(record.get("ts", "")) < since:
            continue  # an earlier test's, on a stack many share
        if isinstance(trace := record.get("exc"), str):
            return [f"{record.get('ts', '')} {record.get('msg', '')}", *trace.splitlines()[-_ERROR_LINES:]]
    return []


class ProcessHandle(Protocol):
    """A process a stack owns: the `subprocess.Popen` it spawned, or an endpoint forked for it."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | Any: ...  # None until `poll` or `wait` saw it end

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


FORK_ENV = "LASH_TEST_FORK"  # "1": fork the endpoints that can be (lash's own tests do); else spawn each


class _ForkServer:
    """This process's fork server (`_forkserver`), started at the first endpoint it forks and ended
    with this process (at the end of its stdin it kills what it forked and still runs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one request and its answer at a time
        self._process: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] | None = None
        self._owed = 0  # answers not read yet: an asker interrupted (a timeout's signal) between the two

    def agrees(self, python: str, env: dict[str, str]) -> bool:
        """Whether a child run by ``python`` with ``env`` can be forked: this interpreter, and the
        fork server's environment where an interpreter's start or an import reads it."""
        if python != sys.executable or os.environ.get(FORK_ENV, "").strip() != "1":
            return False
        ours = self._env if self._env is not None else os.environ
        names = {name for name in (*ours, *env) if name.startswith(IMPORT_TIME)}
        return all(ours.get(name) == env.get(name) for name in names)

    def spawn(self, spawn: Spawn) -> _Forked:
        return _Forked(self, int(self._ask({"spawn": spawn})["pid"]))

    def poll(self, pid: int) -> int | None:
        answer = self._ask({"poll": pid})
        if answer.get("unknown"):
            raise StackError(f"endpoint pid {pid}: the fork server that started it is gone (see the output)")
        return None if answer["code"] is None else int(answer["code"])

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                process, self._owed = self._start(), 0
                self._process = process
            pipes = process.stdin, process.stdout
            assert pipes[0] is not None
            assert pipes[1] is not None
            try:
                while self._owed:  # read off, so that this request's answer is the next line
                    pipes[1].readline()
                    self._owed -= 1
                pipes[0].write(json.dumps(request).encode() + b"\n")
                pipes[0].flush()
                self._owed += 1
                line = pipes[1].readline()
                self._owed -= 1
            except OSError:
                line = b""
        if not line:
            raise StackError("the endpoints' fork server ended (its error is in the test's output)")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _start(self) -> subprocess.Popen[bytes]:
        self._env = dict(os.environ) if self._env is None else self._env
        # Not `-m`: this package imports the module before `-m` would run it as `__main__`.
        command = [sys.executable, "-c", "from lash_restate.testing._forkserver import main; main()"]
        # A session of its own: a Ctrl-C or a SIGTERM to the test run's group would end it before
        # the stack stops what it forked; it ends at the end of its stdin, killing what still runs.
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self._env, start_new_session=True
        )
        atexit.register(self.close)
        return process

    def close(self) -> None:
        """End the fork server and what it forked and still runs (at this process's exit)."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        try:
            process.communicate(timeout=10)  # stdin closed: its cue to kill what it forked, and exit
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


_FORK_SERVER = _ForkServer()


class _Forked:
    """An endpoint the fork server forked: the part of `subprocess.Popen` a stack uses, its end
    asked of the fork server (its parent)."""

    def __init__(self, server: _ForkServer, pid: int) -> None:
        self._server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.poll(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"endpoint pid {self.pid}", timeout or 0)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)  # as `subprocess.Popen.wait` backs off
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def _exited(what: str, process: ProcessHandle, log_path: Path | None, offset: int) -> StackError:
    """A start that ended with its process: the code and what the process logged as it started,
    which a stack in a temporary directory deletes as it stops."""
    message = f"{what}: the process exited with code {process.returncode}"
    if log_path is not None:
        with contextlib.suppress(OSError), log_path.open("rb") as log:
            log.seek(offset)
            tail = log.read()[-_TAIL_BYTES:].decode(errors="replace").strip().splitlines()[-_LOG_TAIL:]
            if tail:
                message += f"; its log, {log_path}, ends:\n" + "\n".join(f"  {line}" for line in tail)
    return StackError(message)


def _wait(
    condition: Any,
    what: str,
    timeout: float,
    process: ProcessHandle | None = None,
    log: tuple[Path | None, int] = (None, 0),
) -> None:
    """Until ``condition()`` holds; `StackError` once ``process`` exits (with what it logged from
    ``log``'s offset on) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise _exited(what, process, *log)
        with contextlib.suppress(httpx.HTTPError, OSError):
            if condition():
                return
        time.sleep(0.05)
    raise StackError(f"{what}: not ready after {timeout:.0f}s")


# How /proc/net/tcp{,6} write 127.0.0.1 and 0.0.0.0, as IPv4 and as IPv4-mapped IPv6, and `::`: a
# listener on another address (::1 alone, a LAN address) does not take a stack's loopback port.
_LOOPBACK_OR_ANY = frozenset(
    {"0100007F", "00000000", "0000000000000000FFFF00000100007F", "0000000000000000FFFF000000000000", "0" * 32}
)


def _listening(port: int) -> set[str] | None:
    """The TCP sockets listening on ``port`` on this machine, named as a process's fds link them;
    None where /proc does not tell (not Linux)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            return None
        for row in rows:
            fields = row.split()
            address, at = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(at, 16) == port and address in _LOOPBACK_OR_ANY:  # 0A: LISTEN
                found.add(f"socket:[{fields[9]}]")
    return found


def _fds(session: int | None = None) -> dict[int, set[str]]:
    """What each process (of ``session`` only, if given) has open, by pid."""
    opened = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if session is None or os.getsid(int(proc.name)) == session:
                opened[int(proc.name)] = set(_links((proc / "fd").iterdir()))
        except OSError:  # a process that ended while we looked, or one we may not read
            continue
    return opened


def _links(fds: Iterable[Path]) -> Iterator[str]:
    """What each of ``fds`` names; one the process closed while we looked is passed over, not the
    whole process (a busy server's own listening socket went uncounted with it)."""
    for fd in fds:
        try:
            yield os.readlink(fd)
        except OSError:
            continue


def listeners(port: int) -> set[int]:
    """Every pid holding a TCP socket listening on ``port`` (from /proc: Linux; elsewhere none)."""
    sockets = _listening(port) or set()
    return {pid for pid, opened in _fds().items() if opened & sockets}


def _served_elsewhere(ports: Sequence[int], session: int) -> str | None:
    """Which of ``ports`` a process outside ``session`` listens on, and its pid; None when every
    listener is the session's own, or /proc does not tell."""
    ours: set[str] | None = None
    for port in ports:
        sockets = _listening(port)
        if not sockets:
            continue
        ours = set().union(*_fds(session).values()) if ours is None else ours
        if sockets - ours:
            pids = ", ".join(str(pid) for pid in sorted(listeners(port))) or "unknown"
            return f"port {port} (pid {pids})"
    return None


def _signal(process: ProcessHandle, sig: signal.Signals) -> None:
    """Send ``sig`` to ``process`` and every process it started: each owned process leads a process
    group of its own, so a launcher (npm's `restate-server` script, which runs the real binary as
    its child and forwards SIGINT and SIGTERM only) is killed, paused and resumed with what it runs."""
    with contextlib.suppress(ProcessLookupError):  # the group is gone already
        os.killpg(process.pid, sig)


def _stop(process: ProcessHandle | None, timeout: float = 15) -> None:
    if process is None or process.poll() is not None:
        return
    _signal(process, signal.SIGTERM)
    _signal(process, signal.SIGCONT)  # a paused process acts on its SIGTERM only once it runs again
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        _signal(process, signal.SIGKILL)
        process.wait()


class _OwnedProcess(abc.ABC):
    """One child process this stack owns and ends by its pid, with whatever it started (SIGTERM, or
    SIGKILL as a crash would); `pause` and `resume` stop and continue it (SIGSTOP, SIGCONT) as a
    stalled machine would."""

    process: ProcessHandle | None
    log_path: Path | None
    _log: IO[bytes] | None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @abc.abstractmethod
    def _command(self) -> list[str]: ...

    @abc.abstractmethod
    def _env(self) -> dict[str, str]: ...

    @abc.abstractmethod
    def ready(self) -> bool: ...

    @abc.abstractmethod
    def _fresh_ports(self) -> None: ...

    @abc.abstractmethod
    def _ports(self) -> list[int]: ...

    def _cwd(self) -> Path | None:
        return None  # this process's directory

    def _start(self, what: str, timeout: float, *, repick_ports: bool) -> None:
        """Spawn and wait until ready; a start that lost its ports is retried on fresh ones. One
        already running is refused: a second would answer nothing on its taken ports, while the
        first, no longer held, outlived `stop`."""
        if self.process is not None and self.process.poll() is None:
            raise StackError(f"{what} is already running (pid {self.process.pid}): stop or kill it first")
        for attempt in range(_BIND_ATTEMPTS):
            taken: str | None = None
            offset = self.log_path.stat().st_size if self.log_path and self.log_path.exists() else 0
            self._spawn(self._command(), self._env(), self.log_path)
            try:
                _wait(self.ready, what, timeout, self.process, (self.log_path, offset))
                # Another process may answer on a port this one failed to bind, or shares it by
                # SO_REUSEPORT: the health check alone cannot tell whose answer it was.
                assert self.process is not None
                taken = _served_elsewhere(self._ports(), self.process.pid)
                if taken is None:
                    return
                raise StackError(f"{what}: {taken} is served by another process, not the one started here")
            except StackError:
                self.stop()
                # A free port can be taken between picking it and binding it (by another program,
                # or another test run); only that failure is retried, on fresh ports.
                lost = taken is not None or _lost_port_race(self.log_path, offset)
                if not repick_ports or attempt + 1 == _BIND_ATTEMPTS or not lost:
                    raise
            except BaseException:
                self.stop()
                raise
            self._fresh_ports()
        raise AssertionError("unreachable")

    def _spawn(self, args: Sequence[str], env: dict[str, str], log_path: Path | None) -> None:
        self._log = log_path.open("ab") if log_path is not None else None
        self.process = subprocess.Popen(
            list(args),
            env=env,
            cwd=self._cwd(),
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a process group of its own, which `_signal` reaches whole
        )

    def stop(self) -> None:
        _stop(self.process)
        self._close_log()

    def kill(self) -> None:
        """SIGKILL, as a crash would; whatever it keeps on disk stays for a restart."""
        if self.process is not None and self.process.poll() is None:
            _signal(self.process, signal.SIGKILL)
            self.process.wait()
        self._close_log()

    def pause(self) -> None:
        """SIGSTOP, as a stalled machine would: the process keeps its sockets and its memory and runs
        nothing (its peers see silence, not a closed connection) until `resume`."""
        if self.process is not None and self.process.poll() is None:
            _signal(self.process, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a paused process runs on from where it stopped, its peers' timeouts notwithstanding."""
        if self.process is not None and self.process.poll() is None:
            _signal(self.process, signal.SIGCONT)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass
class RestateServer(_OwnedProcess):
    """One restate-server node on free loopback ports with its own base directory."""

    base_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lash-restate-")))
    ingress_port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    fabric_port: int = field(default_factory=free_port)
    config_file: Path | None = None
    node_name: str = "lash-dev"
    extra_env: dict[str, str] = field(default_factory=dict)
    binary: Path | None = None  # the restate-server to run; None: `restate_server_binary()` finds one
    log_path: Path | None = None
    process: ProcessHandle | None = None
    _log: IO[bytes] | None = None

    @property
    def ingress_url(self) -> str:
        return f"http://127.0.0.1:{self.ingress_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def start(self, timeout: float = 60) -> RestateServer:
        """Start (or restart on the same base directory) and wait until admin and ingress answer.

        A first start whose ports were taken meanwhile moves to free ones; a restart keeps them (its
        clients, and a cluster's other nodes, know it by them), and fails if one is taken."""
        self.log_path = self.log_path or self.base_dir / "restate-server.log"
        self._start("restate-server", timeout, repick_ports=self.process is None)
        return self

    def _command(self) -> list[str]:
        args = [
            str(restate_server_binary(self.binary)),
            "--base-dir",
            str(self.base_dir),
            "--listen-mode",
            "tcp",
        ]
        args += ["--no-logo", "--node-name", self.node_name]
        if self.config_file is not None:
            args += ["--config-file", str(self.config_file)]
        return args

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress_port}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin_port}",
            "RESTATE_BIND_ADDRESS": f"127.0.0.1:{self.fabric_port}",
            "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{self.fabric_port}",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_LOG_FORMAT": "compact",
            # Its invoker makes a directory in TMPDIR per partition and leaves it when it stops: inside
            # the base directory, they go with it.
            "TMPDIR": str(self._tmp_dir()),
            **self.extra_env,
        }

    def _tmp_dir(self) -> Path:
        tmp = self.base_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp

    def _fresh_ports(self) -> None:
        self.ingress_port, self.admin_port, self.fabric_port = free_port(), free_port(), free_port()

    def _ports(self) -> list[int]:
        return [self.ingress_port, self.admin_port, self.fabric_port]

    def ready(self) -> bool:
        admin = httpx.get(f"{self.admin_url}/health", timeout=1, verify=tls())
        ingress = httpx.get(f"{self.ingress_url}/restate/health", timeout=1, verify=tls())
        if admin.status_code != 200 or ingress.status_code != 200:
            return False
        # Health answers before every partition has a leader again after a restart; until then the
        # admin's queries fail ("node lookup for partition N failed"), so ask one of them too.
        query = {"query": "SELECT count(*) AS n FROM sys_invocation"}
        answer = httpx.post(f"{self.admin_url}/query", json=query, timeout=5, verify=tls())
        return answer.status_code == 200

    def remove(self) -> None:
        """SIGKILL and remove its data: what goes needs no graceful stop (which waits seconds for the
        invocations in flight)."""
        self.kill()
        shutil.rmtree(self.base_dir, ignore_errors=True)


# What points an endpoint at a cluster's admin API: an endpoint a stack serves inherits none of them.
ELSEWHERE = frozenset({"RESTATE_ADMIN_URL", "LASH_ADMIN_URL", "RESTATE_AUTH_TOKEN"})


@dataclass
class Endpoint(_OwnedProcess):
    """An endpoint in a subprocess that owns its port (one pid: its HTTP server runs inside it).

    ``module`` is what ``python -m`` runs: ``lash_restate`` runs ``serve`` with ``args``; any
    other module must accept ``--port`` and serve there. ``server`` (``hypercorn`` or
    ``granian``) is passed as ``LASH_SERVER``; unset, the endpoint inherits this process's
    ``$LASH_SERVER``, else serves under hypercorn. It inherits this process's environment but for
    an admin API's address and token and the variables ``unset`` names, with ``env`` over it.
    ``python`` is the interpreter that runs it (default: this one); another environment's
    interpreter serves that environment's ``lash_restate``, e.g. an earlier release beside the
    current one.

    With ``$LASH_TEST_FORK`` set to ``1`` (lash's own tests set it), an endpoint this interpreter
    runs is forked, the first time it starts, from a process that imported lash, Restate's SDK and
    hypercorn once (a quarter of a fresh interpreter's CPU to start), unless its environment differs
    from that process's where an interpreter's start or an import reads it (``PYTHON*``,
    ``OTEL_*``, ``RUST_*``, ``RESTATE_CORE_*``, ``PYDANTIC_*``, ``TZ``, ``LANG``, ``LC_*``): it
    is the process ``python -m`` would have started, but for its command line (the fork server's),
    a ``sitecustomize`` (run once, in the fork server) and its hash seed (the fork server's, so a
    restart is spawned). Its ``process`` is then a `ProcessHandle`, not a `subprocess.Popen`.
    """

    port: int = field(default_factory=free_port)
    args: Sequence[str] = ("--with-turn",)
    module: str = "lash_restate"
    env: dict[str, str] = field(default_factory=dict)
    unset: set[str] = field(default_factory=set)  # not passed on from this process's environment
    server: str | None = None
    python: str = sys.executable
    cwd: Path | None = None  # where it runs (default: this process's directory)
    log_path: Path | None = None
    process: ProcessHandle | None = None
    _log: IO[bytes] | None = None
    _started: bool = field(default=False, init=False, repr=False)  # once: a start again is a restart

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30, *, repick_port: bool = True) -> Endpoint:
        """Serve and wait until the endpoint answers its health check.

        A registered endpoint must come back on its port (``repick_port=False``): the server
        knows it by its URL.
        """
        self._start("endpoint", timeout, repick_ports=repick_port)
        self._started = True
        return self

    def _command(self) -> list[str]:
        if self.module == "lash_restate":
            serve = ["serve", "--host", "127.0.0.1", "--port", str(self.port)]
            return [self.python, "-m", "lash_restate", *serve, *self.args]
        return [self.python, "-m", self.module, "--port", str(self.port), *self.args]

    def _env(self) -> dict[str, str]:
        # Not another cluster's admin API, which the developer's shell may name: the endpoint would
        # ask it who serves a declared call target, or who holds its prefix (`env` may still name one).
        left_out = ELSEWHERE | self.unset
        inherited = {name: value for name, value in os.environ.items() if name not in left_out}
        server = {"LASH_SERVER": self.server} if self.server and "LASH_SERVER" not in self.unset else {}
        return {**inherited, **server, **self.env}

    def _cwd(self) -> Path | None:
        return self.cwd

    def _spawn(self, args: Sequence[str], env: dict[str, str], log_path: Path | None) -> None:
        # Forked from a process that imported lash already where it can be: half a CPU-second less
        # a start (`_forkserver` says what a child shares and what it cannot). A restart is spawned:
        # forked children share the fork server's hash seed, and an endpoint restarted after a
        # crash must replay under another, as a real one would, for a test to see what that changes.
        if self._started or not _FORK_SERVER.agrees(args[0], env):
            super()._spawn(args, env, log_path)
            return
        self.process = _FORK_SERVER.spawn(
            Spawn(
                module=args[2],  # [python, "-m", module, *args]
                args=list(args[3:]),
                env=env,
                # This process's directory now, not the fork server's (a test may have changed it).
                cwd=str(Path(self._cwd() or os.getcwd()).resolve()),
                log=None if log_path is None else str(log_path.absolute()),
            )
        )

    def _fresh_ports(self) -> None:
        self.port = free_port()

    def _ports(self) -> list[int]:
        return [self.port]

    def ready(self) -> bool:
        # An answer over HTTP, not just an open port: whoever took the port may be listening on it,
        # and a Restate server's admin API answers `/health` too; the SDK's answer names the SDK.
        answer = httpx.get(f"{self.url}/health", timeout=1, verify=tls())
        sdk = answer.headers.get("x-restate-server", "").startswith("restate-sdk")
        return answer.status_code == 200 and sdk
