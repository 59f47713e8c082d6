"""Request identity: with identity keys configured, the endpoint serves only the Restate server that signs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from lash_restate._http import tls
from lash_restate.testing import LocalStack, StackError
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


async def test_only_requests_signed_by_the_configured_key_are_served(tmp_path: Path) -> None:
    trusted_pem, trusted_key = keypair(tmp_path, "trusted")
    rogue_pem, _ = keypair(tmp_path, "rogue")
    stack = LocalStack(tmp_path)
    trusted = stack.add_server("trusted", signing_key=trusted_pem)
    rogue = stack.add_server("rogue", signing_key=rogue_pem)
    endpoint = stack.add_endpoint(identity_keys=[trusted_key])
    with stack.start(register=False):
        # An unsigned request straight to the endpoint is refused.
        async with httpx.AsyncClient(verify=tls()) as client:
            unsigned = await client.get(
                f"{endpoint.url}/discover",
                headers={"accept": "application/vnd.restate.endpointmanifest.v3+json"},
            )
        assert unsigned.status_code == 401
        # A server signing with another key cannot even discover it.
        with pytest.raises(StackError, match=r"401|nauthori"):
            stack.register(at=[rogue])
        # The trusted server registers it and runs a group through it.
        stack.register(at=[trusted])
        s = Scope()
        [result] = await stack.turn(combine("race", s.group([echo("signed")], wake="first")))
        assert ok(result)["value"] == "signed"
    # The server names the key it signs with in its log, as the operate guide tells an operator to
    # read it: the endpoint's `publickeyv1_` form, which `keypair` derives from the PEM.
    assert trusted.log_path is not None
    log = trusted.log_path.read_text().splitlines()
    logged = [line for line in log if "Loaded request identity key" in line]
    assert logged and trusted_key in logged[0], logged[:1]


async def test_an_app_served_with_its_key_on_the_command_line_serves_only_signed_requests(
    tmp_path: Path,
) -> None:
    """`lash-restate serve --app … --identity-key K` (the Kubernetes manifest's LASH_APP and
    LASH_IDENTITY_KEYS) of an app `lash.app(...)` built naming no key of its own: the app verifies K,
    where it served every request unsigned."""
    trusted_pem, trusted_key = keypair(tmp_path, "trusted")
    stack = LocalStack(tmp_path)
    stack.add_server("trusted", signing_key=trusted_pem)
    endpoint = stack.add_endpoint(app="examples.checkout:app", identity_keys=[trusted_key])
    with stack.start():  # registered: the server that signs with K discovers it
        async with httpx.AsyncClient(verify=tls()) as client:
            unsigned = await client.get(
                f"{endpoint.url}/discover",
                headers={"accept": "application/vnd.restate.endpointmanifest.v3+json"},
            )
        assert unsigned.status_code == 401
