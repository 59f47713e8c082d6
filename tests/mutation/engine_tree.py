"""``python -m tests.mutation.engine_tree DIR``: the working tree of ``make mutation-engine``.

mutmut reads its configuration from ``pyproject.toml`` in the directory it runs in, and the engine
needs one of its own (other modules, the tests that start servers, longer timeouts). ``DIR`` gets
links to the sources, tests and docs, and this repository's ``pyproject.toml`` with its
``[tool.mutmut]`` table replaced by ``tests/mutation/engine.toml``'s.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINKED = ("src", "tests", "docs", "examples")


def build(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link = target / name
        if not link.is_symlink():
            link.symlink_to(ROOT / name, target_is_directory=True)
    text = (ROOT / "pyproject.toml").read_text()
    start = text.index("[tool.mutmut]")
    end = text.index("\n[", start + 1) + 1
    engine = (Path(__file__).with_name("engine.toml")).read_text()
    (target / "pyproject.toml").write_text(text[:start] + engine + text[end:])


if __name__ == "__main__":
    build(Path(sys.argv[1]))
