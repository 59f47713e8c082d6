"""Adding a kind of child makes the type checker name every place that must handle it.

Every dispatch on a command's kind is a `match` ending in `assert_never`, over the one union
`lash_restate.contract.Command`. This test adds a kind to that union in a copy of the package and
runs ``mypy --strict`` on the copy: each dispatch site must fail, and no other place.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lash_restate"

# Where a command's kind is dispatched: (module, function). A new kind is handled at each of these.
DISPATCH_SITES = {
    ("contract/_envelope.py", "describe_command"),
    ("memory/_store.py", "DurableWait.execute"),
    ("memory/_host.py", "MemoryHost._resolve"),
    ("engine/child/_routing.py", "Routing.routes"),
    ("engine/child/_child.py", "_execute"),
}

_UNION = "Command = ToolCall | Sleep | AwaitEvent | Call"
_EXTRA = '''class Extra(Child, msgspec.Struct, tag="extra", **_STRUCT):
    """A kind of child no dispatch handles yet."""

    n: int


Command = ToolCall | Sleep | AwaitEvent | Call | Extra'''


def _enclosing(path: Path, line: int) -> str:
    """The qualified name of the function around ``line`` of ``path``."""
    found = ""

    def visit(node: ast.AST, prefix: str) -> None:
        nonlocal found
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                end = child.end_lineno or child.lineno
                if child.lineno <= line <= end:
                    found = f"{prefix}{child.name}"
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text()), "")
    return found


def test_a_new_kind_of_child_fails_the_type_check_at_every_dispatch_site(tmp_path: Path) -> None:
    package = tmp_path / "lash_restate"
    shutil.copytree(SRC, package, ignore=shutil.ignore_patterns("__pycache__"))
    envelope = package / "contract" / "_envelope.py"
    text = envelope.read_text()
    assert text.count(_UNION) == 1, "the command union is spelled once, in contract/_envelope.py"
    envelope.write_text(text.replace(_UNION, _EXTRA))

    mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", "/dev/null"]
    checked = subprocess.run(
        [*mypy, "--ignore-missing-imports", "--python-version", "3.11", "lash_restate"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = re.findall(r"^lash_restate/(\S+?):(\d+): error: (.*)$", checked.stdout, re.M)
    assert errors, checked.stdout + checked.stderr
    sites = {(file, _enclosing(package / file, int(line))) for file, line, _ in errors}
    assert all('"assert_never"' in message for _, _, message in errors), checked.stdout
    assert sites == DISPATCH_SITES
