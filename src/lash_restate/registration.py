"""Registering a deployment with a Restate admin API: what `lash-restate register` and the local stack do."""

from __future__ import annotations

from typing import Any

from .admin import AdminApi, AdminError

__all__ = ["RegistrationError", "register_deployment"]


class RegistrationError(RuntimeError):
    """The admin API could not be reached or refused the deployment; the message is one line."""


def register_deployment(
    admin: AdminApi | str, endpoint_url: str, *, force: bool = True, timeout: float = 30
) -> Any:
    """Register (or, with ``force``, re-register) ``endpoint_url``; returns the admin API's answer."""
    admin = AdminApi(admin) if isinstance(admin, str) else admin
    try:
        response = admin.post("/deployments", {"uri": endpoint_url, "force": force}, timeout=timeout)
    except AdminError as exc:
        raise RegistrationError(str(exc)) from None
    if response.status_code >= 300:
        raise RegistrationError(
            f"registering {endpoint_url} failed ({response.status_code}): {response.text}"
        )
    return response.json()
