"""``python -m tests.mutation.engine_tree DIR``: the working tree of ``make mutation-engine``.

mutmut reads its configuration from ``pyproject.toml`` in the directory it runs in, and the engine
needs one of its own (other modules, the tests that start servers, longer timeouts). ``DIR`` gets
a copy of the sources, tests, docs, examples, ``restate.toml`` and ``package.json`` (a run takes
hours: a copy keeps it on the code it started with, whatever changes meanwhile), and this
repository's ``pyproject.toml`` with its ``[tool.mutmut]`` table replaced by
``tests/mutation/engine.toml``'s.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("src", "tests", "docs", "examples")
COPIED_FILES = ("restate.toml", "package.json")  # what tests/engine/test_cli.py reads


def build(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".mypy_cache")
        shutil.copytree(ROOT / name, target / name, ignore=ignore, dirs_exist_ok=True)
    for name in COPIED_FILES:
        shutil.copy2(ROOT / name, target / name)
    text = (ROOT / "pyproject.toml").read_text()
    start = text.index("[tool.mutmut]")
    end = text.index("\n[", start + 1) + 1
    engine = (Path(__file__).with_name("engine.toml")).read_text()
    (target / "pyproject.toml").write_text(text[:start] + engine + text[end:])


if __name__ == "__main__":
    build(Path(sys.argv[1]))
