"""`lash-restate serve`'s settings and the endpoint's admin-API address: one convention for both,
Restate's CLI's (`RESTATE_ADMIN_URL`), then lash's own (`LASH_ADMIN_URL`), a flag over either."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from lash_restate.admin import shown_url
from lash_restate.contract import Call, Err, InvalidInput
from lash_restate.engine.child import _lookup
from lash_restate.engine.group._pages import width_setting
from lash_restate.engine.serving._endpoint import DeploymentError, _check_switch, _duration
from lash_restate.engine.wire._formats import ERROR_METADATA_ENV, stored_outcome, writes_error_metadata
from lash_restate.settings import ServeSettings, SettingsError

RESTATE, LASH = "http://restate-admin:9070", "http://lash-admin:9070"


@pytest.mark.parametrize(
    ("env", "flag", "expected"),
    [
        ({"RESTATE_ADMIN_URL": RESTATE, "LASH_ADMIN_URL": LASH}, None, RESTATE),
        ({"LASH_ADMIN_URL": LASH}, None, LASH),
        ({"RESTATE_ADMIN_URL": RESTATE}, "http://flag:9070", "http://flag:9070"),
        ({}, None, None),
        ({"RESTATE_ADMIN_URL": "", "LASH_ADMIN_URL": LASH}, None, LASH),  # set empty: unset
        ({"RESTATE_ADMIN_URL": RESTATE}, "", None),  # an empty flag: none, as an empty variable is
    ],
    ids=["restate-first", "lash-alone", "flag-wins", "none", "empty-is-unset", "empty-flag-is-none"],
)
def test_serve_reads_the_admin_url_as_restates_cli_does(
    env: dict[str, str], flag: str | None, expected: str | None
) -> None:
    assert ServeSettings.load({"admin_url": flag}, env=env).admin_url == expected


@pytest.mark.parametrize(
    ("flags", "env"),
    [
        ({"identity_keys": ["publickeyv1_a,publickeyv1_b"]}, {}),  # `--identity-key a,b`
        ({"identity_keys": ["publickeyv1_a", "publickeyv1_b"]}, {}),  # the flag given twice
        ({}, {"LASH_IDENTITY_KEYS": "publickeyv1_a, publickeyv1_b"}),
    ],
    ids=["one-flag", "two-flags", "variable"],
)
def test_identity_keys_are_comma_separated_in_a_flag_as_in_the_variable(
    flags: dict[str, list[str]], env: dict[str, str]
) -> None:
    assert ServeSettings.load(flags, env=env).identity_keys == ["publickeyv1_a", "publickeyv1_b"]


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


def test_a_setting_set_empty_is_unset_as_a_container_clears_its_images() -> None:
    """``docker run -e LASH_APP= … serve --resolver m:a`` clears the image's ``LASH_APP``: the
    resolver is served, where ``--app`` was refused as ``''``."""
    loaded = ServeSettings.load({"resolver": "m:a"}, env={"LASH_APP": "", "LASH_BATCH_FROM": ""})
    assert (loaded.app, loaded.resolver, loaded.batch_from) == (None, "m:a", None)


@pytest.mark.parametrize("value", ["0.5", "0", "soon", "99999999999d", "3651d"])
def test_a_duration_setting_out_of_range_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Below a second a guard would look again at once, for ever (`LASH_WAITER_CHECK=0.0001` was
    0 ms); past a timedelta's range `serve --resolver` ended in a traceback."""
    monkeypatch.setenv("LASH_WAITER_CHECK", value)
    with pytest.raises(DeploymentError, match=r"^LASH_WAITER_CHECK must be a duration from 1 s to 3650 d"):
        _duration("LASH_WAITER_CHECK", timedelta(minutes=5))


@pytest.mark.parametrize(
    ("value", "seconds"), [("1s", 1), ("36h", 129600), ("3650d", 315360000), ("", 300), ("  ", 300)]
)
def test_a_duration_setting_reads_seconds_or_a_unit(
    monkeypatch: pytest.MonkeyPatch, value: str, seconds: int
) -> None:
    monkeypatch.setenv("LASH_WAITER_CHECK", value)
    assert _duration("LASH_WAITER_CHECK", timedelta(minutes=5)) == timedelta(seconds=seconds)


@pytest.mark.parametrize("value", ["abc", "0", "-3", "2.5", "²"])
def test_a_width_setting_that_is_no_count_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """`LASH_PAGE_FROM`, read as an app is built, and `LASH_PARTS_FROM`, read by a caller's open,
    where a plain `ValueError` was retried for ever; ``-3`` paged every group."""
    monkeypatch.setenv("LASH_PARTS_FROM", value)
    with pytest.raises(
        InvalidInput, match=f"LASH_PARTS_FROM must be a count of children from 1, not '{value}'$"
    ):
        width_setting("LASH_PARTS_FROM")
    monkeypatch.setenv("LASH_PARTS_FROM", " 7 ")
    assert width_setting("LASH_PARTS_FROM") == 7
    monkeypatch.delenv("LASH_PARTS_FROM")
    assert width_setting("LASH_PARTS_FROM") is None


def test_an_admin_api_that_cannot_tell_is_said_once_a_minute_without_its_credentials(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every call child to a declared target asks the admin API: while it does not answer, a wide
    group logged a warning per child, each with the URL's user and password."""
    assert shown_url("http://ops:s3cret@admin:9070/x") == "http://admin:9070/x"
    assert shown_url("https://admin") == "https://admin"
    assert shown_url("http://ops:s3cret@admin:port/x") == "http://…"  # no port: nothing past the scheme
    monkeypatch.setattr(_lookup._Lookup, "warned", {})
    calls = [Call(service="Ghost", handler="hello"), Call(service="Other", handler="hi")]
    with caplog.at_level("WARNING", logger="lash_restate"):
        for _ in range(3):
            for call in calls:
                _lookup._unchecked(call, "the admin API at http://admin:9070 answered 503")
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot check that {target} is registered, calling it anyway: "
        "the admin API at http://admin:9070 answered 503"
        for target in ("Ghost/hello", "Other/hi")
    ]


@pytest.mark.parametrize(
    ("value", "on"),
    [("1", True), ("TRUE", True), (" on ", True), ("yes", True), ("0", False), ("Off", False), ("", False)],
)
def test_the_error_metadata_switch_reads_on_or_off(
    monkeypatch: pytest.MonkeyPatch, value: str, on: bool
) -> None:
    monkeypatch.setenv(ERROR_METADATA_ENV, value)
    _check_switch(ERROR_METADATA_ENV)  # accepted at start
    assert writes_error_metadata() is on  # and read so where an outcome is written


def test_an_error_metadata_switch_that_is_neither_on_nor_off_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused as the app is built (`serve` exits 2), never read as off: an operator who meant it on
    would otherwise see no metadata and no reason."""
    monkeypatch.setenv(ERROR_METADATA_ENV, "enabled")
    with pytest.raises(DeploymentError, match=r"^LASH_ERROR_METADATA must be 1, true, yes or on, or 0,"):
        _check_switch(ERROR_METADATA_ENV)


@pytest.mark.parametrize(("value", "kept"), [("1", True), ("", False), ("off", False), ("bogus", False)])
def test_a_stored_rejection_keeps_its_metadata_only_where_the_endpoint_is_told_to(
    monkeypatch: pytest.MonkeyPatch, value: str, kept: bool
) -> None:
    """Read where it is written: a process that never built an app (a caller of services served
    elsewhere) reads the same setting; a value neither on nor off, refused where an app is built,
    writes none."""
    monkeypatch.setenv(ERROR_METADATA_ENV, value)
    given = Err(message="out of stock", code="409", metadata={"left": "5"})
    stored = msgspec.json.decode(stored_outcome(given), type=Err)
    assert stored == (given if kept else Err(message="out of stock", code="409"))
    assert b"metadata" not in stored_outcome(Err(message="none given"))  # format 1, as it was
