"""What the commands share: how a refusal is printed, the version, the help texts every command's
flags share, and a table as the commands print one."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

__all__ = [
    "ADMIN_HELP",
    "PREFIX_HELP",
    "SERVE_PREFIX_HELP",
    "age",
    "fail",
    "import_attribute",
    "lash_version",
    "prefix_from_args",
    "table",
]

ADMIN_HELP = (
    "Restate admin API [RESTATE_ADMIN_URL, then LASH_ADMIN_URL; default http://127.0.0.1:9070]; "
    "a bearer token is read from RESTATE_AUTH_TOKEN"
)


def lash_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lash-restate")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


PREFIX_HELP = "the prefix of lash's service names, {prefix}Group, … (default Lash) [LASH_PREFIX]"
SERVE_PREFIX_HELP = (
    "the prefix of lash's service names, {prefix}Group, …; with --app, the prefix its lash.app(...) takes "
    "when it names none (default Lash) [LASH_PREFIX]"
)


# What `lash-restate` exits with (docs/reference/cli.md, "Exit codes"). 0 is success.
FAILED = 1  # Restate or the work itself failed: the admin API unreachable, a server that would not start
USAGE = 2  # the command line or the settings are wrong: nothing was done (argparse exits 2 too)
NOT_OPEN = 3  # `groups show` of a key that is no open group
REFUSED = 4  # refused, and nothing done: a prefix another application serves, a close needing --force
NOT_SAFE = 5  # `rollback-check`: something still stands in the way of a rollback (listed on standard output)
STRANDED = (
    6  # `groups stranded --check`: something waits for what nothing will answer (listed, not sent again)
)


def fail(message: str, code: int = FAILED) -> int:
    print(f"lash-restate: {message}", file=sys.stderr)
    return code


def import_attribute(module_name: str) -> Any:
    """Import a module the user named, finding it in the current directory first, as hypercorn and
    uvicorn do (the installed ``lash-restate`` command has its own directory on the path, not it)."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(module_name)


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in columns}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in columns)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def age(seconds: int | None) -> str:
    """``3d4h``, ``5m12s``: how long a group has been open, to the two largest units."""
    if seconds is None:
        return "-"
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts[:2])


def prefix_from_args(args: argparse.Namespace) -> int | None:
    """Inspect lash's services under ``--prefix`` (decision 40); a bad prefix is one clear line."""
    from ..engine import use_prefix

    try:
        use_prefix(args.prefix)
    except ValueError as exc:
        return fail(str(exc), USAGE)
    return None
