"""The suite's own selection: ``pytest -m "not restate"`` runs what a machine without a server can."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_not_restate_leaves_out_every_test_that_starts_a_server() -> None:
    modules = ["tests/conformance/test_combinators.py", "tests/engine/test_wide.py"]
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    listed = subprocess.run(
        [*collect, "-m", "not restate", *modules], capture_output=True, text=True, cwd=ROOT, check=False
    )
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert ids, listed.stdout + listed.stderr
    assert all("[memory" in test_id for test_id in ids)  # the reference host's tier only
    assert not [test_id for test_id in ids if "test_wide" in test_id]  # each starts a stack
