"""A seeded slice of the mutation runs (`make mutation`, `make mutation-engine`) in `make test`.

The whole runs take an hour and days; this slice takes seconds. Each mutant below changes one line
of the library so that a clause breaks (a widening close accepted, a handle of another shape taken,
a settlement ranked below earlier ranks, a parked group taken for an orphan), and names the fast
tests (no server) that must then fail. A run applies a seeded sample of them, each to a copy of
`src/`, and runs those tests on the copy: a mutant the tests let live means they no longer pin the
clause. The seed is `$LASH_MUTATION_SEED` (default below); `LASH_MUTATION_SLICE=all` runs them all.

A mutant whose line is no longer in its file fails too, by name: edit it with the code it mutates.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEED = 20261203
SLICE = 2
FAST = "not restate"  # no server: each mutant's tests take seconds


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # under src/lash_restate
    line: str  # exactly once in the file
    mutated: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant(
        "a handle of another child count accepted",
        "contract/_handle.py",
        "    if recorded != claimed:",
        "    if recorded == claimed:",
        ("tests/contract",),
    ),
    Mutant(
        "a close that widens the disposition accepted",
        "contract/_policies.py",
        "    if not declared.narrows_to(effective):",
        "    if declared.narrows_to(effective):",
        ("tests/contract",),
    ),
    Mutant(
        "a settlement ranked below the ranks already read",
        "memory/_store.py",
        "        self.order.append(position)\n",
        "        self.order.insert(0, position)\n",
        ("tests/memory/test_host.py",),
    ),
    Mutant(
        "a group whose last opener returned normally taken as severed",
        "engine/wire/_records.py",
        " and self.openers[-1].failed\n",
        "\n",
        ("tests/engine/test_records.py",),
    ),
)


def _sample() -> list[Mutant]:
    if os.environ.get("LASH_MUTATION_SLICE") == "all":
        return list(MUTANTS)
    seed = int(os.environ.get("LASH_MUTATION_SEED") or SEED)
    return random.Random(seed).sample(MUTANTS, SLICE)


@pytest.mark.timeout(300)  # a nested run of the fast tests: 10-40 s idle, minutes on a busy machine
@pytest.mark.parametrize("mutant", _sample(), ids=lambda m: m.name.replace(" ", "-"))
def test_the_tests_kill_a_seeded_sample_of_mutants(mutant: Mutant, tmp_path: Path) -> None:
    tree = tmp_path / "src"
    shutil.copytree(ROOT / "src", tree, ignore=shutil.ignore_patterns("__pycache__"))
    target = tree / "lash_restate" / mutant.path
    source = target.read_text()
    assert source.count(mutant.line) == 1, f"{mutant.name}: its line is no longer in {mutant.path}"
    target.write_text(source.replace(mutant.line, mutant.mutated))
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"}
    where = [sys.executable, "-c", "import lash_restate; print(lash_restate.__file__)"]
    imported = subprocess.run(where, env=env, capture_output=True, text=True, check=True).stdout
    assert Path(imported.strip()).is_relative_to(tree), imported  # the copy is what the tests import
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *mutant.tests,
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not restate",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # 1: a test failed, as it must. 0: the mutant lived; anything else: the run itself broke.
    assert run.returncode == 1, f"{mutant.name}: pytest exited {run.returncode}\n{run.stdout[-3000:]}"
