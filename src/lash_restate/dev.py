"""``lash-restate dev``: the local stack with a demo race."""

from __future__ import annotations


def run_dev(*, once: bool) -> int:
    raise NotImplementedError
