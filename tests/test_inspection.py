"""The operator's inspection, on what it reads (no server): which child invocations are a group's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

import lash_restate.inspection as inspection
import lash_restate.inspection._groups as inspection_groups
import lash_restate.inspection._paused as inspection_paused
from lash_restate.contract import Err
from lash_restate.engine import GROUP_SHARED
from lash_restate.inspection import (
    ChildView,
    GroupView,
    HeldView,
    InspectionError,
    OpenerView,
    PausedView,
    PumpView,
    RetryingView,
)
from lash_restate.inspection._paused import created_before, holds_up_group
from tests.engine.cli_main import run_main

OPENED = 1_796_000_000_000  # a group's open, by the endpoint's clock (ms)


def test_a_child_invocation_from_before_its_groups_open_is_a_namesakes() -> None:
    """`groups show` (and `close`) took a replay key's latest invocation for the group's child, a
    namesake's too (the key closed and opened again): one created well before this incarnation's
    open is not its child; one about as old, by another clock, still is."""
    iso = "2026-11-30T00:53:20.000Z"  # OPENED itself
    assert not created_before(iso, OPENED)
    assert not created_before("2026-11-30T00:53:17.000Z", OPENED)  # 3 s earlier: the clocks may differ
    assert created_before("2026-11-30T00:53:10.000Z", OPENED)  # 10 s earlier: a namesake's
    assert not created_before("2026-11-30T00:53:10.000Z", 0)  # a group recorded before opens kept a time
    assert not created_before("not a time", OPENED) and not created_before(None, OPENED)


def _paused(handler: str, key: str = "s:group:b:0", service: str = "LashGroup") -> dict[str, Any]:
    return {
        "id": f"inv_{handler}",
        "target_service_name": service,
        "target_service_key": key,
        "target_handler_name": handler,
    }


def test_a_paused_handler_of_the_groups_own_object_holds_it_up_unless_it_is_shared() -> None:
    """A paused `guard` (or `report`, `open`, any handler that runs one at a time on the group's key)
    holds up the group's reports, reads and close, and is counted; a paused `watch_runs` (shared, it
    runs beside them) does not hold it up, nor does another object's paused handler."""
    rows = [
        _paused("guard"),
        _paused("watch_runs"),
        _paused("report", key="s:group:other:0"),
        _paused("run2", key="i:s:group:b:0", service="LashPump"),
    ]
    assert [holds_up_group(row) for row in rows] == [True, False, True, False]
    assert {"watch", "hold", "operator_resend", "watch_runs"} == GROUP_SHARED
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inspection_paused, "paused_rows", lambda admin, status="paused": rows[:2])
        patch.setattr(inspection_paused, "paused_paths", lambda admin, paused: {})
        counted = inspection_paused.paused_by_group("http://admin", {"s:group:b:0": ("i", 0)})
    assert counted == {"s:group:b:0": 1}


GOLDEN = json.loads((Path(__file__).parent / "formats" / "format1.json").read_text())


@pytest.mark.parametrize(
    ("key", "value", "what"),
    [
        # A later release's record: a wake this release does not know.
        ("meta", GOLDEN["state.group.meta.fresh"].replace('"first"', '"eventually"'), "record"),
        ("savers", '{"inv_1": true}', "savers"),
        ("reclaim_at", '"soon"', "reclaim time"),
        ("missed", "[0, -", "missed children"),
    ],
)
def test_a_groups_state_this_release_cannot_read_fails_the_command_with_a_line_naming_the_group(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str, what: str
) -> None:
    """A record (or its savers, reclaim time, missed children) this release cannot read, of a later
    release say, fails `groups list`, `show`, `close` and the rest with one line naming the group and
    what could not be read, where the command ended in a plain traceback."""
    rows = [{"service_key": "k:group:b:0", "key": "meta", "value_utf8": GOLDEN["state.group.meta.fresh"]}]
    rows = [r for r in rows if r["key"] != key] + [
        {"service_key": "k:group:b:0", "key": key, "value_utf8": value}
    ]
    monkeypatch.setattr(inspection_groups, "sql", lambda admin, query, **_: rows)
    with pytest.raises(
        InspectionError, match=rf"^group 'k:group:b:0': its {what} cannot be read by this release"
    ):
        inspection_groups.read_groups("http://admin", order=False)


def test_a_fence_this_release_cannot_read_fails_the_paused_count_naming_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paused = [{"id": "inv_c", "target_service_name": "LashChild", "target_service_key": "k:group:b:0/0"}]
    monkeypatch.setattr(inspection_paused, "paused_rows", lambda admin, status="paused": paused)
    fence = [{"service_key": "k:group:b:0", "value_utf8": '{"replay_keys": "k:group:b:0/0"}'}]
    monkeypatch.setattr(inspection_paused, "sql", lambda admin, query, **_: fence)
    with pytest.raises(InspectionError, match=r"^group 'k:group:b:0': its shape cannot be read"):
        inspection_paused.paused_by_group("http://admin", {"k:group:b:0": ("i", 0)})


def test_groups_show_names_what_holds_a_wide_group_up_within_bounds_and_never_prints_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a wide group in an outage: ten of the paused children are named, each with its failure's
    first line (not the handler's traceback), the rest counted; a child Restate retries whose attempt
    and next retry are not recorded is named without "None"; a pump past the first four that fails
    is named in the count of the others; a handler of the group's own object that fails is named
    with what it holds up."""
    trace = "[500] RuntimeError('the ledger is locked')\nTraceback (most recent call last):\n  ..."
    paused = PausedView("inv_p", "DemoCalls/stall", 3, trace, "500")
    retrying = RetryingView("inv_r", "DemoCalls/flaky", None, None, None, next_retry_at=None)
    children = [ChildView(p, f"k/{p}", None, None, f"inv_{p}", "paused", paused=paused) for p in range(12)]
    children.append(ChildView(12, "k/12", None, None, "inv_r", "backing-off", retrying=retrying))
    pumps = [PumpView("inv_pump0", "run2", "i:k", "paused", unreported=233)]
    pumps += [PumpView(f"inv_pump{n}", "run2", f"i.{n}:k", "suspended") for n in range(1, 4)]
    pumps.append(PumpView("inv_pump4", "run2", "i.4:k", "backing-off"))
    view = GroupView(
        group_key="k", child_count=13, settled=0, wake="all", disposition="run_to_completion",
        mode="pumped", state="open", orphaned=False, age_s=5, paused=12, retrying=3,
        children=children, pumps=pumps, held=[HeldView("inv_guard", "guard", status="backing-off")],
        openers=[OpenerView("inv_opener", alive=True, status="backing-off")],
    )  # fmt: skip
    monkeypatch.setattr(inspection, "show_group", lambda admin, key: view)
    shown = run_main(["groups", "show", "k", "--admin-url", "http://127.0.0.1:1"])
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    paused_said = "which is paused (its retries ran out, or an operator paused it); last failure [500]:"
    assert out.count(paused_said) == 10
    assert "and 2 more children with an invocation paused on their path" in out
    assert "Traceback" not in out and "None" not in out
    assert (
        "child 12 is waiting on DemoCalls/flaky (inv_r), which Restate is retrying: its last failure is not"
        in out
    )
    assert "and 1 more, inv_pump4 (backing-off)" in out
    assert "pump inv_pump4 is failing, and Restate is retrying it" in out
    # A paused pump holding finished children: resume it, for a kill settles them as killed.
    assert "pump:         inv_pump0 (run2, paused, 233 of its children finished and not reported yet)" in out
    assert "Resume it (restate invocations resume ID) rather than kill it: a kill of it settles" in out
    # More than one retried: the way to kill this group's calls alone, not Restate's by-handler kill.
    assert "the operate guide's 'A child Restate is retrying' kills this group's alone" in out
    assert "LashGroup/guard inv_guard is failing, and Restate is retrying it: the group's reports" in out
    assert "opener:       inv_opener (failing, and Restate is retrying it)" in out  # not "running"


def test_groups_show_unsettled_leaves_out_the_children_that_hold_a_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wide group's table has a row per child: `--unsettled` keeps those with no rank yet, in the
    text and in `--json`, and the counts still count every child."""
    children = [
        ChildView(0, "k/0", 1, "ok", "inv_0", "completed"),
        ChildView(1, "k/1", None, None, "inv_1", "backing-off"),
    ]
    view = GroupView(
        group_key="k", child_count=2, settled=1, wake="all", disposition="run_to_completion",
        mode="pumped", state="open", orphaned=False, age_s=5, paused=0, children=children,
    )  # fmt: skip
    monkeypatch.setattr(inspection, "show_group", lambda admin, key: view)
    args = ["groups", "show", "k", "--admin-url", "http://127.0.0.1:1"]
    everything = run_main(args).stdout
    assert "k/0" in everything and "k/1" in everything
    text = run_main([*args, "--unsettled"]).stdout
    assert "k/0" not in text and "k/1" in text and "settled:      1" in text
    shown = json.loads(run_main([*args, "--unsettled", "--json"]).stdout)
    assert [c["position"] for c in shown["children"]] == [1] and shown["settled"] == 1


def test_a_rejections_code_is_read_from_its_outcomes_head_never_from_its_message() -> None:
    """`groups show`'s code of a rejected child comes from the first KiB of its stored `Err`, whose
    message comes first: a message that quotes a code is not taken for it, and a message longer than
    that leaves the code unread rather than guessed."""
    quoting = msgspec.json.encode(Err(message='the callee said "code":"500"', code="422")).decode()
    assert [m.group(1) for m in [inspection_groups._CODE.search(quoting[:1024])] if m] == ["422"]
    assert inspection_groups._CODE.search(msgspec.json.encode(Err(message="x", code=None)).decode()) is None
    long = msgspec.json.encode(Err(message="x" * 2000, code="409")).decode()
    assert inspection_groups._CODE.search(long[:1024]) is None


def test_a_group_recording_no_opener_is_held_only_by_a_caller_whose_last_message_opened_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A group whose open ended before it recorded its opener (an operator's cancel of the running
    open) is held by the running invocation that sent it that open. Not by one whose last message
    to the key closed it (an earlier incarnation's caller), nor by one whose open was killed (the
    kill killed what the open sent, and ended that caller's reads): such a group is nobody's."""
    from lash_restate.contract import GroupWakePolicy, LoserPolicy
    from lash_restate.engine import GROUP, GroupMeta, named

    meta = GroupMeta(
        child_count=1, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.RUN_TO_COMPLETION, incarnation="i-s"
    )
    bare = [inspection_groups.StoredGroup(key, meta, {}) for key in ("held", "closed", "killed")]

    def sent(caller: str, at: int, key: str, handler: str, invocation: str) -> dict[str, Any]:
        """A one-way call in a journal, in its short form, as the admin API lists it."""
        target = {"VirtualObject": {"name": named(GROUP), "key": key, "handler": handler}}
        call = {"invocation_target": target, "invocation_id": invocation}
        return {"id": caller, "at": at, "entry": json.dumps({"Command": {"OneWayCall": call}})}

    journals = [
        sent("inv_reader", 3, "held", "open", "inv_open1"),
        sent("inv_old", 5, "closed", "close", "inv_close2"),  # its last message: a close
        sent("inv_old", 2, "closed", "open", "inv_open2"),
        sent("inv_gone", 1, "killed", "open", "inv_open3"),
    ]
    monkeypatch.setattr(inspection_groups, "sql", lambda admin, query: [{"id": "inv_x"}])
    monkeypatch.setattr(inspection_groups, "rows_in", lambda admin, query, ids: journals)
    ended = {
        "inv_open1": {"completion_failure": "[409] cancelled"},
        "inv_open3": {"completion_failure": "[409] killed"},
    }
    monkeypatch.setattr(inspection_groups, "invocation_rows", lambda admin, ids: ended)
    assert inspection_groups.unrecorded_openers("admin", bare) == {"held": "inv_reader"}
    held, closed, _ = bare
    assert inspection_groups.classify(held, {}, None, "inv_reader")[0] == inspection_groups.OPEN
    assert inspection_groups.classify(closed, {}, None, None)[0] == inspection_groups.ORPHANED
    # Every group records its openers: nothing is read.
    monkeypatch.setattr(inspection_groups, "sql", lambda admin, query: pytest.fail("read"))
    assert inspection_groups.unrecorded_openers("admin", []) == {}
