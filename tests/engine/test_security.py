"""Request identity: with identity keys configured, the endpoint serves only the Restate server that signs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from lash_restate.devstack import Endpoint, RestateServer, StackError, register_deployment
from tests.conformance.builders import Scope, combine, echo, ok

ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _b58(data: bytes) -> str:
    n, out = int.from_bytes(data, "big"), ""
    while n:
        n, r = divmod(n, 58)
        out = ALPHABET[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def keypair(folder: Path, name: str) -> tuple[Path, str]:
    """An ed25519 private key PEM for the server and its `publickeyv1_…` form for the endpoint."""
    pem = folder / f"{name}.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(pem)], check=True)
    der = subprocess.run(
        ["openssl", "pkey", "-in", str(pem), "-pubout", "-outform", "DER"], check=True, capture_output=True
    ).stdout
    return pem, "publickeyv1_" + _b58(der[-32:])


def _server(tmp: Path, name: str, pem: Path) -> RestateServer:
    base = tmp / name
    base.mkdir()
    return RestateServer(
        base_dir=base, extra_env={"RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE": str(pem)}
    )


def test_only_requests_signed_by_the_configured_key_are_served(tmp_path: Path) -> None:
    trusted_pem, trusted_key = keypair(tmp_path, "trusted")
    rogue_pem, _ = keypair(tmp_path, "rogue")
    endpoint = Endpoint(
        args=("--with-turn", "--identity-key", trusted_key), log_path=tmp_path / "endpoint.log"
    )
    trusted = _server(tmp_path, "trusted", trusted_pem)
    rogue = _server(tmp_path, "rogue", rogue_pem)
    try:
        endpoint.start()
        trusted.start()
        rogue.start()
        # An unsigned request straight to the endpoint is refused.
        unsigned = httpx.get(
            f"{endpoint.url}/discover", headers={"accept": "application/vnd.restate.endpointmanifest.v3+json"}
        )
        assert unsigned.status_code == 401
        # A server signing with another key cannot even discover it.
        with pytest.raises(StackError, match=r"401|nauthori"):
            register_deployment(rogue.admin_url, endpoint.url)
        # The trusted server registers it and runs a group through it.
        register_deployment(trusted.admin_url, endpoint.url)
        s = Scope()
        response = httpx.post(
            f"{trusted.ingress_url}/LashTurn/run",
            json={"steps": [combine("race", s.group([echo("signed")], wake="first"))]},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert ok(response.json()[0])["value"] == "signed"
    finally:
        endpoint.stop()
        trusted.remove()
        rogue.remove()
