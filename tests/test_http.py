"""Every HTTP client lash makes shares one TLS context per process (decision 82): httpx otherwise
builds one, CA bundle included, per client, about 30 ms of CPU per admin-API request."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest

from lash_restate._http import tls
from lash_restate.admin import AdminApi, AdminError
from lash_restate.contract import Call
from lash_restate.engine import GROUP_OPERATOR_CLOSE, OperatorClose
from lash_restate.engine.child._lookup import configure_admin, unregistered
from lash_restate.inspection import InspectionError, sql
from lash_restate.inspection._operator import operator_call
from lash_restate.registration import RegistrationError, _answer
from lash_restate.testing import free_port
from tests.engine.test_cli import command


def test_requests_to_the_admin_api_build_one_tls_context_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[ssl.SSLContext] = []
    create = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(create(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(ssl, "create_default_context", counted)
    tls.cache_clear()  # as a fresh process: the first request builds it
    api = AdminApi(f"http://127.0.0.1:{free_port()}")  # nobody listens: each request fails at once
    for _ in range(3):
        with pytest.raises(AdminError, match="cannot reach"):
            api.get("/health", timeout=2)
    assert len(built) == 1 and tls() is built[0]


def test_a_url_that_is_no_url_is_refused_as_one_that_cannot_be_reached() -> None:
    """httpx raises `InvalidURL`, not an `HTTPError`, for a URL it cannot parse (a port that is not
    a number, an unclosed IPv6 bracket): the admin API's and the ingress's callers say so as they
    say any other unreachable address, never with a traceback."""
    with pytest.raises(AdminError, match=r"cannot reach the Restate admin API at http://127\.0\.0\.1:abc"):
        AdminApi("http://127.0.0.1:abc").get("/health", timeout=2)
    close, api = OperatorClose(incarnation="x", openers=0), AdminApi("http://127.0.0.1:9")
    with pytest.raises(InspectionError, match=r"cannot reach the Restate ingress at http://\[::1"):
        operator_call(api, "http://[::1", "a:group:b:0", GROUP_OPERATOR_CLOSE, close)


async def test_a_childs_lookup_of_its_call_target_that_cannot_be_told_is_not_a_miss() -> None:
    """A call child asks the admin API whether anybody serves its target; an address that is no
    URL, or an answer that is not the admin API's JSON, cannot tell, and the child is called as
    without an admin API (an exception there would fail its handler, and Restate retry it for
    ever)."""
    call = Call(service="Ghost", handler="hello")
    try:
        configure_admin("http://127.0.0.1:abc")
        assert await unregistered(call) is None
        port = free_port()
        configure_admin(f"http://127.0.0.1:{port}")
        server = await asyncio.start_server(_answering(b"hello"), "127.0.0.1", port)
        async with server:
            assert await unregistered(call) is None
    finally:
        configure_admin(None)


async def test_an_operators_call_the_ingress_took_and_did_not_answer_says_it_may_run_later() -> None:
    """An operator's close (say) queued behind the group's other work is sent, and runs later: no
    answer in time is not "cannot reach", which would have the operator think nothing happened."""
    port, answered = free_port(), asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # takes the request, and answers nothing until the test has its error
        await answered.wait()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(hold, "127.0.0.1", port)
    close = OperatorClose(incarnation="x", openers=0)
    async with server:
        with pytest.raises(InspectionError, match=r"gave no answer within 0\.5 s: it may wait behind"):
            await asyncio.to_thread(
                operator_call,
                AdminApi("http://127.0.0.1:9"),
                f"http://127.0.0.1:{port}",
                "g:group:b:0",
                GROUP_OPERATOR_CLOSE,
                close,
                timeout=0.5,
            )
        answered.set()


def _answering(body: bytes, status: str = "200 OK") -> Any:
    """A server callback that answers any request ``status`` with ``body`` (said to be JSON), then closes."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        writer.write(head.encode() + b"connection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    return answer


@pytest.mark.parametrize("body", [b"[]", b'"x"', b'{"rows": null}', b'{"rows": [1]}', b"<html>"])
async def test_an_admin_api_answering_200_with_what_is_not_query_rows_is_one_error(body: bytes) -> None:
    """A proxy or another service at the admin URL answering 200: a query's answer that is not the
    admin API's rows, and a registration's answer that is not JSON, are each one error naming the
    URL, where a `TypeError` (or a `JSONDecodeError`) printed a traceback."""
    port = free_port()
    server = await asyncio.start_server(_answering(body), "127.0.0.1", port)
    async with server:
        url = f"http://127.0.0.1:{port}"
        with pytest.raises(InspectionError, match="is not a Restate admin API"):
            await asyncio.to_thread(sql, url, "SELECT 1")
        if body == b"<html>":
            with pytest.raises(RegistrationError, match="answered with no JSON"):
                await asyncio.to_thread(_answer, AdminApi(url), {}, "http://endpoint", 5)


async def test_an_endpoint_whose_admin_token_is_refused_does_not_start_unchecked() -> None:
    """`serve --admin-url` checks at start that no other application serves lash's services; an admin
    API refusing its token (401) left the check undone with a warning, and the endpoint served
    whatever prefix it had. A missing or wrong token is a wrong setting: one line, exit 2."""
    port = free_port()
    server = await asyncio.start_server(
        _answering(b'{"message": "no"}', "401 Unauthorized"), "127.0.0.1", port
    )
    async with server:
        args = [
            "--resolver",
            "lash_restate.testing.tools:demo_tools",
            "--admin-url",
            f"http://127.0.0.1:{port}",
        ]
        run = await asyncio.to_thread(command, "serve", "--port", str(free_port()), *args)
    assert run.returncode == 2, run.stderr
    assert "cannot check who serves lash's services" in run.stderr and "RESTATE_AUTH_TOKEN" in run.stderr
