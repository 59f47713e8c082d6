"""What an invocation's journal says it sent lash's group object, as the admin API shows it
(`sys_journal.entry_json`): the open a caller waits on (`_stranded`), the wakes it registered
(`_wakes`), the close it sent and went on from (`_groups.lost_closes`)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from ._sql import quote

__all__ = ["SentToGroup", "calling", "sent_to", "target_of"]


class SentToGroup(NamedTuple):
    """A call or one-way call to the group object: its key, its handler, the invocation id Restate
    gave it, and its body; a call's ``answer`` is the completion id its answer comes back under
    (None for a one-way call)."""

    group_key: str
    handler: str
    invocation: str
    body: bytes
    answer: int | None = None


def sent_to(entry: str, group: str) -> SentToGroup | None:
    """The call or one-way call to the group object ``group`` (its service name) that a journal entry
    (a `Call` or `OneWayCall` command's ``entry_json``) holds. None for any other entry, or one this
    release cannot read (a journal of another protocol version), which a listing passes over."""
    try:
        command = json.loads(entry)["Command"]
        call = command["OneWayCall"] if "OneWayCall" in command else command["Call"]
        request = call["request"]
        found = _to_group(request, group, bytes(request["parameter"]))
        if found is None or "result_completion_id" not in call:
            return found
        return found._replace(answer=int(call["result_completion_id"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def target_of(entry_lite: str, group: str) -> SentToGroup | None:
    """`sent_to` of a `OneWayCall`'s ``entry_lite_json``, which leaves out the body (``b""``): cheap to
    read for every call an invocation sent."""
    try:
        return _to_group(json.loads(entry_lite)["Command"]["OneWayCall"], group, b"")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _to_group(call: dict[str, Any], group: str, body: bytes) -> SentToGroup | None:
    """A call's target and invocation id (both forms of an entry hold them alike), if ``group``'s."""
    target = call["invocation_target"].get("VirtualObject") or {}
    if target.get("name") != group:
        return None
    return SentToGroup(str(target["key"]), str(target["handler"]), str(call["invocation_id"]), body)


def calling(group: str, *handlers: str) -> str:
    """A SQL condition on `sys_journal`: the entry calls one of ``handlers`` of the group object
    ``group``, as its short form (``entry_lite_json``) shows it. A handler matches by prefix (`open`
    also matches `open_parts`), so read each row with `sent_to` too. The server filters on the short
    form, so the bodies of the group's other calls (a pump's report carries outcomes) are not read."""
    return (
        "("
        + " OR ".join(
            "entry_lite_json LIKE " + quote(f'%{group}%"handler":"{handler}%') for handler in handlers
        )
        + ")"
    )
