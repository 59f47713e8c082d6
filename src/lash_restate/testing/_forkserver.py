"""A process that has imported lash once and forks each endpoint a test starts from itself.

An endpoint started as ``python -m lash_restate serve`` spends about half a CPU-second on its
interpreter and its imports (``restate`` alone a third of it) before it serves; a test suite starts
hundreds. Forked from this process, which imported them once, a child starts serving at once, and
is otherwise what that command would have been: a session of its own, its log on stdout and
stderr, its working directory, exactly the environment it was given, ``sys.argv`` and
``sys.path[0]`` as ``python -m`` sets them, the module run as ``__main__``, and the interpreter's
own exit (``atexit``, the exit code, a traceback for an uncaught error).

What it cannot give a child is what an interpreter reads or does as it starts (a
``sitecustomize`` runs once, here) or a module reads as it is imported: ``Endpoint`` forks only a
child whose interpreter is this one and whose environment agrees with this process's on those
variables (`IMPORT_TIME`), and only when ``$LASH_TEST_FORK`` is ``1``; it spawns any other.

Spoken to over its stdin and stdout, one JSON object a line each way, one request at a time:
``{"spawn": {...}}`` answers the child's pid once the child leads its own session,
``{"poll": pid}`` its exit code once it has ended (``-N`` for signal N, as `subprocess` reports
it), else null, or that the pid is unknown (not forked here, or its end answered already). At the
end of its stdin (the test process ended) it kills and reaps every child still running and exits.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import signal
import sys
from typing import Any, TypedDict

__all__ = ["IMPORT_TIME", "PRELOAD", "Spawn"]

# What serving an endpoint imports, imported here once: the children share it as they start.
PRELOAD = (
    "lash_restate.cli",
    "lash_restate.engine",
    "lash_restate.inspection",
    "lash_restate.testing.tools",
    "restate",
    "hypercorn.asyncio",
    "opentelemetry.trace",
)

# Variables read as an interpreter starts (its locale, its time zone) or as one of PRELOAD is
# imported (`OTEL_PYTHON_CONTEXT`, pydantic's plugins): a child whose environment differs from this
# process's in one of them is spawned instead.
IMPORT_TIME = ("PYTHON", "OTEL_", "RUST_", "RESTATE_CORE_", "PYDANTIC_", "TZ", "LANG", "LC_")


class Spawn(TypedDict):
    """A child to fork: ``python -m module *args`` in ``cwd`` with exactly ``env``, its output
    appended to ``log`` (or dropped)."""

    module: str
    args: list[str]
    env: dict[str, str]
    cwd: str | None
    log: str | None


def serve() -> Spawn | None:
    """Answer requests until stdin ends (then None); in a child just forked, its request."""
    children: set[int] = set()
    server = os.getpid()
    try:
        return _answer(children)
    finally:
        if os.getpid() == server:  # not in a child returning with its request
            _end(children)


def _answer(children: set[int]) -> Spawn | None:
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while line := requests.readline():
        request: dict[str, Any] = json.loads(line)
        answer: dict[str, Any]
        if "spawn" in request:
            led, leads = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.setsid()  # a process group of its own, which the stack's signals reach whole
                os.close(leads)  # said: it leads its group, so a signal to the group reaches it
                return request["spawn"]  # type: ignore[no-any-return]
            os.close(leads)
            os.read(led, 1)  # its end of the pipe closed: it called setsid (else a killpg misses it)
            os.close(led)
            children.add(pid)
            answer = {"pid": pid}
        else:
            pid = request["poll"]
            answer = {"unknown": True}  # not forked here, or its end answered already
            if pid in children:
                ended, status = os.waitpid(pid, os.WNOHANG)
                answer = {"code": os.waitstatus_to_exitcode(status) if ended else None}
                if ended:
                    children.discard(pid)
        answers.write(json.dumps(answer).encode() + b"\n")
        answers.flush()
    return None


def _end(children: set[int]) -> None:
    """The test process is gone (or this one is ending): so are the endpoints it started."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # reaped here: gone before this process is


def become(spawn: Spawn) -> None:
    """In the child, leading a session of its own: take the request's output, directory and
    environment, then run its module as ``python -m`` would (its exit is the interpreter's)."""
    out = os.open(spawn["log"] or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the requests' pipes among them
    if spawn["cwd"] is not None:
        os.chdir(spawn["cwd"])
    os.environ.clear()
    os.environ.update(spawn["env"])
    sys.argv = [spawn["module"], *spawn["args"]]  # argv[0] becomes the module's file, as for `-m`
    if not sys.flags.safe_path:  # `-m` puts the working directory first, unless told not to
        sys.path[0] = os.getcwd()
    runpy.run_module(spawn["module"], run_name="__main__", alter_sys=True)


def _told_to_end(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds `serve`, which kills and reaps what it forked


def main() -> None:
    """Import what endpoints share, then serve; in a child, become its request's endpoint."""
    # However it is told to end, it ends what it forked first (SIGTERM would end it at once; SIGINT
    # may come ignored from a test runner's worker). A child gets back what a fresh one would have.
    interrupt = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGTERM, _told_to_end)
    signal.signal(signal.SIGINT, _told_to_end)
    for module in PRELOAD:
        with contextlib.suppress(ImportError):  # an extra not installed: a child imports it or not
            importlib.import_module(module)
    if (spawn := serve()) is not None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, interrupt)
        become(spawn)


if __name__ == "__main__":
    main()
