"""The Restate admin API as `register` and `groups` reach it: its address and, where it asks for one, a
bearer token (``RESTATE_ADMIN_URL`` and ``RESTATE_AUTH_TOKEN``, as Restate's own CLI reads them)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from ._http import tls
from .contract import LashError, RuntimeErrorCode

__all__ = ["DEFAULT_ADMIN_URL", "AdminApi", "AdminError", "AdminRefused", "shown_url", "token_from_env"]

DEFAULT_ADMIN_URL = "http://127.0.0.1:9070"


class AdminError(LashError, RuntimeError):
    """The admin API could not be reached or refused the request; the message is one line."""

    code = RuntimeErrorCode.ADMIN

    def __str__(self) -> str:
        return self.message


class AdminRefused(AdminError):
    """The admin API refused this client (401 or 403): its token is missing or wrong."""

    code = RuntimeErrorCode.ADMIN_REFUSED


def shown_url(url: str) -> str:
    """``url`` as a message or a log may show it: without a user or password it holds."""
    bare = "://" not in url  # `ops:secret@host:9070`: read as is, `ops` would be its scheme
    try:
        parts = urlsplit("//" + url if bare else url)
        if parts.username is None and parts.password is None:
            return url
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port is not None else host
    except ValueError:  # a port that is no number: nothing of it is shown past the scheme
        if "@" not in url:
            return url
        return "…" if bare else url.split("://", 1)[0] + "://…"
    shown = urlunsplit(parts._replace(netloc=netloc))
    return shown.removeprefix("//") if bare else shown


def token_from_env() -> str | None:
    """``$RESTATE_AUTH_TOKEN`` without the line end a secret read from a file keeps; None if unset."""
    return os.environ.get("RESTATE_AUTH_TOKEN", "").strip() or None


@dataclass(frozen=True)
class AdminApi:
    url: str = DEFAULT_ADMIN_URL
    token: str | None = None  # sent as `Authorization: Bearer …` when set

    @classmethod
    def from_env(cls, url: str | None = None) -> AdminApi:
        """``url``, else ``$RESTATE_ADMIN_URL``, else ``$LASH_ADMIN_URL``, else the local default; the
        token from ``$RESTATE_AUTH_TOKEN``."""
        url = url or os.environ.get("RESTATE_ADMIN_URL") or os.environ.get("LASH_ADMIN_URL")
        return cls(url or DEFAULT_ADMIN_URL, token_from_env())

    @property
    def shown(self) -> str:
        """The address as messages show it: without a user or password."""
        return shown_url(self.url)

    def headers(self) -> dict[str, str]:
        """The token's header; `AdminError` (never showing it) if a header cannot carry it."""
        if not self.token:
            return {}
        if not (self.token.isascii() and self.token.isprintable()):
            raise AdminError("RESTATE_AUTH_TOKEN holds characters an HTTP header cannot carry (not shown)")
        return {"authorization": f"Bearer {self.token}"}

    def hidden(self, text: str) -> str:
        """``text`` without the token or the address's password: an error's text may quote either."""
        text = text.replace(self.url, self.shown)
        return text.replace(self.token, "…") if self.token else text

    def post(self, path: str, body: Any, *, timeout: float = 30, accept_json: bool = False) -> httpx.Response:
        return self._send("POST", path, body, timeout=timeout, accept_json=accept_json)

    def get(self, path: str, *, timeout: float = 30) -> httpx.Response:
        return self._send("GET", path, None, timeout=timeout, accept_json=True)

    def patch(self, path: str, *, timeout: float = 30) -> httpx.Response:
        """An action on a resource, such as ``/invocations/{id}/kill``."""
        return self._send("PATCH", path, None, timeout=timeout, accept_json=True)

    def _send(
        self, method: str, path: str, body: Any, *, timeout: float, accept_json: bool
    ) -> httpx.Response:
        headers = self.headers()
        if accept_json:
            headers["accept"] = "application/json"
        try:
            response = httpx.request(
                method,
                f"{self.url.rstrip('/')}{path}",
                json=body,
                headers=headers,
                timeout=timeout,
                verify=tls(),
            )
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):  # reached, and slow
            raise AdminError(
                f"the Restate admin API at {self.shown} did not answer within {timeout:g} s"
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # an unusable URL is not an HTTPError
            raise AdminError(
                self.hidden(f"cannot reach the Restate admin API at {self.url} ({exc})")
            ) from None
        if response.status_code in (401, 403):
            hint = "set RESTATE_AUTH_TOKEN" if not self.token else "check RESTATE_AUTH_TOKEN"
            raise AdminRefused(
                f"the admin API at {self.shown} refused the request ({response.status_code}): {hint}"
            )
        return response
