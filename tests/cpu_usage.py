"""Opt-in pytest plugin: the CPU each test cost, its own and its servers' and endpoints'.

``pytest -p tests.cpu_usage`` (with or without ``-n``) appends one line per test to
``$LASH_CPU_USAGE`` (default ``cpu-usage.tsv``): CPU seconds, wall seconds, test id, the xdist
worker that ran it and when it started (seconds since the epoch), which show how the workers' loads
ended (a worker idle while another runs a slow test is a tail to cut). A test's CPU
is what the worker process and every process under it (the servers and endpoints the test or a
session fixture started) spent from the test's start to its end, so a stack's idle time lands on
whichever test was running. docs/test-suite.md says what it found.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

_TICKS = os.sysconf("SC_CLK_TCK")
_started: dict[str, tuple[float, float]] = {}


def _tree_cpu() -> float:
    """CPU seconds of this process and every live process under it, each with the children it reaped."""
    parent_of: dict[int, int] = {}
    spent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # ended while we looked
            continue
        fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        pid = int(entry)
        parent_of[pid] = int(fields[1])
        utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
        # What each reaped counts too: an endpoint forked by the test kit's fork server is its child.
        spent[pid] = utime + stime + cutime + cstime
    children: dict[int, list[int]] = {}
    for pid, parent in parent_of.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += spent.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / _TICKS


_controller = False  # pytest-xdist's controller hears every worker's test start and end: not counted there


def pytest_configure(config: pytest.Config) -> None:
    global _controller
    _controller = bool(config.getoption("numprocesses", None)) and "PYTEST_XDIST_WORKER" not in os.environ


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if not _controller:
        _started[nodeid] = (_tree_cpu(), time.monotonic())


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if _controller:
        return
    cpu, wall = _started.pop(nodeid)
    begun = time.time() - (time.monotonic() - wall)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
    line = f"{_tree_cpu() - cpu:.2f}\t{time.monotonic() - wall:.2f}\t{nodeid}\t{worker}\t{begun:.1f}\n"
    with Path(os.environ.get("LASH_CPU_USAGE", "cpu-usage.tsv")).open("a") as out:
        out.write(line)
