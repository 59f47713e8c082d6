"""The test process's side of an engine mutation run (`make mutation-engine`, docs/mutation.md).

mutmut imports the mutated copy of ``lash_restate`` in the test process only. The endpoints a test
starts must import it too (``PYTHONPATH``), and under mutmut's ``stats`` run the functions they reach
must be credited to the test that reached them (`endpoint/sitecustomize.py` writes them down, this
reads them at the test's teardown). Outside a mutation run (no ``MUTANT_UNDER_TEST``) nothing here
does anything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from pathlib import Path
from types import FrameType

__all__ = ["credit_hits", "mark_test_start", "setup_environment"]

_SITE = Path(__file__).with_name("endpoint")
_offset = 0


def setup_environment() -> None:
    """Give the processes tests start the mutated code and, under ``stats``, where to write hits."""
    mutant = os.environ.get("MUTANT_UNDER_TEST")
    if not mutant:
        return
    signal.signal(signal.SIGXCPU, _end_children_then_die)
    import lash_restate
    from lash_restate.testing.processes import FORK_ENV

    mutated = str(Path(lash_restate.__file__).resolve().parents[1])  # mutmut's copy: mutants/src
    known = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([mutated, str(_SITE), *known]))
    # Spawned, not forked: the endpoints' `sitecustomize` opens its hits file as an interpreter starts.
    os.environ[FORK_ENV] = "0"
    if mutant == "stats" and "LASH_MUTMUT_HITS" not in os.environ:
        folder = Path(tempfile.mkdtemp(prefix="lash-mutmut-"))
        os.environ["LASH_MUTMUT_HITS"] = str(folder / "hits")
        os.environ["LASH_MUTMUT_EPOCH"] = str(folder / "epoch")


def mark_test_start() -> None:
    """A test starts: the endpoints write each function they reach once more."""
    epoch = os.environ.get("LASH_MUTMUT_EPOCH")
    if os.environ.get("MUTANT_UNDER_TEST") == "stats" and epoch:
        Path(epoch).touch()


def credit_hits() -> None:
    """A test ends: what the endpoints reached since it started counts as reached by it."""
    global _offset
    hits = os.environ.get("LASH_MUTMUT_HITS")
    if os.environ.get("MUTANT_UNDER_TEST") != "stats" or not hits or not Path(hits).exists():
        return
    from mutmut.state import state

    with open(hits, encoding="utf-8") as f:
        f.seek(_offset)
        text = f.read()
    complete = text[: text.rfind("\n") + 1]  # a line still being written is read next time
    _offset += len(complete.encode())
    state()._stats.update(line for line in complete.splitlines() if line)


def _end_children_then_die(signum: int, frame: FrameType | None) -> None:
    """mutmut ends a mutant whose tests hang with SIGXCPU: first end the servers and endpoints they
    started (they would outlive it, by their pids), then die of the signal, as mutmut expects."""
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGXCPU)


def _descendants(root: int) -> list[int]:
    """Every process under ``root``, from /proc (Linux, where the mutation run runs)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid, _, rest = stat.read_text().partition(" (")
            children.setdefault(int(rest.rsplit(") ", 1)[1].split()[1]), []).append(int(pid))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
