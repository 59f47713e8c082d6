"""Add the bytes of samples that have no fixture yet to `format1.json`; never rewrite one.

Run from the repository root, on the code of the release whose format is being frozen:
``python -m tests.formats.make_fixtures``. An existing fixture is the format as it was written:
if today's code writes it differently, that is a format change (docs/compatibility.md), not a fixture
to refresh.
"""

from __future__ import annotations

import json
from pathlib import Path

from .samples import SAMPLES

FIXTURES = Path(__file__).with_name("format1.json")


def main() -> None:
    fixtures: dict[str, str] = json.loads(FIXTURES.read_text()) if FIXTURES.exists() else {}
    added = [name for name in SAMPLES if name not in fixtures]
    for name in added:
        fixtures[name] = SAMPLES[name].encode(SAMPLES[name].value).decode()
    FIXTURES.write_text(json.dumps(fixtures, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(added)} fixtures added, {len(fixtures)} in all")


if __name__ == "__main__":
    main()
