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


TIERS = {"M", "R", "RR", "RB", "V7", "C"}  # docs/conformance.md's tier letters

# Where each directory's tests run: conformance/ through the `tier` fixture on every tier, engine/ on
# one Restate stack (R), memory/ and the front door on the reference host, contract/ on no host.
RUNS_ON = {
    "conformance": {"M", "R", "RR", "RB", "V7"},
    "engine": {"R"},
    "memory": {"M"},
    "contract": {"C"},
    "test_front_door.py": {"M"},
}

_CITATION = re.compile(r"`([\w/]+\.py)?::(test_\w+)|`([\w/]+/test_\w+\.py)`")


def _conformance_rows() -> list[tuple[str, str, str]]:
    """Every table row of docs/conformance.md as (label, proved-by cell, tiers cell).

    A cell's `::name` shorthand names a test of the last file cited before it in the same table, in
    that row or an earlier one (as the combinator table writes it).
    """
    rows, current = [], None
    for line in (ROOT / "docs/conformance.md").read_text().splitlines():
        if not line.startswith("|"):
            current = None  # a new table
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= {"-", " "} or cells[-1] in ("tiers", "tier"):
            continue  # a header or its rule
        files = []
        for file, name, bare in _CITATION.findall(cells[-2]):
            if bare:
                files.append(bare)
            elif name:
                current = file or current
                if current:
                    files.append(current)
        rows.append((cells[0], " ".join(files) + " " + cells[-2], cells[-1]))
    return rows


def _proven(cell: str) -> set[str]:
    """The tiers that the tests a proved-by cell cites run on."""
    proven: set[str] = set()
    for file in re.findall(r"(?:^|\s)([\w/]+\.py)(?=\s)", cell):
        proven |= RUNS_ON.get(file.split("/", 1)[0], set())
    if "the whole suite" in cell or "`tests/conformance/` test" in cell:
        proven |= RUNS_ON["conformance"]
    return proven


def test_every_conformance_row_uses_only_known_tier_letters() -> None:
    """A tiers cell is a list of tier letters (or `n/a`), then perhaps a note in brackets; any
    capitalised word in it is a tier letter, a row's number, or SQL (the ADR's tier we do not have)."""
    rows = _conformance_rows()
    ids = {label for label, _, _ in rows if re.fullmatch(r"[A-Z]+\d+", label)}
    for label, _, tiers in rows:
        head = tiers.split("(", 1)[0].strip()
        listed = [t.strip() for t in head.split(",")]
        assert head == "n/a" or set(listed) <= TIERS, f"row {label!r}: tiers {tiers!r} lists an unknown tier"
        for word in re.findall(r"\b[A-Z][A-Z0-9]*\b", tiers):
            assert word in TIERS | ids | {"SQL"}, f"row {label!r}: {word!r} in its tiers is not a tier letter"
    assert len(rows) > 60


def test_every_conformance_row_claims_only_the_tiers_its_tests_run_on() -> None:
    """A row claims a tier (anywhere in its tiers cell, notes included) only if one of its cited tests
    runs there: a row citing only engine/ tests claims no M; one claiming M cites a conformance/,
    memory/ or front-door test; one claiming C a contract/ test."""
    checked = 0
    for label, cited, tiers in _conformance_rows():
        claimed = set(re.findall(r"\b[A-Z][A-Z0-9]*\b", tiers)) & TIERS
        proven = _proven(cited)
        assert claimed <= proven, f"row {label!r} claims {sorted(claimed - proven)} without a test there"
        checked += 1
    assert checked > 60


def test_the_tier_letters_are_the_ones_the_conformance_suite_runs_on() -> None:
    """docs/conformance.md's tiers for conformance/ are the `tier` fixture's, one for one."""
    from tests.conftest import TIERS as FIXTURE_TIERS

    letters = {
        "memory": "M",
        "restate": "R",
        "restate-replay": "RR",
        "restate-batched": "RB",
        "restate-v7": "V7",
    }
    assert {letters[t] for t in FIXTURE_TIERS} == RUNS_ON["conformance"]
    assert len(FIXTURE_TIERS) == len(RUNS_ON["conformance"])
