"""The operator surface as a newcomer meets it: `lash-restate dev --once` on real processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_dev_once_runs_the_stack_and_a_demo_race_then_cleans_up(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "restate.toml").write_text((repo / "restate.toml").read_text())
    run = subprocess.run(
        [sys.executable, "-m", "lash_restate", "dev", "--once"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "registered deployment" in out
    # Which arm wins depends on the arms' delays, so the test checks the shape, not the timing.
    ranks = re.findall(r"rank (\d): arm (\d)", out)
    assert [r for r, _ in ranks] == ["1", "2", "3"]
    assert sorted(arm for _, arm in ranks) == ["0", "1", "2"]
    assert f"winner: arm {ranks[0][1]} (" in out
    assert "stopped restate-server and the endpoint" in out
    assert (tmp_path / ".lash").is_dir()
