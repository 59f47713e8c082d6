"""The documents cite tests by name; every cited test must exist, so the docs cannot drift from the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tests_by_file() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        tree = ast.parse(path.read_text())
        names = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        }
        found[str(path.relative_to(ROOT / "tests"))] = names
    return found


def test_every_test_cited_in_the_docs_exists() -> None:
    tests = _tests_by_file()
    all_names = set().union(*tests.values())
    cited = 0
    for doc in [
        "docs/conformance.md",
        "docs/hostile-inputs.md",
        "docs/decisions.md",
        "docs/compatibility.md",
        "README.md",
    ]:
        text = (ROOT / doc).read_text()
        for file, name in re.findall(r"`?([\w/]+\.py)?::(test_\w+)`?", text):
            cited += 1
            if file and file in tests:
                assert name in tests[file], f"{doc} cites {file}::{name}, which does not exist"
            else:
                assert name in all_names, f"{doc} cites {name}, which does not exist"
        for name in re.findall(r"`(test_\w+)`", text):
            cited += 1
            assert name in all_names, f"{doc} cites {name}, which does not exist"
    assert cited > 50


def test_every_normative_section_of_the_adr_has_rows() -> None:
    text = (ROOT / "docs/conformance.md").read_text()
    for heading in [
        "Decision",
        "Restate satisfaction",
        "The settlement obligation",
        "Wake policy is journaled identity",
        "finalize ordering",
        "lock order",
        "ungrouped effects stay hash-identical",
        "copies are made to agree by construction",
        "occurrence discriminator",
        "Loser disposition is declared at open",
        "Tier split",
    ]:
        assert heading.lower() in text.lower(), heading


_SOURCE = re.compile(r"`((?:contract|memory|engine|testing)/\w+\.py|\w+\.py)`((?: `[\w.]+`)?)")


def test_every_source_file_and_name_cited_in_the_docs_exists() -> None:
    """`engine/_group.py` `open` in a doc means that file defines that name (after a move, too)."""
    package = ROOT / "src/lash_restate"
    cited = 0
    for doc in ["docs/conformance.md", "docs/decisions.md", "README.md"]:
        for path, name in _SOURCE.findall((ROOT / doc).read_text()):
            if path.rsplit("/", 1)[-1].startswith("test_"):  # a test file, checked above
                continue
            source = package / path
            assert source.is_file(), f"{doc} cites {path}, which does not exist"
            cited += 1
            symbol = name.strip(" `").rsplit(".", 1)[-1]
            if symbol:
                text = source.read_text()
                assert re.search(rf"\b(def|class) {symbol}\b|^{symbol}\b", text, re.M), (
                    f"{doc} cites {symbol} in {path}, which does not define it"
                )
    assert cited > 20


def _cited_tests(cell: str) -> list[str]:
    """The test files a table cell cites, following `::name` shorthand back to the last file named."""
    files, current = [], None
    for file, _name in re.findall(r"`?([\w/]+\.py)?::(test_\w+)`?", cell):
        current = file or current
        if current:
            files.append(current)
    return files


def test_every_conformance_row_claims_only_the_tiers_its_tests_run_on() -> None:
    """A row claims a tier only if one of its cited tests runs there: conformance/ runs on every tier
    (M, R, RR, RB), engine/ on R, memory/ on M, contract/ on C."""
    runs_on = {"conformance": {"M", "R", "RR", "RB"}, "engine": {"R"}, "memory": {"M"}, "contract": {"C"}}
    checked = 0
    for line in (ROOT / "docs/conformance.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"[A-Z]+\d+", cells[0]):
            continue
        # "M (R: see R4)" claims M; "n/a" claims nothing.
        claimed = {m.group(1) for t in cells[4].split(",") if (m := re.match(r"\s*(RR|RB|R|M|C)\b", t))}
        proven: set[str] = set()
        for file in _cited_tests(cells[3]):
            proven |= runs_on.get(file.split("/", 1)[0], set())
        if "the whole suite" in cells[3] or "`tests/conformance/` test" in cells[3]:
            proven |= runs_on["conformance"]
        assert claimed <= proven, f"row {cells[0]} claims {sorted(claimed - proven)} without a test there"
        checked += 1
    assert checked > 40
