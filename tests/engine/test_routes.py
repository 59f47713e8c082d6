"""Every hop between our own services names a handler that `lash_services` binds, with its input type."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from lash_restate.engine import GROUP_SHARED, lash_services
from lash_restate.engine.group._mode_stores import slice_key
from lash_restate.engine.wire._routes import ROUTES, Route, group_of_pump, incarnation_of_pump, pump_key
from lash_restate.tools import ToolRegistry


def _bound() -> dict[tuple[str, str], Any]:
    return {
        (service.name, name): handler
        for service in lash_services(ToolRegistry())
        for name, handler in service.handlers.items()
    }


@pytest.mark.parametrize("route", ROUTES, ids=repr)
def test_every_route_is_bound_with_its_input_type(route: Route[Any, Any]) -> None:
    handler = _bound().get((route.service, route.handler))
    assert handler is not None, f"{route} names no bound handler"
    hint = handler.handler_io.input_type
    if route.input is None:
        assert hint is None or hint.is_void or hint.annotation is None, f"{route} takes nothing"
    else:
        assert hint is not None and hint.annotation == route.input, (route, hint)


def test_only_the_public_handlers_are_left_unrouted() -> None:
    """A handler no route names is one the ingress may call (events), or dead code."""
    routed = {(route.service, route.handler) for route in ROUTES}
    public = {key for key, handler in _bound().items() if key not in routed}
    assert public == {
        ("LashSignal", "emit"),
        ("LashSignal", "reject"),
        ("LashSignal", "clear"),
        ("LashGroup", "operator_close"),  # the operator's close: a capability from the admin API
        ("LashGroup", "operator_redispatch"),  # the operator's re-dispatch, with the same capability
        ("LashGroup", "operator_resend"),  # a killed open sent again, only ever as a reopen (decision 93)
        ("LashSignal", "operator_resend"),  # a lost subscription sent again (decision 129)
    }


@pytest.mark.parametrize("position", [0, 255, 256, 1024, 99_999])
@pytest.mark.parametrize("incarnation", ["0b6c2f4e-3d1a-4c8e-9f70-2a5b8e1d4c37-s", "p-0b6c2f4e-s-b8"])
def test_a_pumps_key_gives_back_its_group_and_incarnation(incarnation: str, position: int) -> None:
    """What lash-restate's inspection reads a pump's key with is the inverse of what names it: the
    group's own pump and a further slice's, whatever the group key holds (colons, dots)."""
    group_key = "inv_1:group:b.2:0"
    key = slice_key(group_key, incarnation, position)
    assert (group_of_pump(key), incarnation_of_pump(key)) == (group_key, incarnation)


def test_a_pumps_key_is_the_one_parked_groups_pumps_hold() -> None:
    """A pump's key is a format: the pumps of a group parked by an earlier release keep its outcomes
    under it. The group's own pump, a further slice's, and a bounded group's one pump for every slice."""
    assert slice_key("g:1", "inc-s", 0) == "inc-s:g:1"
    assert slice_key("g:1", "inc-s", 255) == "inc-s:g:1"
    assert slice_key("g:1", "inc-s", 256) == "inc-s.1:g:1"
    assert slice_key("g:1", "p-inc-s", 99_999) == "p-inc-s.390:g:1"
    assert slice_key("g:1", "p-w8-inc-s", 99_999) == "p-w8-inc-s:g:1"
    assert slice_key("g:1", "w8-inc-s", 300) == "w8-inc-s:g:1"  # bounded, in one message
    assert slice_key("s.1:group:b.2:0", "inc-s", 512) == "inc-s.2:s.1:group:b.2:0"
    assert pump_key("g:1", "inc-s") == "inc-s:g:1"  # the group's own pump, as the open names it


def test_a_route_encodes_its_message_as_the_handler_decodes_it() -> None:
    class Probe(msgspec.Struct):
        n: int

    route: Route[Probe, Probe] = Route("S", "h", Probe, Probe)
    assert route.reply(msgspec.json.encode(Probe(n=3))) == Probe(n=3)
    raw: Route[int, bytes] = Route("S", "h", int, bytes)
    assert raw.reply(b"[1]") == b"[1]"


def test_the_groups_shared_handlers_are_those_it_binds_shared() -> None:
    """Inspection counts a paused handler of a group's own object as holding the group up unless it
    is shared: the set it reads is the one the group object binds."""
    bound = {name: handler for (service, name), handler in _bound().items() if service == "LashGroup"}
    assert {name for name, handler in bound.items() if handler.kind == "shared"} == GROUP_SHARED
