"""A seeded sample of the engine's mutants, and its score (``make mutation-engine SAMPLE=N``).

A whole engine run takes days here (each mutant starts the servers its tests need), so
``make mutation-engine SAMPLE=N`` judges ``N`` mutants drawn uniformly, with ``SEED``, from all
of them, and reports the detected fraction of the sample with its 95% Wilson interval: an
estimate of the whole run's score, as random mutant sampling gives.

``python -m tests.mutation.sample draw N SEED`` (in the tree ``engine_tree`` builds) makes the
mutants as ``mutmut run`` does, which it then finds made, and writes ``N`` of their names to
``mutants/sample.txt``.
``python -m tests.mutation.sample score`` reads the results of the names it drew, prints each one
not detected, and fails when fewer than 95% of the sample were detected (the whole run's bar).
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
from pathlib import Path

from mutmut.__main__ import collect_source_file_mutation_data, create_mutants
from mutmut.mutation.trampoline import set_mutant_under_test
from mutmut.stats import status_by_exit_code
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths

DRAWN = Path("mutants/sample.txt")
DETECTED = ("killed", "timeout")
FLOOR = 0.95


def draw(count: int, seed: int) -> list[str]:
    # The first steps of `mutmut run` (mutmut 3.8), so the names are the run's own.
    set_mutant_under_test("mutant_generation")
    Path("mutants").mkdir(exist_ok=True)
    with contextlib.redirect_stdout(sys.stderr):
        copy_src_dir()
        copy_also_copy_files()
        setup_source_paths()
        create_mutants(2)
    mutants, _ = collect_source_file_mutation_data(mutant_names=())
    names = sorted(name for _, name, _ in mutants)
    drawn = sorted(random.Random(seed).sample(names, min(count, len(names))))
    DRAWN.write_text("".join(f"{name}\n" for name in drawn))
    print(f"{len(drawn)} of {len(names)} mutants drawn (seed {seed})", file=sys.stderr)
    return drawn


def wilson(detected: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a detected fraction."""
    p = detected / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half


def score() -> bool:
    drawn = set(DRAWN.read_text().split())
    mutants, _ = collect_source_file_mutation_data(mutant_names=())
    status = {name: status_by_exit_code[code] for _, name, code in mutants if name in drawn}
    judged = {name: s for name, s in status.items() if s != "not checked"}
    detected = sum(s in DETECTED for s in judged.values())
    for name, s in sorted(judged.items()):
        if s not in DETECTED:
            print(f"{s}: {name}")
    if len(judged) < len(status):
        # mutmut runs the mutants whose tests take least time first: the rest are not a random sample.
        print(f"{len(status) - len(judged)} of the {len(status)} drawn are not judged yet (the slowest)")
    if not judged:
        return False
    low, high = wilson(detected, len(judged))
    print(
        f"{detected}/{len(judged)} of the sample detected ({100 * detected / len(judged):.1f}%; "
        f"95% interval {100 * low:.1f}% to {100 * high:.1f}%)"
    )
    return len(judged) == len(status) and detected >= FLOOR * len(judged)


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["draw", count, seed]:
            draw(int(count), int(seed))
        case ["score"]:
            sys.exit(0 if score() else 1)
        case _:
            sys.exit(__doc__)
