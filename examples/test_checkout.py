"""The checkout example, tested as an application tests its own handlers: lash's pytest plugin
(``-p lash_restate.testing.pytest``) serves ``examples.checkout:app`` in a subprocess against a real
restate-server, and each test talks to it through Restate's ingress."""

from __future__ import annotations

import time

import httpx
import pytest

from lash_restate.testing import LocalStack

pytestmark = pytest.mark.lash_app("examples.checkout:app")


def test_a_payment_in_time_is_charged(lash_ingress: httpx.Client) -> None:
    answer = lash_ingress.post("/Checkout/pay", json={"id": 1, "amount": 42})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "paid", "charged": 42}


def test_a_payment_the_provider_refuses_is_declined_with_its_status_and_message(
    lash_ingress: httpx.Client,
) -> None:
    answer = lash_ingress.post("/Checkout/pay", json={"id": 4, "amount": 0})
    assert answer.json() == {"status": "declined", "code": 422, "reason": "cannot charge 0"}


def test_a_payment_slower_than_its_deadline_times_out(lash_ingress: httpx.Client) -> None:
    answer = lash_ingress.post("/Checkout/pay", json={"id": 2, "amount": 5, "slow": True, "deadline_s": 1})
    assert answer.json() == {"status": "timed out"}


def test_a_checkout_whose_endpoint_is_killed_mid_race_gives_the_same_answer(
    lash_stack: LocalStack, lash_ingress: httpx.Client
) -> None:
    """Start a checkout, SIGKILL the endpoint once its race runs, serve it again: Restate replays the
    checkout, which finds its race where it was, and the deadline still wins."""
    order = {"id": 3, "amount": 5, "slow": True, "deadline_s": 2}
    invocation = lash_ingress.post("/Checkout/pay/send", json=order).json()["invocationId"]
    # The race is under way once its group's open and its timer run: both are keyed under the
    # checkout's invocation id (the payment, a call child, is an invocation of `Payments` itself).
    running = f"SELECT id FROM sys_invocation WHERE target_service_key LIKE '{invocation}:%'"
    deadline = time.monotonic() + 30
    while len(lash_stack.sql(running)) < 2:
        assert time.monotonic() < deadline, "the checkout's race never started"
        time.sleep(0.05)

    lash_stack.restart_endpoint()

    answer = lash_ingress.get(f"/restate/invocation/{invocation}/attach")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "timed out"}
