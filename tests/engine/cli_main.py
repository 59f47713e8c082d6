"""`lash-restate ARGS` through the CLI's `main(argv)` in this process: what the console script calls,
with its output and exit code, without an interpreter's start-up per call.

For what ends before anything is served or imported on the application's behalf (argument and
setting refusals, help, `register`, `groups`): `serve` that serves, `dev` and `--app` loading run the
command itself (tests/engine/test_cli.py), since they bind ports, take signals or choose this
process's service prefix for good.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Mapping
from unittest import mock

from lash_restate.cli import main


def run_main(argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``main(argv)`` with ``env`` set over this process's environment for the call."""
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, dict(env or {})),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(argv)
        except SystemExit as exit:  # argparse's usage errors and --help
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    return subprocess.CompletedProcess(["lash-restate", *argv], code, out.getvalue(), err.getvalue())
