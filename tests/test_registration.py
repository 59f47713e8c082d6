"""How registration tells an upgrade of an application from another application (decision 43): the
rule over deployments as the admin API describes them. The real server's side is
tests/engine/test_shared_prefix.py."""

from __future__ import annotations

from typing import Any

import pytest

from lash_restate.registration import Application

LASH = ("Group", "Child", "Pump", "Signal")


def deployment(*own: str, prefix: str = "Lash", name: str | None = None) -> dict[str, Any]:
    """A deployment as `GET /deployments/{id}` describes it (only the fields read)."""
    metadata = {"lash.app": name} if name is not None else {}
    lash = [{"name": f"{prefix}{role}", "metadata": metadata} for role in LASH]
    return {"id": "dp_1", "uri": "http://e:9080/", "services": [*lash, *({"name": s} for s in own)]}


def test_a_deployment_is_read_as_its_prefix_name_and_own_services() -> None:
    app = Application.of(deployment("Inventory", "LashTurn", prefix="Shop", name="shop"))
    assert (app.deployment_id, app.uri) == ("dp_1", "http://e:9080/")
    assert (app.prefix, app.name, set(app.services)) == ("Shop", "shop", {"Inventory", "LashTurn"})
    # Format 1 (the baseline release) carries no metadata: no name, the same services.
    assert Application.of(deployment("Inventory")).name is None
    # Not a lash deployment: no prefix (a lone `FooGroup` is not lash's).
    plain = Application.of({"id": "dp_2", "services": [{"name": "FooGroup"}, {"name": "Inventory"}]})
    assert plain.prefix is None and plain.services == {"FooGroup", "Inventory"}


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        (deployment("Inventory"), deployment("Inventory", "Orders"), True),  # a service added
        (deployment("Inventory", "Orders"), deployment("Orders"), True),  # one removed
        (deployment(), deployment(), True),  # lash's services alone, both: indistinguishable
        (deployment("Inventory"), deployment("Shipping"), False),  # nothing in common
        (deployment("Inventory"), deployment(), False),
        (deployment("Inventory", name="shop"), deployment("Stock", name="shop"), True),  # names decide
        (deployment("Stock", name="shop"), deployment("Stock", name="depot"), False),
        (deployment("Inventory"), deployment("Inventory", name="shop"), True),  # one name: services decide
        (deployment("Inventory"), deployment("Stock", name="shop"), False),
    ],
)
def test_the_same_application_is_a_name_in_common_or_else_a_service_in_common(
    old: dict[str, Any], new: dict[str, Any], same: bool
) -> None:
    assert Application.of(old).same_as(Application.of(new)) is same
    assert Application.of(new).same_as(Application.of(old)) is same
