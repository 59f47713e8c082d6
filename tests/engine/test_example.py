"""The README's example handler, served and invoked for real."""

from __future__ import annotations

from pathlib import Path

import httpx

from lash_restate.devstack import Endpoint, RestateServer, register_deployment


def test_the_readme_checkout_example_races_a_payment_against_its_deadline(tmp_path: Path) -> None:
    server = RestateServer(base_dir=tmp_path)
    endpoint = Endpoint(module="examples.checkout", args=(), log_path=tmp_path / "endpoint.log")
    try:
        server.start()
        endpoint.start()
        register_deployment(server.admin_url, endpoint.url)
        response = httpx.post(f"{server.ingress_url}/Checkout/pay", json={"id": 7, "amount": 42}, timeout=60)
        assert response.status_code == 200, response.text
        assert response.json() == {"result": {"charged": 42}}
    finally:
        endpoint.stop()
        server.remove()
