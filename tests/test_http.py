"""Every HTTP client lash makes shares one TLS context per process (decision 82): httpx otherwise
builds one, CA bundle included, per client, about 30 ms of CPU per admin-API request."""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

import pytest

from lash_restate._http import tls
from lash_restate.admin import AdminApi, AdminError, shown_url
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
        said = r"no answer within 0\.5 s: it may wait behind .* look at the group \(`lash-restate groups show"
        with pytest.raises(InspectionError, match=said):
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


def test_an_admin_api_error_shows_neither_the_token_nor_a_password_in_the_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error's text quotes what the HTTP client met, which may hold the bearer token (a header it
    refused) or the password in the address: every message shows neither, and a token read with
    the line end a secret file keeps is sent without it."""
    monkeypatch.setenv("RESTATE_AUTH_TOKEN", "s3cr3t-token\n")
    assert AdminApi.from_env("http://127.0.0.1:9").token == "s3cr3t-token"
    port = free_port()  # nobody listens
    api = AdminApi(f"http://ops:pa55word@127.0.0.1:{port}", "s3cr3t-token")
    with pytest.raises(AdminError) as unreached:
        api.get("/health", timeout=2)
    assert f"http://127.0.0.1:{port}" in unreached.value.message
    assert "pa55word" not in unreached.value.message and "s3cr3t" not in unreached.value.message
    for token in ("s3cr3t\n", "tökén"):  # no header carries it: refused, never quoted, no traceback
        with pytest.raises(AdminError, match="cannot carry") as refused:
            AdminApi(f"http://127.0.0.1:{port}", token).get("/health", timeout=2)
        assert token.strip() not in refused.value.message
        with pytest.raises(InspectionError, match="cannot carry"):
            sql(AdminApi(f"http://127.0.0.1:{port}", token), "SELECT 1")
        with pytest.raises(InspectionError, match="cannot carry"):  # an operator's call to the ingress
            operator_call(
                AdminApi(f"http://127.0.0.1:{port}", token),
                f"http://127.0.0.1:{port}",
                "s:group:b:0",
                GROUP_OPERATOR_CLOSE,
                OperatorClose(incarnation="i", openers=1, cancel=False),
            )
    with pytest.raises(InspectionError) as ingress:  # the ingress's address without its password
        operator_call(
            api,
            f"http://ops:pa55word@127.0.0.1:{port}",
            "s:group:b:0",
            GROUP_OPERATOR_CLOSE,
            OperatorClose(incarnation="i", openers=1, cancel=False),
        )
    assert "pa55word" not in str(ingress.value) and "s3cr3t" not in str(ingress.value)
    # An address written without its scheme, whose user a parser takes for one, shows none of it.
    bare = AdminApi(f"ops:pa55word@127.0.0.1:{port}")
    assert bare.shown == f"127.0.0.1:{port}" and shown_url("ops:pa55word@host:port") == "…"
    with pytest.raises(AdminError) as unusable:
        bare.get("/health", timeout=2)
    assert "pa55word" not in unusable.value.message


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        (b'{"message": "no"}', "401 Unauthorized", "RESTATE_AUTH_TOKEN"),
        (
            b'{"code":404,"message":"service \'services\' not found","source":"ingress"}',
            "404 Not Found",
            "9070",
        ),
        (b'{"code":400,"message":"bad path: /version","source":"ingress"}', "400 Bad Request", "9070"),
        (b"{}", "200 OK", "is not a Restate admin API"),
    ],
    ids=["token-refused", "ingress-404", "ingress-400", "not-restate"],
)
async def test_an_endpoint_whose_admin_api_check_cannot_run_does_not_start(
    body: bytes, status: str, said: str
) -> None:
    """`serve --admin-url` checks at start that no other application serves lash's services. An admin
    API refusing its token (401) left the check undone with a warning, and the endpoint served
    whatever prefix it had; the ingress's port given by mistake answers every service's look-up 404,
    which read as "nobody serves it", so the check passed and each child's look-up of a declared
    call target ended its child 404 (it is no admin API: its `GET /version` names no admin API
    version). Each is a wrong setting: one line, exit 2."""
    port = free_port()
    server = await asyncio.start_server(_answering(body, status), "127.0.0.1", port)
    async with server:
        args = [
            "--resolver",
            "lash_restate.testing.tools:demo_tools",
            "--admin-url",
            f"http://127.0.0.1:{port}",
        ]
        run = await asyncio.to_thread(command, "serve", "--port", str(free_port()), *args)
    assert run.returncode == 2, run.stderr
    assert "cannot check who serves lash's services" in run.stderr and said in run.stderr, run.stderr


def test_an_admin_api_that_does_not_answer_in_time_is_said_to_be_slow_not_unreachable() -> None:
    """A query a big cluster answers slowly: the message says it did not answer within the time,
    where it said the admin API could not be reached."""
    with socket.socket() as silent:  # connections are taken, requests never answered
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(InspectionError, match=r"did not answer within 0\.5 s$"):
            sql(url, "SELECT 1", timeout=0.5)


async def test_a_declared_targets_lookup_with_a_token_no_header_carries_calls_it_anyway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child's lookup of a declared target with such a token cannot tell: it calls the target
    anyway, where it raised a plain error in the child's handler (retried for ever)."""
    monkeypatch.setenv("RESTATE_AUTH_TOKEN", "tökén")
    configure_admin(f"http://127.0.0.1:{free_port()}")
    try:
        assert await unregistered(Call(service="Shop", handler="buy", arg=1)) is None
    finally:
        configure_admin(None)
