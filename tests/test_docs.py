"""The documents cite tests by name; every cited test must exist, so the docs cannot drift from the code."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

from restate.discovery import compute_discovery_json
from restate.endpoint import Endpoint

from lash_restate.engine import lash_services
from lash_restate.testing import demo_tools

ROOT = Path(__file__).resolve().parents[1]

# The site's pages (mkdocs.yml: docs_dir = docs) and the README, which links into them.
PAGES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))
DOCS = ["README.md", *PAGES]
# What a user of the wheel reads: every page but the decision log and the ADR, which are the
# engineering record the others link to.
USER_PAGES = [
    "README.md",
    "CHANGELOG.md",
    *(p for p in PAGES if p != "docs/decisions.md" and not p.startswith("docs/adr/")),
]


def _tests_by_file() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    # The suite's own tests by their path under tests/, an application's example tests by theirs.
    for path in [*(ROOT / "tests").rglob("test_*.py"), *(ROOT / "examples").rglob("test_*.py")]:
        tree = ast.parse(path.read_text())
        names = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        }
        if "pytest_tests(" in path.read_text():  # tests built from the conformance suite's scenarios
            module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
            names |= {name for name in vars(module) if name.startswith("test_")}
        under = ROOT / "tests" if path.is_relative_to(ROOT / "tests") else ROOT
        found[str(path.relative_to(under))] = names
    return found


def test_every_test_cited_in_the_docs_exists() -> None:
    tests = _tests_by_file()
    all_names = set().union(*tests.values())
    cited = 0
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        # A `::name` shorthand names a test of the last file cited before it in the same paragraph
        # (or table row), so it is looked for there.
        for block in re.split(r"\n\s*\n|\n(?=\|)", text):
            last = None
            for file, name in re.findall(r"`?([\w/]+\.py)?::(test_\w+)`?", block):
                cited += 1
                file = file or last
                last = file
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


# Files the tutorial and the guides have the reader write in their own project, not this package's.
_READERS_FILES = {"checkout.py", "conftest.py"}
_SOURCE = re.compile(
    r"`((?:contract|memory|engine(?:/\w+)?|inspection|testing(?:/conformance)?)/\w+\.py|\w+\.py)`"
    r"((?: `[\w.]+`)?)"
)


def test_every_source_file_and_name_cited_in_the_docs_exists() -> None:
    """`engine/group/_group.py` `open` in a doc means that file defines that name (after a move, too)."""
    package = ROOT / "src/lash_restate"
    cited = 0
    for doc in DOCS:
        for path, name in _SOURCE.findall((ROOT / doc).read_text()):
            if path.rsplit("/", 1)[-1].startswith("test_"):  # a test file, checked above
                continue
            if path in _READERS_FILES:
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


# --- User-facing text cites no decision numbers: a user of the wheel cannot open the decision log by
# number (the site's pages link to its entries instead; code comments may cite them).

_DECISION_NUMBER = re.compile(r"\bdecisions?\s+\d+", re.I)

_PUBLIC_MODULES = [
    "lash_restate",
    "lash_restate.contract",
    "lash_restate.testing",
    "lash_restate.testing.conformance",
]
# lash_restate's attributes that stay out of __all__ (a star import must not shadow the builtins).
_NOT_STAR_EXPORTED = {"lash_restate": ["all", "any", "open"]}


def test_no_user_page_cites_a_decision_number() -> None:
    for page in USER_PAGES:
        for number, line in enumerate((ROOT / page).read_text().splitlines(), start=1):
            found = _DECISION_NUMBER.search(line)
            assert found is None, f"{page}:{number} cites {found.group(0)!r}: link the decision log instead"
    assert "README.md" in USER_PAGES and "docs/tutorial.md" in USER_PAGES
    assert "docs/decisions.md" not in USER_PAGES


def _public_docstrings() -> dict[str, str]:
    """Every docstring a user of the public modules reads: each module's, each name of its `__all__`
    (and the attributes kept out of it), and the public members a public class defines or inherits
    from lash's own classes."""
    found: dict[str, str] = {}

    def add(name: str, obj: object) -> None:
        doc = inspect.getdoc(obj) if getattr(obj, "__doc__", None) else None
        if doc:
            found.setdefault(name, doc)

    for module_name in _PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        add(module_name, module)
        for name in [*module.__all__, *_NOT_STAR_EXPORTED.get(module_name, [])]:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue  # a constant's docstring is its type's
            add(f"{module_name}.{name}", obj)
            if not inspect.isclass(obj):
                continue
            for klass in obj.__mro__:
                if not klass.__module__.startswith("lash_restate"):
                    continue
                for member_name, member in vars(klass).items():
                    if member_name.startswith("_") and member_name != "__init__":
                        continue
                    if isinstance(member, staticmethod | classmethod):
                        member = member.__func__
                    if isinstance(member, property) or inspect.isroutine(member) or inspect.isclass(member):
                        add(f"{module_name}.{name}.{member_name}", member)
    return found


def test_no_public_docstring_cites_a_decision_number() -> None:
    docstrings = _public_docstrings()
    citing = {name for name, doc in docstrings.items() if _DECISION_NUMBER.search(doc)}
    assert not citing, f"public docstrings citing a decision number: {sorted(citing)}"
    assert len(docstrings) > 200  # the walk reaches the members, not only the names


def _runtime_strings(path: Path) -> list[str]:
    """The string literals of a module that are not docstrings: messages, help texts, log events."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_runtime_message_cites_a_decision_number() -> None:
    citing = set()
    checked = 0
    for path in sorted((ROOT / "src/lash_restate").rglob("*.py")):
        for text in _runtime_strings(path):
            checked += 1
            if _DECISION_NUMBER.search(text):
                citing.add(f"{path.relative_to(ROOT)}: {text[:40]}")
    assert not citing, f"runtime strings citing a decision number: {sorted(citing)}"
    assert checked > 500


def test_no_command_help_cites_a_decision_number() -> None:
    """`lash-restate --help` and every subcommand's help, as argparse prints them."""
    import argparse

    from lash_restate.cli import build_parser

    helps, parsers = [], [build_parser()]
    while parsers:
        parser = parsers.pop()
        helps.append(parser.format_help())
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    for text in helps:
        found = _DECISION_NUMBER.search(text)
        assert found is None, f"{found.group(0)!r} in:\n{text}"
    assert len(helps) >= 8  # the command, serve, register, groups and its three, dev


def test_the_decision_number_pattern_catches_each_form() -> None:
    for text in [
        "(decision 40)",
        "Decision 45: once",
        "decisions 12 and 13",
        "DECISIONS 37\u201340",
        "decision\n33",
    ]:
        assert _DECISION_NUMBER.search(text), text
    for text in ["the decision log", "decisions.md#33-serve", "## Decision: the capability"]:
        assert not _DECISION_NUMBER.search(text), text


# --- The site.


def test_the_front_door_reference_documents_every_public_name() -> None:
    """docs/reference/front-door.md renders each name of `lash_restate` by hand, grouped: none missing."""
    import lash_restate

    page = (ROOT / "docs/reference/front-door.md").read_text()
    rendered = re.findall(r"^::: lash_restate\.(\w+)$", page, re.M)
    assert len(rendered) == len(set(rendered)), "a name is rendered twice"
    public = {*lash_restate.__all__, *_NOT_STAR_EXPORTED["lash_restate"]}
    assert set(rendered) == public, (
        f"missing {sorted(public - set(rendered))}, unknown {sorted(set(rendered) - public)}"
    )


def test_every_page_is_in_the_site_nav() -> None:
    """mkdocs.yml's nav lists every page under docs/ (the strict build warns too; this says which)."""
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    listed = set(re.findall(r":\s*(\S+\.md)\s*$", nav, re.M))
    assert listed == {p.removeprefix("docs/") for p in PAGES}


def test_the_readme_example_builds_its_app() -> None:
    """The README's example is whole: run as a module of its own, it assembles its app."""
    [example] = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    assert len(example.strip().splitlines()) <= 15
    check = example + "\nassert callable(app)\n"
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr


_LATEST_FULL_RUN = re.compile(r"^## Full run on the merged code.*?^```\n(.*?)^```", re.S | re.M)
# Each cost the README and the home page state, and its row in the latest full run of docs/performance.md.
_COSTS = {
    "race, 2 arms": r"a two-arm race about {range} native latency",
    "all, N=100": r"`all` over 100 children about {range},",
    "all, N=1000": r"over 1000 children {range} \(",
    "50 concurrent races (races/s)": r"50 concurrent races {range} native throughput",
    "call race, 2 thin calls": r"a race of two calls about {range} native",
    "call all, N=30": r"`all` over 30 calls about {range} native",
    "call all, N=1000": r"`all` over 1000 calls {range} \(",
    "50 concurrent call races (races/s)": r"50 concurrent call races {range} native throughput",
}


def test_the_cost_figures_are_those_of_the_latest_full_run() -> None:
    """The "What it costs" line rounds each ratio of docs/performance.md's latest full run, both servers
    (the protocol-v7 server's table, call scenarios only, is reported there, not quoted)."""
    [run] = _LATEST_FULL_RUN.findall((ROOT / "docs/performance.md").read_text())
    # One table per server ("hypercorn: group path vs native, …"), then the servers side by side.
    run = "\n\n".join(
        table
        for table in run.split("\n\n")
        if table.startswith(("hypercorn:", "granian:")) and "group path vs native" in table.split("\n")[0]
    )
    for page in ["README.md", "docs/index.md"]:
        text = " ".join((ROOT / page).read_text().split())
        for row, phrase in _COSTS.items():
            measured = [float(r) for r in re.findall(rf"^{re.escape(row)}\s.*?([\d.]+)x$", run, re.M)]
            assert len(measured) == 2, (row, measured)  # hypercorn's and granian's
            stated = re.search(phrase.format(range=r"([\d.]+)(?:\u2013([\d.]+))?x"), text)
            assert stated, f"{page} states no cost for {row!r}"
            low, high = float(stated.group(1)), float(stated.group(2) or stated.group(1))
            for ratio in measured:
                assert low <= round(ratio, 1) <= high, (
                    f"{page}: {row} measured {ratio}x, stated {low} to {high}x"
                )


def test_the_decision_log_is_numbered_without_gaps() -> None:
    """Decisions are numbered 1, 2, … in order, each once (a link to one names its number)."""
    numbers = [int(n) for n in re.findall(r"^## (\d+)\. ", (ROOT / "docs/decisions.md").read_text(), re.M)]
    assert numbers == list(range(1, len(numbers) + 1))


def test_the_operate_guide_names_every_event_lash_logs_and_only_those() -> None:
    """Every event name a log line carries (`logs.event("…")`, or a warning's ``extra={"event": …}``)
    is in the operate guide, and every name its events table lists is logged somewhere."""
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "lash_restate").rglob("*.py"))
    logged = set(re.findall(r'logs\.event\(\s*"([a-z_.]+)"', source))
    logged |= set(re.findall(r'extra=\{"event": "([a-z_.]+)"\}', source))
    guide = (ROOT / "docs" / "guides" / "operate.md").read_text()
    tabled = set(
        re.findall(r"^\| `([a-z_]+\.[a-z_.]+)` \| (?!counter|histogram|up-down)", guide, re.MULTILINE)
    )
    assert len(logged) > 15  # the patterns still find the calls
    assert {name for name in logged if f"`{name}`" not in guide} == set()
    assert tabled - logged == set()


def test_the_pages_that_show_an_example_show_it_whole_and_as_it_is() -> None:
    """The tutorial and the resume guide show their example's code in the page itself (a reader of
    the Markdown, on GitHub say, sees it too), and it is the example the tests run, line for line."""
    for page, example in (
        ("docs/tutorial.md", "examples/checkout.py"),
        ("docs/guides/resume.md", "examples/resume.py"),
    ):
        code = (ROOT / example).read_text()
        assert f"```python\n{code}```\n" in (ROOT / page).read_text(), (
            f"{page} does not show {example} as it is"
        )


def test_what_restates_ui_shows_of_lashs_services_cites_no_decision_number() -> None:
    """Each handler's description and each message's schema, as lash's services publish them to
    Restate (its UI shows them to an operator), explain themselves without a decision number, as
    every user-facing text does; the code beside them cites the decisions."""
    endpoint = Endpoint()  # type: ignore[no-untyped-call]  # unannotated in the SDK
    for service in lash_services(demo_tools()):
        endpoint.bind(service)
    published = compute_discovery_json(endpoint, 4, "bidi")
    cited = sorted({m.group(0) for m in re.finditer(r".{40}\b[Dd]ecisions? \d+", published)})
    assert cited == [], cited


def test_a_listing_the_docs_show_has_the_columns_groups_list_prints() -> None:
    """A page that shows `groups list`'s table shows its header as the command prints it (the
    tutorial's had lost a column the listing gained)."""
    from lash_restate.cli._groups import COLUMNS

    header = [c.upper() for c in COLUMNS]
    shown = [
        (page, line.split())
        for page in DOCS
        for line in (ROOT / page).read_text().splitlines()
        if line.startswith("GROUP_KEY ")
    ]
    assert shown, "no page shows a listing: this test guards nothing"
    assert all(columns == header for _, columns in shown), [p for p, c in shown if c != header]
