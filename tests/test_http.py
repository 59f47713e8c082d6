"""Every HTTP client lash makes shares one TLS context per process (decision 82): httpx otherwise
builds one, CA bundle included, per client, about 30 ms of CPU per admin-API request."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from lash_restate._http import tls
from lash_restate.admin import AdminApi, AdminError
from lash_restate.testing import free_port


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
