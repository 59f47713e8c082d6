"""`lash-restate serve`'s settings and the endpoint's admin-API address: one convention for both,
Restate's CLI's (`RESTATE_ADMIN_URL`), then lash's own (`LASH_ADMIN_URL`), a flag over either."""

from __future__ import annotations

import pytest

from lash_restate.engine.child import _lookup
from lash_restate.settings import ServeSettings, SettingsError

RESTATE, LASH = "http://restate-admin:9070", "http://lash-admin:9070"


@pytest.mark.parametrize(
    ("env", "flag", "expected"),
    [
        ({"RESTATE_ADMIN_URL": RESTATE, "LASH_ADMIN_URL": LASH}, None, RESTATE),
        ({"LASH_ADMIN_URL": LASH}, None, LASH),
        ({"RESTATE_ADMIN_URL": RESTATE}, "http://flag:9070", "http://flag:9070"),
        ({}, None, None),
    ],
    ids=["restate-first", "lash-alone", "flag-wins", "none"],
)
def test_serve_reads_the_admin_url_as_restates_cli_does(
    env: dict[str, str], flag: str | None, expected: str | None
) -> None:
    assert ServeSettings.load({"admin_url": flag}, env=env).admin_url == expected


def test_a_bad_setting_names_the_variable_it_came_from() -> None:
    with pytest.raises(SettingsError, match="LASH_PORT"):
        ServeSettings.load({}, env={"LASH_PORT": "70000"})
    with pytest.raises(SettingsError, match=r"port \(flag\)"):
        ServeSettings.load({"port": 70000}, env={})


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"RESTATE_ADMIN_URL": RESTATE, "LASH_ADMIN_URL": LASH}, RESTATE),
        ({"LASH_ADMIN_URL": LASH}, LASH),
        ({}, None),
    ],
    ids=["restate-first", "lash-alone", "none"],
)
def test_an_endpoint_not_started_by_serve_finds_the_admin_api_as_restates_cli_does(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str | None
) -> None:
    """A `lash.app` served by the application's own server: its children's routability check asks
    the admin API at the address Restate's CLI would use."""
    for name in ("RESTATE_ADMIN_URL", "LASH_ADMIN_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(_lookup._Lookup, "configured", False)
    monkeypatch.setattr(_lookup._Lookup, "admin", None)
    admin = _lookup._admin()
    assert (admin.url if admin is not None else None) == expected
