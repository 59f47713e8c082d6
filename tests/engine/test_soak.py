"""A seeded slice of the soak (`make soak`, `tests/engine/soak.py`) in `make test`: the same code,
under a minute, with one fault.

The whole soak runs for half an hour with a fault a minute; this slice runs its workers, its faulter
and its final drain for 24 s on one server, with one fault drawn from the soak's own (a SIGKILL of
the server, or a pause of the server or of the endpoint), so a change that breaks the soak's
machinery, or what it checks after a fault, fails here first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.soak import soak, soak_stack

pytestmark = [pytest.mark.restate, pytest.mark.slow, pytest.mark.timeout(600)]

SEED = 20261203


async def test_a_seeded_slice_of_the_soak_ends_clean(tmp_path: Path) -> None:
    """24 s of the soak's mixed groups on two workers, one fault landed mid-way, then the drain: no
    group diverged from the reference, none failed, and nothing of lash's is left on the server."""
    with soak_stack(1, tmp_path) as fs:
        report = await soak(
            fs, minutes=0.4, workers=2, seed=SEED, nodes=1, fault_every=10, wide_children=0, quiet_s=10
        )
    assert report["combines"] > 0, report
    assert len(report["faults"]) == 1, report["faults"]
    assert report["divergences"] == 0, report["divergence_details"]
    assert report["errors"] == 0, report["error_details"]
    assert not any(report["left"].values()), report["left"]
