"""docs/guides/conformance.md's test file, run by pytest in a project of its own: the reference host
through the suite's public entry point, as a host written outside this repository runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from lash_restate.testing.conformance import CHILD_KINDS, SCENARIOS

ROOT = Path(__file__).resolve().parents[2]


def test_the_conformance_guides_example_runs_every_scenario_on_the_reference_host(tmp_path: Path) -> None:
    blocks = re.findall(
        r"^```python[^\n]*\n(.*?)^```", (ROOT / "docs/guides/conformance.md").read_text(), re.S | re.M
    )
    [test_file] = [block for block in blocks if "def test_" in block]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_conformance.py").write_text(test_file)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(rf"\b{len(SCENARIOS) * len(CHILD_KINDS)} passed\b", run.stdout), run.stdout
