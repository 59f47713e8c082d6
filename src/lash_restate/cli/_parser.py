"""The command line: every command, its flags and its help, as `argparse` parses them."""

from __future__ import annotations

import argparse
import os

from ._common import ADMIN_HELP, PREFIX_HELP, SERVE_PREFIX_HELP, lash_version
from ._groups import (
    groups_close,
    groups_list,
    groups_redispatch,
    groups_show,
    groups_staged,
    groups_stranded,
)
from ._rollback import rollback_check
from ._serve import dev_command, register_command, serve_command

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lash-restate", description=__doc__)
    parser.add_argument("--version", action="version", version=f"lash-restate {lash_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser(
        "serve",
        help="serve the deployment endpoint (hypercorn or granian, HTTP/2 cleartext)",
        description="Serve the endpoint. Every flag also reads an environment variable (in brackets); "
        "flags win.",
    )
    serve.add_argument("--host", help="bind address [LASH_HOST] (default 0.0.0.0)")
    serve.add_argument("--port", type=int, help="port [LASH_PORT] (default 9080)")
    serve.add_argument(
        "--resolver",
        help="module:attribute of your GroupExecutors: lash's services and your tools [LASH_RESOLVER]",
    )
    serve.add_argument(
        "--app",
        help="module:attribute of an app built with lash_restate.app(...), served as it is [LASH_APP]",
    )
    serve.add_argument(
        "--with-turn",
        action="store_true",
        help="also bind the LashTurn driver and the demo call targets [LASH_WITH_TURN]",
    )
    serve.add_argument(
        "--identity-key",
        action="append",
        help="accept only requests signed with this Restate key (publickeyv1_…); repeatable "
        "[LASH_IDENTITY_KEYS, comma-separated]",
    )
    serve.add_argument(
        "--batch-from",
        type=int,
        help="groups with at least this many children settle in batches through one pump invocation "
        "that starts them (narrower groups with a call child through a pump too) "
        "[LASH_BATCH_FROM] (default 3)",
    )
    serve.add_argument(
        "--server",
        choices=["hypercorn", "granian"],
        help="the HTTP server, in this process either way [LASH_SERVER] (default hypercorn; granian needs "
        "the granian extra: pip install 'lash-restate[granian]')",
    )
    serve.add_argument("--prefix", help=SERVE_PREFIX_HELP)
    serve.add_argument(
        "--app-name",
        help="name this application on lash's services, so an upgrade keeps its identity whatever "
        "services it adds, removes or renames [LASH_APP_NAME] (with --app: lash.app(..., name=...))",
    )
    serve.add_argument(
        "--admin-url",
        help="check at start, through this admin API, that no other application serves lash's services "
        "under this prefix; refuse to start (exit 4) if one does; also where children check a declared "
        "call target [RESTATE_ADMIN_URL, then LASH_ADMIN_URL] (default: no check)",
    )
    serve.add_argument(
        "--take-over",
        action="store_true",
        help="start even though another application serves lash's services under this prefix "
        "[LASH_TAKE_OVER]",
    )
    serve.add_argument("-v", "--verbose", action="store_true", help="log every group event [LASH_VERBOSE]")
    serve.set_defaults(run=serve_command)

    register = sub.add_parser("register", help="register an endpoint with a Restate admin API")
    register.add_argument("--admin-url", help=ADMIN_HELP)
    register.add_argument("--json", action="store_true", help="print the admin API's answer as JSON")
    register.add_argument("--endpoint-url", default="http://127.0.0.1:9080")
    register.add_argument("--force", action="store_true", help="overwrite an existing deployment")
    register.add_argument(
        "--take-over",
        action="store_true",
        help="register even though lash's services under its prefix belong to another application's "
        "deployment (refused otherwise, exit 4)",
    )
    register.set_defaults(run=register_command)

    groups = sub.add_parser("groups", help="inspect open groups through the admin API, and close one")
    groups_sub = groups.add_subparsers(dest="groups_command", required=True, metavar="SUBCOMMAND")
    for name, helptext, run in (
        (
            "list",
            "every open group with its child count, settled count, wake rule, disposition, settlement "
            "mode, state (open: an opener runs; parked: its latest opener returned normally, so a "
            "continuation holds it; orphaned: nobody does), age, paused invocations on its path (its "
            "children's, their calls', its pumps'), missed children and reclaim time",
            groups_list,
        ),
        (
            "show",
            "one open group: its state and why, its openers, when it was opened, its pumps not yet "
            "completed (a paused one named), and every child (with what Restate paused or is retrying "
            "on its path, and the last failure)",
            groups_show,
        ),
        (
            "close",
            "close one group as its caller would: cancel its unsettled children if its losers are "
            "Cancel (or with --cancel), release its outcomes, delete its state. Refuses a parked or "
            "open group unless --force; a group that is not open is left alone (exit 0)",
            groups_close,
        ),
        (
            "redispatch",
            "run again the children whose runner was missing (`groups show` marks them missed: their "
            "run ended with no outcome), once a deployment serves them again; the waiting caller then "
            "reads their ranks, no reopen needed. A child runs again only if it has no outcome",
            groups_redispatch,
        ),
        (
            "staged",
            "what pumps hold that no group will read: the children an open too large for one message "
            "staged with its pumps, left by an opener that ended before it sent the open, and the "
            "outcomes a pump kept for a group that is gone (a killed pump's, or a completed one's whose "
            "group's record was deleted). --release frees them",
            groups_staged,
        ),
        (
            "stranded",
            "what waits for what nothing will answer: a caller on the answer of an open that Restate "
            "killed or cancelled (`restate invocations kill` of a `LashGroup/open`, say), or on a rank "
            "of a group whose record was deleted (`restate state clear`) after its guard was killed; "
            "an event child whose event's state was deleted. --resend sends each open again as a "
            "reopen (read from the caller's journal): a reopening caller goes on, one whose first open "
            "was killed ends with group_not_open; has each gone group look at its callers' wakes "
            "again, which ends them with group_not_open; and has each event subscribe its child again",
            groups_stranded,
        ),
    ):
        cmd = groups_sub.add_parser(name, help=helptext, description=helptext)
        if name in ("show", "close"):
            cmd.add_argument(
                "key", type=_text, help="the group key, {scope_id}:group:{batch_id}:{occurrence}"
            )
        if name == "show":
            cmd.add_argument(
                "--unsettled",
                action="store_true",
                help="only the children that hold no rank yet, in the table and in --json (a wide "
                "group's table has a row per child)",
            )
        elif name == "staged":
            cmd.add_argument("--release", action="store_true", help="release the parts listed")
            cmd.add_argument(
                "--key",
                type=_text,
                help="only this group's key: its pumps' parts and outcomes, and its children's "
                "(a child's key is {group key}/{position} unless its caller named its replay keys)",
            )
        elif name == "stranded":
            cmd.add_argument("--caller", type=_text, help="only what this invocation (its id) waits on")
            cmd.add_argument(
                "--check",
                action="store_true",
                help="exit 6 if anything is listed (and not sent again): an alarm for a cron",
            )
            cmd.add_argument(
                "--key",
                type=_text,
                help="only this group's key (its event children too), or this event's name",
            )
            cmd.add_argument(
                "--resend",
                action="store_true",
                help="send each open listed again, as a reopen, each gone group's look at its wakes, "
                "and each lost subscription",
            )
            cmd.add_argument(
                "--sent-before",
                type=_seconds,
                default=60,  # inspection's SENT_BEFORE_S, which the parser does not import (start-up)
                metavar="SECONDS",
                help="list an open (or a subscription) Restate does not know only once it was sent this "
                "long ago (sooner, it may be on its way); a caller's wakes are listed at once "
                "[default 60]",
            )
        elif name == "redispatch":
            cmd.add_argument("key", nargs="?", type=_text, help="the group key (or --all)")
            cmd.add_argument("--all", action="store_true", help="every open group with missed children")
        else:
            only = cmd.add_mutually_exclusive_group()  # --orphaned is --state orphaned: one or the other
            only.add_argument(
                "--orphaned", action="store_true", help="only groups none of whose openers holds them"
            )
            only.add_argument(
                "--state", choices=["open", "parked", "orphaned"], help="only groups in this state"
            )
        if name in ("close", "redispatch", "stranded"):
            cmd.add_argument(
                "--ingress-url",
                help="Restate ingress, where the request is sent [RESTATE_INGRESS_URL, then "
                "LASH_INGRESS_URL, then the one the admin API advertises; default "
                "http://127.0.0.1:8080]",
            )
        if name == "close":
            cmd.add_argument(
                "--cancel",
                action="store_true",
                help="cancel the unsettled children of a RunToCompletion group too (a Cancel group's are)",
            )
            cmd.add_argument(
                "--force",
                action="store_true",
                help="close a parked group, or an orphaned one whose handle an opener saved (a "
                "continuation that resumes it then finds it closed), or an open one (its running "
                "opener's next read fails)",
            )
        cmd.add_argument(
            "--admin-url",
            help=ADMIN_HELP,
        )
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        # The endpoint's own variable, so a shell in its pod (kubectl exec) reads its groups by their names.
        cmd.add_argument("--prefix", default=os.environ.get("LASH_PREFIX") or "Lash", help=PREFIX_HELP)
        cmd.set_defaults(run=run)

    helptext = (
        "what stands between this release and registering the baseline release again (a rollback): "
        "groups this release opened, event children it subscribed, invocations pending for handlers "
        "the baseline does not serve, stored rejections carrying metadata. Exit 0 when nothing does"
    )
    rollback = sub.add_parser("rollback-check", help=helptext, description=helptext)
    rollback.add_argument(
        "--kill-pending",
        action="store_true",
        help="first kill what is pending for handlers the baseline does not serve (run it just before "
        "registering the baseline)",
    )
    rollback.add_argument("--admin-url", help=ADMIN_HELP)
    rollback.add_argument("--json", action="store_true", help="machine-readable output")
    rollback.add_argument("--prefix", default=os.environ.get("LASH_PREFIX") or "Lash", help=PREFIX_HELP)
    rollback.set_defaults(run=rollback_check)

    dev = sub.add_parser("dev", help="start restate-server and the endpoint, register, run a demo race")
    dev.add_argument("--once", action="store_true", help="exit after the demo instead of serving")
    dev.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="serve your application (built with lash.app, found from this directory) instead of the "
        "demo, which then does not run",
    )
    dev.add_argument(
        "--keep",
        action="store_true",
        help="keep the server's data and the logs after it stops (default: removed, unless it failed)",
    )
    dev.set_defaults(run=dev_command)
    return parser


def _text(value: str) -> str:
    """A command-line argument as text: bytes that are not UTF-8 (which Python keeps as lone
    surrogates) could not be sent to Restate, so they are refused here, in one line."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{value!r} is not UTF-8 text") from None
    return value


def _seconds(value: str) -> int:
    """A whole number of seconds, 0 or more."""
    try:
        seconds = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of seconds") from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is below 0")
    return seconds
