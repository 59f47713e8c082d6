"""The `lash-restate` command: serve the endpoint, register it, inspect open groups, run the dev stack.

Each command is a function of the module for its job: `_serve` (serve, register, dev), `_groups`
(the `groups` commands); `_parser` builds the command line, `_common` holds what they share.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from ._parser import build_parser
from ._serve import load_app, load_resolver

__all__ = ["build_parser", "load_app", "load_resolver", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
            return int(args.run(args))
        finally:
            if sys.stdout is not None:  # None when started with it closed (`>&-`)
                sys.stdout.flush()  # a reader gone (`| head`) is met here, not in the interpreter's exit
    except BrokenPipeError:
        # Quiet, as a command SIGPIPE ends: what is left to write goes nowhere (Python's own advice).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
