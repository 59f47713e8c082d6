"""The README's example handler, served and invoked for real."""

from __future__ import annotations

from pathlib import Path

from lash_restate.testing import LocalStack


async def test_the_readme_checkout_example_races_a_payment_against_its_deadline(tmp_path: Path) -> None:
    with LocalStack.single(tmp_path, module="examples.checkout", endpoint_args=()).start() as stack:
        answer = await stack.call("Checkout/pay", {"id": 7, "amount": 42})
        assert answer == {"result": {"charged": 42}}
