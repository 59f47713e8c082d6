"""The code the documentation site tells a user to run, run as a user's own project would run it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from lash_restate.testing.processes import restate_server_binary

ROOT = Path(__file__).resolve().parents[2]


def _blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}[^\n]*\n(.*?)^```", (ROOT / page).read_text(), re.S | re.M)


def test_the_testing_guides_test_passes_in_a_project_of_its_own(tmp_path: Path) -> None:
    """docs/guides/testing.md's configuration and test file, beside the tutorial's checkout.py, run by
    pytest from there: the plugin it loads serves checkout:app."""
    [config] = _blocks("docs/guides/testing.md", "toml")
    [test_file] = [block for block in _blocks("docs/guides/testing.md", "python") if "def test_" in block]
    shutil.copy(ROOT / "examples/checkout.py", tmp_path / "checkout.py")
    (tmp_path / "pyproject.toml").write_text(config)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_checkout.py").write_text(test_file)
    env = {**os.environ, "LASH_RESTATE_SERVER": str(restate_server_binary())}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\b2 passed\b", run.stdout), run.stdout
