"""A local Restate stack made of real parts: the pinned restate-server binary and our endpoint.

Used by ``lash-restate dev`` and by the test suite. Every process is started on
free loopback ports, owned by one pid, and ended by that pid.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

__all__ = [
    "Endpoint",
    "RestateServer",
    "StackError",
    "free_port",
    "register_deployment",
    "restate_server_binary",
    "running_stack",
]

SERVER_PACKAGE = "@restatedev/restate-server"


class StackError(RuntimeError):
    """A part of the local stack could not be found, started or reached; the message says which."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _platform_package() -> str:
    system = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system(), platform.system().lower())
    machine = {"x86_64": "x64", "AMD64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine(), platform.machine()
    )
    return f"restate-server-{system}-{machine}"


def restate_server_binary() -> Path:
    """The pinned binary installed by ``make setup`` (npm), or ``$LASH_RESTATE_SERVER``."""
    override = os.environ.get("LASH_RESTATE_SERVER")
    if override:
        return Path(override)
    relative = Path("node_modules/@restatedev") / _platform_package() / "bin/restate-server"
    starts = [Path.cwd(), Path(__file__).resolve()]
    for start in starts:
        for folder in [start, *start.parents]:
            candidate = folder / relative
            if candidate.is_file():
                return candidate
    found = shutil.which("restate-server")
    if found:
        return Path(found)
    raise StackError(
        f"restate-server not found: run `make setup` (installs {SERVER_PACKAGE} into node_modules) "
        "or set LASH_RESTATE_SERVER to the binary"
    )


_BIND_ATTEMPTS = 3


def _lost_port_race(log_path: Path, offset: int) -> bool:
    """Whether the start that logged from ``offset`` on failed because a port was already in use."""
    with log_path.open("rb") as log:
        log.seek(offset)
        return b"in use" in log.read().lower()


def _wait(condition: Any, what: str, timeout: float, process: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise StackError(f"{what}: the process exited with code {process.returncode}")
        with contextlib.suppress(httpx.HTTPError, OSError):
            if condition():
                return
        time.sleep(0.05)
    raise StackError(f"{what}: not ready after {timeout:.0f}s")


def _stop(process: subprocess.Popen[Any] | None, timeout: float = 15) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class _OwnedProcess:
    """One child process this stack owns and ends by its pid (SIGTERM, or SIGKILL as a crash would)."""

    process: subprocess.Popen[bytes] | None
    _log: IO[bytes] | None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def _spawn(self, args: Sequence[str], env: dict[str, str], log_path: Path | None) -> None:
        self._log = log_path.open("ab") if log_path is not None else None
        self.process = subprocess.Popen(
            list(args),
            env=env,
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        _stop(self.process)
        self._close_log()

    def kill(self) -> None:
        """SIGKILL, as a crash would; whatever it keeps on disk stays for a restart."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._close_log()

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
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def ingress_url(self) -> str:
        return f"http://127.0.0.1:{self.ingress_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def start(self, timeout: float = 60) -> RestateServer:
        """Start (or restart on the same base directory) and wait until admin and ingress answer."""
        args = [str(restate_server_binary()), "--base-dir", str(self.base_dir), "--listen-mode", "tcp"]
        args += ["--no-logo", "--node-name", self.node_name]
        if self.config_file is not None:
            args += ["--config-file", str(self.config_file)]
        self.log_path = self.log_path or self.base_dir / "restate-server.log"
        for attempt in range(_BIND_ATTEMPTS):
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            self._spawn(args, self._env(), self.log_path)
            try:
                _wait(self.ready, "restate-server", timeout, self.process)
                return self
            except StackError:
                self.stop()
                # A free port can be taken between picking it and binding it (by any process's
                # outgoing connection); only that failure is retried, on fresh ports.
                if attempt + 1 == _BIND_ATTEMPTS or not _lost_port_race(self.log_path, offset):
                    raise
            except BaseException:
                self.stop()
                raise
            self.ingress_port, self.admin_port, self.fabric_port = free_port(), free_port(), free_port()
        raise AssertionError("unreachable")

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress_port}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin_port}",
            "RESTATE_BIND_ADDRESS": f"127.0.0.1:{self.fabric_port}",
            "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{self.fabric_port}",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_LOG_FORMAT": "compact",
            **self.extra_env,
        }

    def ready(self) -> bool:
        admin = httpx.get(f"{self.admin_url}/health", timeout=1)
        ingress = httpx.get(f"{self.ingress_url}/restate/health", timeout=1)
        return admin.status_code == 200 and ingress.status_code == 200

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)


@dataclass
class Endpoint(_OwnedProcess):
    """Our endpoint served by hypercorn in a subprocess that owns its port (one pid)."""

    port: int = field(default_factory=free_port)
    args: Sequence[str] = ("--with-turn",)
    module: str = "lash_restate"  # what `python -m` runs; it must accept --host/--port (or --port) and serve
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> Endpoint:
        if self.module == "lash_restate":
            command = [
                sys.executable,
                "-m",
                "lash_restate",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ]
        else:
            command = [sys.executable, "-m", self.module, "--port", str(self.port)]
        command += list(self.args)
        self._spawn(command, {**os.environ, **self.env}, self.log_path)
        try:
            _wait(self._listening, "endpoint", timeout, self.process)
        except BaseException:
            self.stop()
            raise
        return self

    def _listening(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
            return True


def register_deployment(admin_url: str, endpoint_url: str, *, force: bool = True, timeout: float = 30) -> Any:
    """Register (or re-register) ``endpoint_url`` with the admin API; returns the admin's answer."""
    try:
        response = httpx.post(
            f"{admin_url}/deployments", json={"uri": endpoint_url, "force": force}, timeout=timeout
        )
    except httpx.HTTPError as exc:
        raise StackError(f"cannot reach the admin API at {admin_url}: {exc}") from None
    if response.status_code >= 300:
        raise StackError(f"registering {endpoint_url} failed ({response.status_code}): {response.text}")
    return response.json()


@contextlib.contextmanager
def running_stack(
    base_dir: Path,
    *,
    server_env: dict[str, str] | None = None,
    endpoint_args: Sequence[str] = ("--with-turn",),
    endpoint_env: dict[str, str] | None = None,
    keep: bool = False,
) -> Iterator[tuple[RestateServer, Endpoint]]:
    """A server (in ``base_dir/restate``) and a registered endpoint, both ended by pid on exit."""
    (base_dir / "restate").mkdir(parents=True, exist_ok=True)
    server = RestateServer(base_dir=base_dir / "restate", extra_env=dict(server_env or {}))
    endpoint = Endpoint(args=endpoint_args, env=dict(endpoint_env or {}), log_path=base_dir / "endpoint.log")
    try:
        server.start()
        endpoint.start()
        register_deployment(server.admin_url, endpoint.url)
        yield server, endpoint
    finally:
        endpoint.stop()
        server.stop()
        if not keep:
            server.remove()
