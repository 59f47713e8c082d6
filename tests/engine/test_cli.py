"""The operator surface as a newcomer meets it: `lash-restate dev --once` on real processes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from lash_restate import inspection
from lash_restate._http import tls
from lash_restate.inspection import (
    ChildView,
    CloseResult,
    GroupView,
    HeldView,
    InspectionError,
    StrandedOpen,
    StrandedSubscription,
    StrandedWakes,
    list_open_groups,
)
from lash_restate.testing import LocalStack, free_port
from tests.conformance.builders import Scope, close, echo, event, next_, open_
from tests.engine.cli_main import run_main


@pytest.mark.restate  # `lash-restate dev` starts a server in its own process
def test_dev_once_runs_the_stack_and_a_demo_race_then_cleans_up(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "restate.toml").write_text((repo / "restate.toml").read_text())
    temporary = tmp_path / "tmp"  # where its stack lives while it runs
    temporary.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "lash_restate", "dev", "--once"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "registered deployment" in out
    # Where `lash-restate groups` finds this stack's admin API (it listens on a free port).
    admin = re.search(r"admin API and UI (\S+)", out)
    assert admin and f"its groups: RESTATE_ADMIN_URL={admin[1]} lash-restate groups list\n" in out
    # Which arm wins depends on the arms' delays, so the test checks the shape, not the timing.
    ranks = re.findall(r"rank (\d): arm (\d)", out)
    assert [r for r, _ in ranks] == ["1", "2", "3"]
    assert sorted(arm for _, arm in ranks) == ["0", "1", "2"]
    assert f"winner: arm {ranks[0][1]} (" in out
    assert "your own application on such a stack: lash-restate dev --app MODULE:ATTR\n" in out
    assert "stopped restate-server and the endpoint\n" in out
    # Nothing is left behind: not the server's data, not the logs.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["restate.toml", "tmp"]
    assert list(temporary.iterdir()) == []


GREETER = """
from datetime import timedelta

import restate

import lash_restate as lash

greeter = restate.Service("Greeter")


@greeter.handler()
async def hello(ctx: restate.Context, name: str) -> list[str]:
    return await lash.all(ctx, [lash.tool("greet", {"name": name})])


@greeter.handler()
async def pay(ctx: restate.Context, amount: int) -> object:
    charge = lash.call("Payments", "charge", amount)  # declared below, served by no deployment
    return await lash.race(ctx, [charge, lash.sleep(timedelta(seconds=1))], losers=lash.CANCEL)


async def greet(args: dict[str, str]) -> str:
    return f"hello {args['name']}"


tools = lash.ToolRegistry({"greet": greet})
app = lash.app(greeter, tools=tools, external=[lash.external("Payments", "charge")])
"""


@pytest.mark.restate  # `lash-restate dev` starts a server in its own process
def test_dev_serves_your_application_until_stopped_then_cleans_up(tmp_path: Path) -> None:
    """`lash-restate dev --app greeter:app`: your application served from this directory, registered,
    its handlers answering through the ingress (a group of its own tool among them; a call to a
    declared target nobody serves refused at the open), until SIGTERM stops it and leaves nothing
    behind."""
    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "restate.toml").write_text((repo / "restate.toml").read_text())
    (tmp_path / "greeter.py").write_text(GREETER)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    dev = subprocess.Popen(
        [sys.executable, "-m", "lash_restate", "dev", "--app", "greeter:app"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    try:
        assert dev.stdout is not None
        lines = []
        for line in dev.stdout:  # what it says as it starts, up to where it serves
            lines.append(line)
            if "press Ctrl-C" in line:
                break
        said = "".join(lines)
        assert "Greeter" in said and "LashGroup" in said, said
        [ingress] = re.findall(r"call its handlers at (http://\S+)/SERVICE/HANDLER", said)
        # Each of the application's own handlers, and none of lash's, by where the ingress reaches it.
        urls = re.findall(r"  POST (\S+)", said)
        assert urls == [f"{ingress}/Greeter/hello", f"{ingress}/Greeter/pay"], said
        answered = httpx.post(f"{ingress}/Greeter/hello", json="ada", timeout=60)
        assert answered.status_code == 200 and answered.json() == ["hello ada"], answered.text
        # dev tells the endpoint its admin API: a call no deployment serves is refused at the open,
        # not retried by Restate where the race's cancel would not reach it.
        refused = httpx.post(f"{ingress}/Greeter/pay", json=5, timeout=60)
        assert refused.status_code == 404 and "[child_unroutable]" in refused.text, refused.text
    finally:
        dev.terminate()
        rest, err = dev.communicate(timeout=60)
    assert dev.returncode == 0, err
    assert "stopped restate-server and the endpoint\n" in rest
    # Python's own cache of the imported greeter (where bytecode is written) is not dev's to remove.
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")
    assert left == ["greeter.py", "restate.toml", "tmp"]
    assert list(temporary.iterdir()) == []


def test_dev_without_a_restate_server_says_how_to_get_one_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pip user has no node_modules and no `make setup`: dev names the pinned server and each way
    to get it, before it starts or writes anything."""
    from lash_restate import cli
    from lash_restate.testing import processes

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LASH_RESTATE_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no restate-server on it
    monkeypatch.setattr(processes, "_HERE", tmp_path)  # installed where no node_modules are above
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    assert cli.main(["dev", "--once"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "lash-restate dev: restate-server not found. lash runs the pinned restate-server 1.7.12"
    )
    assert "npm install --save-dev @restatedev/restate-server@1.7.12" in err
    assert "https://github.com/restatedev/restate/releases/download/v1.7.12/restate-server-" in err
    assert "LASH_RESTATE_SERVER" in err and "make setup" not in err
    assert list(tmp_path.iterdir()) == [temporary] and list(temporary.iterdir()) == []


def test_the_pinned_server_version_is_the_one_package_json_installs() -> None:
    from lash_restate.testing.processes import SERVER_PACKAGE, SERVER_VERSION

    repo = Path(__file__).resolve().parents[2]
    assert json.loads((repo / "package.json").read_text())["dependencies"][SERVER_PACKAGE] == SERVER_VERSION


def command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command itself, in a fresh interpreter: for what serves, binds a port or loads an app."""
    return subprocess.run(
        [sys.executable, "-m", "lash_restate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def lash(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command through its `main(argv)` in this process (tests/engine/cli_main.py): for argument
    and setting refusals, help, `register` and `groups`, which end before anything is served."""
    return run_main(list(args), env)


async def test_groups_list_and_show_against_a_running_stack(stack: LocalStack) -> None:
    s = Scope()
    kept = s.group([event(s.event("a")), echo(1)], wake="first")
    closed = s.group([echo(2)], batch="closed")
    await stack.turn(open_(kept), next_())
    await stack.turn(open_(closed), close())
    admin = stack.server.admin_url
    # The opener's close is a sent message (decision 21): the listing follows it a moment later.
    async with asyncio.timeout(30):
        while True:
            if s.key(batch="closed") not in {g.group_key for g in list_open_groups(admin)}:
                break
            await asyncio.sleep(0.05)

    listed = lash("groups", "list", "--json", "--admin-url", admin)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert isinstance(row.pop("age_s"), int)
    assert row.pop("incarnation").endswith("-s")  # this release's (a rollback must leave none open)
    assert row == {
        "group_key": s.key(),
        "child_count": 2,
        "settled": 1,
        "wake": "first",
        "disposition": "run_to_completion",
        "mode": "direct",
        "layout": "flat",
        "state": "parked",  # its only opener, the turn, returned normally with the group open
        "orphaned": False,
        "paused": 0,
        "missed": 0,
        "retrying": 0,
        "reclaim_at": None,
    }
    table = lash("groups", "list", "--admin-url", admin)
    assert table.stdout.splitlines()[0].split() == [
        "GROUP_KEY",
        "CHILD_COUNT",
        "SETTLED",
        "WAKE",
        "DISPOSITION",
        "MODE",
        "LAYOUT",
        "STATE",
        "AGE",
        "PAUSED",
        "RETRYING",
        "MISSED",
        "RECLAIM",
    ]
    assert s.key() in table.stdout

    shown = lash("groups", "show", s.key(), "--json", "--admin-url", admin)
    assert json.loads(shown.stdout)["settled"] == 1
    human = lash("groups", "show", s.key(), "--admin-url", admin)
    assert "child_count:  2" in human.stdout
    # Said as a reader says it: never Python's `False` or `None`.
    assert "orphaned:     no" in human.stdout and "reclaim_at:   -" in human.stdout, human.stdout
    assert not {"True", "False", "None"} & set(human.stdout.split()), human.stdout  # its children's too
    missing = lash("groups", "show", s.key(batch="closed"), "--admin-url", admin)
    assert missing.returncode == 3
    # A group whose record was deleted under a waiting caller shows as none: the message says where to look.
    assert "no open group" in missing.stderr and "lash-restate groups stranded" in missing.stderr


def test_a_listing_whose_reader_went_away_ends_quietly_as_sigpipe_ends_a_command(stack: LocalStack) -> None:
    """`lash-restate groups list | head -1` on a long listing: the reader closes the pipe before
    the command has written; it ends as a command SIGPIPE ends (141), with no traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: every write meets a closed pipe
    try:
        listed = subprocess.run(
            [sys.executable, "-m", "lash_restate", "groups", "list", "--admin-url", stack.server.admin_url],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert (listed.returncode, listed.stderr) == (141, "")
    # Started with no stdout at all (`>&-`, a supervisor's): Python gives it none (argparse then
    # writes the version to stderr), and the command ends as it would with one.
    closed = subprocess.run(
        [sys.executable, "-m", "lash_restate", "--version"],
        preexec_fn=lambda: os.close(1),  # in the child only, before it starts
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    assert closed.returncode == 0 and "Traceback" not in closed.stderr, closed.stderr


def test_unreachable_or_wrong_admin_urls_get_one_clear_line(stack: LocalStack) -> None:
    nowhere = lash("groups", "list", "--admin-url", f"http://127.0.0.1:{free_port()}")
    assert nowhere.returncode == 1
    assert nowhere.stderr.count("\n") == 1
    assert "cannot reach the Restate admin API" in nowhere.stderr
    assert "Traceback" not in nowhere.stderr
    wrong = lash("groups", "list", "--admin-url", stack.server.ingress_url)  # the ingress, not the admin API
    assert wrong.returncode == 1
    assert "Traceback" not in wrong.stderr
    assert wrong.stderr.startswith("lash-restate: ")
    garbled = lash("groups", "list", "--admin-url", "http://127.0.0.1:abc")  # no URL at all
    assert garbled.returncode == 1 and garbled.stderr.count("\n") == 1, garbled.stderr
    assert garbled.stderr.startswith("lash-restate: cannot reach"), garbled.stderr


def test_a_listing_under_a_prefix_no_deployment_serves_says_so(stack: LocalStack) -> None:
    """A mistyped `--prefix` read as an empty cluster ("no open groups"): the listing says that no
    deployment serves that prefix's group object. `--json` stays a list, empty."""
    admin = ["--admin-url", stack.server.admin_url]
    typo = command("groups", "list", "--prefix", "Shop", *admin)  # a fresh process: its own prefix
    assert typo.returncode == 0 and "no deployment serves ShopGroup (is the prefix right?)" in typo.stdout, (
        typo
    )
    listed = command("groups", "list", "--prefix", "Shop", "--json", *admin)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed


def test_register_of_an_endpoint_whose_handlers_changed_needs_force(stack: LocalStack) -> None:
    """Without ``--force`` Restate keeps a deployment registered at the same URL as it was and answers
    with it: `register` says so, names what differs and ``--force``, and exits 1, instead of printing
    "registered" with the old handlers. With ``--force`` it is replaced; unchanged, it needs none."""
    stack.restart_endpoint(LASH_DEMO_CALLS_OFF="1")  # the same URL, serving fewer handlers now
    env = {"RESTATE_ADMIN_URL": stack.server.admin_url}
    kept = lash("register", "--endpoint-url", stack.endpoint.url, env=env)
    assert kept.returncode == 1, kept.stdout
    assert "registered already" in kept.stderr and "--force" in kept.stderr, kept.stderr
    assert "DemoCalls/echo" in kept.stderr and "Traceback" not in kept.stderr
    forced = lash("register", "--endpoint-url", stack.endpoint.url, "--force", env=env)
    assert forced.returncode == 0 and "DemoCalls" not in forced.stdout, forced.stderr
    again = lash("register", "--endpoint-url", stack.endpoint.url, env=env)
    assert again.returncode == 0, again.stderr


def test_serve_settings_are_validated_with_one_clear_line() -> None:
    bad_port = lash("serve", "--port", "70000")
    assert bad_port.returncode == 2
    assert "port" in bad_port.stderr
    assert "Traceback" not in bad_port.stderr
    bad_key = lash("serve", env={"LASH_IDENTITY_KEYS": "not-a-key"})
    assert bad_key.returncode == 2
    assert "LASH_IDENTITY_KEYS" in bad_key.stderr
    no_batches = lash("serve", "--batch-from", "0")
    assert no_batches.returncode == 2
    assert "batch_from" in no_batches.stderr and "Traceback" not in no_batches.stderr
    no_such_server = lash("serve", env={"LASH_SERVER": "uvicorn"})
    assert no_such_server.returncode == 2
    assert "LASH_SERVER" in no_such_server.stderr and "Traceback" not in no_such_server.stderr


@pytest.mark.parametrize("server", ["hypercorn", "granian"])
def test_serve_on_a_port_in_use_or_a_host_not_found_says_so_in_one_line(server: str) -> None:
    """A port another process listens on, or a host that resolves to nothing, is one line naming the
    address and what to change, exit 2, under either server: never its traceback (granian's carried
    a Rust backtrace), nor a second endpoint sharing the port (granian binds with SO_REUSEPORT)."""
    env = {"LASH_RESOLVER": "lash_restate.testing.tools:demo_tools", "LASH_SERVER": server}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = command("serve", "--host", "127.0.0.1", "--port", str(port), env=env)
    nowhere = command("serve", "--host", "no-such-host.invalid", "--port", str(free_port()), env=env)
    for run, says in (
        (busy, f"cannot listen on 127.0.0.1:{port}"),
        (nowhere, "cannot listen on no-such-host"),
    ):
        assert run.returncode == 2, run.stderr
        [line] = [line for line in run.stderr.splitlines() if line.startswith("lash-restate:")]
        assert says in line and ("--port" in line or "--host" in line), run.stderr
        assert "Traceback" not in run.stderr


@pytest.mark.parametrize("built", ["restate.app", "lash.app"])
def test_serve_of_an_app_that_serves_no_lash_services_warns_at_start(tmp_path: Path, built: str) -> None:
    """A plain `restate.app(...)` served with `--app` would answer each lash combinator in its
    handlers with 501: serve says so when it starts, and how to build it; `lash.app(...)` starts
    without the warning."""
    (tmp_path / "plainapp.py").write_text(
        "import restate\nimport lash_restate as lash\n"
        "svc = restate.Service('Plain')\n\n"
        "@svc.handler()\nasync def go(ctx: restate.Context) -> object:\n"
        "    return await lash.all(ctx, [lash.tool('echo', {'value': 1})])\n\n"
        + (
            "app = restate.app([svc])\n"
            if built == "restate.app"
            else "from lash_restate.testing import demo_tools\napp = lash.app(svc, tools=demo_tools())\n"
        )
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    port = free_port()
    args = [sys.executable, "-m", "lash_restate", "serve", "--app", "plainapp:app", "--host", "127.0.0.1"]
    with subprocess.Popen(
        [*args, "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as served:
        deadline = time.monotonic() + 30
        while served.poll() is None and time.monotonic() < deadline:  # until it serves
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        served.terminate()
        _, err = served.communicate(timeout=30)
    warned = [line for line in err.splitlines() if "warning" in line and "lash.app(...)" in line]
    assert bool(warned) == (built == "restate.app"), err


def test_serve_under_granian_without_the_extra_names_the_extra(tmp_path: Path) -> None:
    """Decision 33: granian is optional; asking for it where it is missing says how to install it."""
    (tmp_path / "granian").mkdir()  # shadows the installed granian: importing it fails
    (tmp_path / "granian" / "__init__.py").write_text("raise ImportError('granian is not here')\n")
    env = {"PYTHONPATH": str(tmp_path), "LASH_RESOLVER": "lash_restate.testing.tools:demo_tools"}
    missing = command("serve", "--server", "granian", "--port", str(free_port()), env=env)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        "lash-restate: granian is not installed: pip install 'lash-restate[granian]'"
    )


def test_every_command_has_help() -> None:
    for argv in (
        ["--help"],
        ["serve", "--help"],
        ["register", "--help"],
        ["groups", "list", "--help"],
        ["groups", "show", "--help"],
        ["groups", "close", "--help"],
        ["dev", "--help"],
    ):
        shown = lash(*argv)
        assert shown.returncode == 0
        assert "usage: lash-restate" in shown.stdout


async def test_logs_are_json_lines_with_group_key_and_invocation_id_and_quiet_by_default(
    tmp_path: Path,
) -> None:
    stack = LocalStack(tmp_path)
    stack.add_server()
    verbose = stack.add_endpoint("verbose", args=("--with-turn", "-v"))
    quiet = stack.add_endpoint("quiet", args=("--with-turn",))
    with stack.start(register=False):
        for endpoint in (verbose, quiet):
            stack.register(endpoint)
            s = Scope()
            await stack.turn(open_(s.group([echo(1)])), next_(), close())
            async with asyncio.timeout(30):  # the close is sent (decision 21): it runs a moment later
                while True:
                    if s.key() not in {g.group_key for g in list_open_groups(stack.admin_url)}:
                        break
                    await asyncio.sleep(0.05)
            endpoint.stop()
    lines = [
        json.loads(line)
        for line in (tmp_path / "verbose.log").read_text().splitlines()
        if line.startswith("{")
    ]
    events = {line["event"] for line in lines if "event" in line}
    assert {"endpoint.serving", "group.opened", "group.ranked", "group.closed"} <= events
    opened = next(line for line in lines if line.get("event") == "group.opened")
    assert opened["group_key"].endswith(":group:b:0")
    assert opened["invocation_id"].startswith("inv_")
    assert opened["level"] == "info"
    quiet_lines = [
        json.loads(line) for line in (tmp_path / "quiet.log").read_text().splitlines() if line.startswith("{")
    ]
    # Quiet: the endpoint's own start and stop, one line each, and no group's events.
    assert [line["event"] for line in quiet_lines if line["level"] == "info"] == [
        "endpoint.serving",
        "endpoint.stopped",
    ]


def test_serve_without_a_resolver_exits_with_one_clear_line() -> None:
    """Production has no default tools: the demo tools live in the testing package (issue: no test
    bench in production), so `serve` names what it needs instead of serving them."""
    clean = {k: v for k, v in os.environ.items() if k != "LASH_RESOLVER"}
    run = subprocess.run(
        [sys.executable, "-m", "lash_restate", "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().count("\n") == 0, run.stderr  # one line
    assert "--resolver" in run.stderr and "LASH_RESOLVER" in run.stderr
    assert "--app" in run.stderr and "LASH_APP" in run.stderr


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("os", "must be 'module:attribute'"),
        ("os:nothing_here", "cannot load resolver"),
        ("no_such_module_here:tools", "cannot load resolver"),
        ("os:sep", "is not a GroupExecutors"),
    ],
)
def test_serve_with_a_resolver_it_cannot_load_exits_2_with_one_line(spec: str, why: str) -> None:
    """A `--resolver` that names nothing loadable is a wrong command line, as an `--app` that does
    not load is: exit 2 and one line saying why, never a traceback."""
    run = run_main(["serve", "--resolver", spec, "--port", str(free_port())])
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().count("\n") == 0 and why in run.stderr, run.stderr


def test_serve_app_serves_an_application_as_it_is_and_refuses_extras(tmp_path: Path) -> None:
    """`serve --app module:attribute` serves what `lash.app(...)` built (the image's way); it takes no
    resolver or driver of its own, and a name that is no app is one clear line."""
    both = command("serve", "--app", "examples.checkout:app", "--resolver", "a:b")
    assert both.returncode == 2 and "takes no --resolver" in both.stderr
    missing = command("serve", "--app", "examples.checkout:nothing", "--port", str(free_port()))
    assert missing.returncode != 0 and "cannot load app 'examples.checkout:nothing'" in missing.stderr
    assert "Traceback" not in missing.stderr


KEY = "publickeyv1_ChjENKeMvCtRnqG2mrBK1HmPKufgFUc98K8B3ZQpFAGT"  # a key's form, nobody's key


@pytest.mark.parametrize(
    ("app", "extra", "why"),
    [
        # Each would serve requests no key signed: the keys never reached what it serves.
        ("restate.app([svc])", ("--identity-key", KEY), "was not built by lash.app(...)"),
        (
            f"lash.app(svc, identity_keys=['{KEY[:-1]}1'])",
            ("--identity-key", KEY),
            "identity keys of its own",
        ),
        (
            "lash.app(svc)",
            ("--batch-from", "2"),
            "takes no --resolver, --with-turn, --app-name or --batch-from, nor LASH_RESOLVER",
        ),
        (
            "lash.app(svc)",
            ("--identity-key", "publickeyv1_0OIl"),
            "the server logs its own as it starts with request signing: Loaded request identity key",
        ),
        ("lash.app(svc)", (), "LASH_ORPHAN_RETENTION"),
        ("lash.app(svc", ("--identity-key", KEY), "cannot load app 'keyedapp:app'"),  # a syntax error
    ],
)
def test_serve_app_refuses_what_the_app_it_serves_would_not_apply(
    tmp_path: Path, app: str, extra: tuple[str, ...], why: str
) -> None:
    """`serve --app` takes settings that only an app built by `lash.app(...)` can apply, and that app
    only if it names none of its own: any other way, one line and exit 2, never an endpoint that
    serves unsigned requests while the operator gave it a key, nor a traceback."""
    (tmp_path / "keyedapp.py").write_text(
        f"import restate\nimport lash_restate as lash\nsvc = restate.Service('Keyed')\napp = {app}\n"
    )
    env = {"PYTHONPATH": str(tmp_path), **({"LASH_ORPHAN_RETENTION": "soon"} if not extra else {})}
    run = command("serve", "--app", "keyedapp:app", "--port", str(free_port()), *extra, env=env)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().count("\n") == 0 and why in run.stderr, run.stderr


class _Registry:
    """A resolver class, as `--resolver module:_Registry` names one: made, then used."""

    def resolve(self, envelope: object) -> None:
        return None


def test_serve_makes_a_resolver_named_by_its_class() -> None:
    from lash_restate.cli._serve import load_resolver

    assert isinstance(load_resolver("tests.engine.test_cli:_Registry"), _Registry)


def test_version_names_the_installed_distribution() -> None:
    from importlib.metadata import version

    run = command("--version")  # the installed distribution, through the command itself
    assert run.returncode == 0
    assert run.stdout.strip() == f"lash-restate {version('lash-restate')}"


async def test_groups_show_lists_every_child_and_list_by_state_finds_exactly_those(
    stack: LocalStack,
) -> None:
    """An operator's view: per child its rank, outcome kind and invocation; per group its openers and
    whether any is alive. A group whose opener still waits is open; one whose opener returned is parked."""
    s = Scope()
    orphan = s.group([echo("a"), event(s.event("never"))], wake="first", batch="orphan")
    held = s.group([event(s.event("gate")), echo("b"), echo("c")], batch="held")  # pumped (3 children)
    [_, first] = await stack.turn(open_(orphan), next_())
    admin = stack.server.admin_url
    async with asyncio.TaskGroup() as tasks:
        parked = tasks.create_task(stack.turn(open_(held), next_(), next_(), next_()))
        async with asyncio.timeout(30):  # the parked opener has read both echoes and waits on the gate
            while True:
                found = lash("groups", "show", s.key(batch="held"), "--json", "--admin-url", admin)
                if found.returncode == 0 and json.loads(found.stdout)["settled"] == 2:
                    break
                await asyncio.sleep(0.05)
        parked_ = lash("groups", "list", "--state", "parked", "--json", "--admin-url", admin)
        assert [g["group_key"] for g in json.loads(parked_.stdout)] == [s.key(batch="orphan")]
        running = lash("groups", "list", "--state", "open", "--json", "--admin-url", admin)
        assert [g["group_key"] for g in json.loads(running.stdout)] == [s.key(batch="held")]
        view = json.loads(lash("groups", "show", s.key(batch="held"), "--json", "--admin-url", admin).stdout)
        assert view["state"] == "open" and view["mode"] == "pumped"
        assert [o["alive"] for o in view["openers"]] == [True]
        assert view["opened_at"] is not None
        by_position = {c["position"]: c for c in view["children"]}
        assert by_position[0]["rank"] is None and by_position[0]["outcome"] is None
        assert by_position[0]["status"] != "completed"  # the gate child is still waiting
        assert {by_position[1]["rank"], by_position[2]["rank"]} == {1, 2}
        assert by_position[1]["outcome"] == by_position[2]["outcome"] == "ok"
        assert all(c["invocation_id"].startswith("inv_") for c in view["children"])
        assert [c["replay_key"] for c in view["children"]] == [
            f"{s.key(batch='held')}/c{i}" for i in range(3)
        ]
        human = lash("groups", "show", s.key(batch="held"), "--admin-url", admin)
        assert "REPLAY_KEY" in human.stdout and "(running)" in human.stdout
        await stack.emit(s.event("gate"), "open")
    assert len(parked.result()) == 4
    shown = json.loads(lash("groups", "show", s.key(batch="orphan"), "--json", "--admin-url", admin).stdout)
    assert [c["outcome"] for c in shown["children"]] == ["ok", None]  # direct: read from the child
    assert shown["children"][0]["rank"] == 1 and first


class _TokenProxy:
    """An admin API that asks for a bearer token: a proxy in front of the real one (as a managed
    Restate does), answering 401 to any request without ``Authorization: Bearer <token>``."""

    def __init__(self, upstream: str, token: str) -> None:
        import http.server
        import threading

        import httpx

        expected = f"Bearer {token}"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.do_POST()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("authorization") != expected:
                    answer = httpx.Response(401, text='{"message":"unauthorized"}')
                else:
                    headers = {
                        k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")
                    }
                    answer = httpx.request(
                        self.command,
                        f"{upstream}{self.path}",
                        content=body,
                        headers=headers,
                        timeout=30,
                        verify=tls(),
                    )
                self.send_response(answer.status_code)
                self.send_header("content-type", answer.headers.get("content-type", "application/json"))
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_register_and_groups_honour_restate_admin_url_and_auth_token(stack: LocalStack) -> None:
    proxy = _TokenProxy(stack.admin_url, "s3cret")
    try:
        # No token: one clear line naming the variable to set, and nothing registered.
        refused = lash("groups", "list", env={"RESTATE_ADMIN_URL": proxy.url, "RESTATE_AUTH_TOKEN": ""})
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1 and "RESTATE_AUTH_TOKEN" in refused.stderr
        env = {"RESTATE_ADMIN_URL": proxy.url, "RESTATE_AUTH_TOKEN": "s3cret"}
        registered = lash("register", "--endpoint-url", stack.endpoint.url, "--force", "--json", env=env)
        assert registered.returncode == 0, registered.stderr
        assert "LashGroup" in {s["name"] for s in json.loads(registered.stdout)["services"]}
        listed = lash("groups", "list", "--json", env=env)
        assert listed.returncode == 0, listed.stderr
        assert isinstance(json.loads(listed.stdout), list)
    finally:
        proxy.close()


SHOP = """
import restate

import lash_restate as lash

shop = restate.Service("Shop")


@shop.handler()
async def ping(ctx: restate.Context, value: str) -> str:
    return value


app = lash.app(shop)


def other():
    return lash.app(shop, prefix="Other")
"""


def _discovered(cwd: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """Serve ``lash-restate serve ARGS`` (the installed command, as a user runs it) in ``cwd``; the
    names of the services it tells Restate it serves, from its discovery manifest."""
    command = Path(sys.executable).with_name("lash-restate")
    port = free_port()
    # lash's settings left out; a mutation run's own kept (its endpoints credit what they reach).
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LASH_") or k.startswith("LASH_MUTMUT_")}
    log = cwd / f"serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(command), "serve", "--host", "127.0.0.1", "--port", str(port), *args],
            cwd=cwd,
            env={**clean, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        manifest = "application/vnd.restate.endpointmanifest.v4+json"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/discover", headers={"accept": manifest}, verify=tls()
                )
            except httpx.HTTPError:
                time.sleep(0.05)
                continue
            return sorted(service["name"] for service in answer.json()["services"])
        raise AssertionError("the endpoint did not answer within 30 s")
    finally:
        process.terminate()
        process.wait(15)


def test_serve_app_finds_the_module_in_the_current_directory(tmp_path: Path) -> None:
    """As hypercorn and uvicorn do: ``lash-restate serve --app shop:app`` run where shop.py is."""
    (tmp_path / "shop.py").write_text(SHOP)
    assert _discovered(tmp_path, "--app", "shop:app") == [
        "LashChild", "LashGroup", "LashPump", "LashSignal", "Shop"
    ]  # fmt: skip


def test_serve_app_honours_prefix_from_the_flag_and_the_environment(tmp_path: Path) -> None:
    """The app's own ``lash.app(shop)`` names no prefix, so it takes the one ``--prefix`` chose."""
    (tmp_path / "shop.py").write_text(SHOP)
    shop = ["Shop", "ShopChild", "ShopGroup", "ShopPump", "ShopSignal"]
    assert _discovered(tmp_path, "--app", "shop:app", "--prefix", "Shop") == shop
    assert _discovered(tmp_path, "--app", "shop:app", env={"LASH_PREFIX": "Shop"}) == shop


def test_serve_app_with_a_prefix_its_app_contradicts_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(SHOP + "\nother()\n")
    run = subprocess.run(
        [sys.executable, "-m", "lash_restate", "serve", "--app", "shop:app", "--prefix", "Shop"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr == (
        "lash-restate: cannot load app 'shop:app': "
        "this process already names lash's services Shop*, not Other*\n"
    )


def test_list_refuses_two_filters_that_disagree() -> None:
    """`--orphaned` is `--state orphaned`: with another `--state` it was silently ignored."""
    both = lash("groups", "list", "--orphaned", "--state", "parked", "--admin-url", "http://127.0.0.1:9")
    assert both.returncode == 2 and "not allowed with argument --orphaned" in both.stderr, both


@pytest.mark.parametrize("command", ["show", "close", "redispatch"])
def test_a_group_key_that_is_not_utf8_is_refused_in_one_line(command: str) -> None:
    """A key whose bytes are not UTF-8 (the shell hands Python lone surrogates) could not be sent
    to Restate: refused as a usage error naming it, never a traceback."""
    refused = lash("groups", command, "a\udcffb", "--admin-url", "http://127.0.0.1:9")
    assert refused.returncode == 2, refused
    assert "is not UTF-8 text" in refused.stderr and "Traceback" not in refused.stderr


def test_stranded_resend_sends_each_open_on_its_own_and_says_which_was_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One open (or one group's look at a caller's wakes) refused by its `operator_resend` neither
    stops the others nor hides those sent: each line says what became of it, and the command exits 1
    (it printed nothing but the refusal, and sent none after it)."""
    opens = [
        StrandedOpen(f"inv_c{i}", f"s:group:b:{i}", "open", f"inv_o{i}", "killed", b"{}") for i in range(3)
    ]
    wakes = [
        StrandedWakes(f"inv_w{i}", f"w:group:b:{i}", "wait", f"inv_a{i}", "gone", "i", ("sign_1",))
        for i in range(2)
    ]

    def resend(admin: object, stranded: StrandedOpen, *, ingress: str | None = None) -> str:
        if stranded.caller == "inv_c1":
            raise InspectionError("the ingress answered 400 to operator_resend: [invalid_input] no")
        return f"inv_again{stranded.caller}"

    def look(admin: object, stranded: StrandedWakes, *, ingress: str | None = None) -> str:
        if stranded.caller == "inv_w0":
            raise InspectionError("the ingress answered 400 to operator_resend: [invalid_input] no")
        return f"inv_look{stranded.caller}"

    monkeypatch.setattr(inspection, "stranded_opens", lambda admin, **_: opens)
    monkeypatch.setattr(inspection, "stranded_wakes", lambda admin: wakes)
    lost = [StrandedSubscription("inv_e0", "g:group:b:0/c1", "ev-x", "inv_s0", "gone", "sign_1e")]
    monkeypatch.setattr(inspection, "stranded_subscriptions", lambda admin, **_: lost)
    monkeypatch.setattr(inspection, "resubscribe", lambda admin, s, ingress=None: f"inv_sub{s.caller}")
    monkeypatch.setattr(inspection, "resend_open", resend)
    monkeypatch.setattr(inspection, "look_again", look)
    done = lash("groups", "stranded", "--resend", "--admin-url", "http://127.0.0.1:9")
    assert done.returncode == 1, done
    assert [line.split("; ")[-1] for line in done.stdout.splitlines()] == [
        "sent again as inv_againinv_c0",
        "not sent again: the ingress answered 400 to operator_resend: [invalid_input] no",
        "sent again as inv_againinv_c2",
        "not looked at again: the ingress answered 400 to operator_resend: [invalid_input] no",
        "looked at again by inv_lookinv_w1",
        "subscribed again as inv_subinv_e0",
    ]
    # Narrowed to one caller, or one key, a resend on a shared cluster acts on nothing else.
    mine = lash("groups", "stranded", "--resend", "--caller", "inv_c2", "--admin-url", "http://127.0.0.1:9")
    assert mine.returncode == 0 and mine.stdout.splitlines()[0].endswith("sent again as inv_againinv_c2"), (
        mine
    )
    assert len(mine.stdout.splitlines()) == 1, mine.stdout
    one = lash("groups", "stranded", "--json", "--key", "w:group:b:1", "--admin-url", "http://127.0.0.1:9")
    assert [r["caller"] for r in json.loads(one.stdout)] == ["inv_w1"], one
    event = lash("groups", "stranded", "--json", "--key", "ev-x", "--admin-url", "http://127.0.0.1:9")
    assert [(r["caller"], r["waits_on"]) for r in json.loads(event.stdout)] == [("inv_e0", "event")], event
    # An event child is found by its group too (its key, a replay key, names it).
    group = lash("groups", "stranded", "--json", "--key", "g:group:b:0", "--admin-url", "http://127.0.0.1:9")
    assert [(r["caller"], r["waits_on"]) for r in json.loads(group.stdout)] == [("inv_e0", "event")], group
    none = lash("groups", "stranded", "--caller", "inv_nobody", "--admin-url", "http://127.0.0.1:9")
    assert none.stdout.strip().endswith("(of those --caller and --key name)"), none.stdout
    # --check: an alarm for a cron, 6 while anything is listed, 0 when nothing is.
    assert lash("groups", "stranded", "--check", "--admin-url", "http://127.0.0.1:9").returncode == 6
    quiet = lash(
        "groups", "stranded", "--check", "--caller", "inv_nobody", "--admin-url", "http://127.0.0.1:9"
    )
    assert quiet.returncode == 0, quiet
    listed = lash("groups", "stranded", "--json", "--admin-url", "http://127.0.0.1:9")
    assert listed.returncode == 0, listed
    rows = json.loads(listed.stdout)
    assert [(r["caller"], r["waits_on"]) for r in rows] == [
        *((f"inv_c{i}", "open") for i in range(3)),
        *((f"inv_w{i}", "wakes") for i in range(2)),
        ("inv_e0", "event"),
    ]
    assert rows[-2] == {
        "caller": "inv_w1",
        "group_key": "w:group:b:1",
        "handler": "wait",
        "sent": "inv_a1",
        "ended": "gone",
        "incarnation": "i",
        "wakes": 1,
        "guards_pending": None,
        "waits_on": "wakes",
        "resent": None,
        "refused": None,
    }


def test_stranded_still_lists_the_opens_when_the_wakes_cannot_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The callers waiting on wakes are read apart from the opens: a failure there (the admin API's
    wait, on a busy cluster) is said, and exits 1, but hides none of the stranded opens."""
    opens = [StrandedOpen("inv_c0", "s:group:b:0", "open", "inv_o0", "killed", b"{}")]

    def unreadable(admin: object) -> list[StrandedWakes]:
        raise InspectionError("the admin API answered 500: query timed out")

    monkeypatch.setattr(inspection, "stranded_opens", lambda admin, **_: opens)
    monkeypatch.setattr(inspection, "stranded_wakes", unreadable)
    monkeypatch.setattr(inspection, "stranded_subscriptions", lambda admin, **_: unreadable(admin))
    done = lash("groups", "stranded", "--admin-url", "http://127.0.0.1:9")
    assert done.returncode == 1, done
    assert done.stdout.startswith("inv_c0 waits for its open of s:group:b:0"), done.stdout
    assert "waiting on wakes could not be listed: the admin API answered 500" in done.stderr, done.stderr
    assert "waiting on a subscription could not be listed: the admin API answered 500" in done.stderr


def test_staged_still_lists_the_pumps_when_the_childrens_stores_cannot_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The children's stores are read apart from the pumps': a failure there is said, and exits 1,
    and the pumps' parts are still listed (and not said to be all there is)."""
    from lash_restate.inspection import StagedPart

    parts = [StagedPart("1:s:group:b:0", "s:group:b:0", None)]

    def unreadable(admin: object) -> list[Any]:
        raise InspectionError("a group's record cannot be read here")

    monkeypatch.setattr(inspection, "left_staged", lambda admin: parts)
    monkeypatch.setattr(inspection, "left_outcomes", unreadable)
    done = lash("groups", "staged", "--admin-url", "http://127.0.0.1:9")
    assert done.returncode == 1, done
    assert done.stdout.splitlines()[0].startswith("left 1:s:group:b:0 (group s:group:b:0"), done.stdout
    assert "the outcomes children kept could not be listed: a group's record" in done.stderr
    monkeypatch.setattr(inspection, "left_staged", lambda admin: [])
    nothing = lash("groups", "staged", "--admin-url", "http://127.0.0.1:9")
    assert nothing.returncode == 1 and "no parts left staged" not in nothing.stdout, nothing


def test_a_close_names_how_a_bounded_groups_waiting_child_will_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `RunToCompletion` close of a bounded group lists the children still to run: one running by
    its invocation, one not started by what will start it (it printed `None waiting`, next to a
    hint to cancel it by an id it does not have)."""
    key = "s:group:b:0"
    running = [
        ChildView(1, f"{key}/c1", None, None, "inv_1abc", "running"),
        ChildView(2, f"{key}/c2", None, None, None, "waiting"),
    ]
    closed = CloseResult(key, True, "parked", "run_to_completion", 0, running, pumps=["inv_1pump"])
    monkeypatch.setattr(inspection, "close_group", lambda *args, **kwargs: closed)
    done = lash("groups", "close", key, "--force", "--admin-url", "http://127.0.0.1:9")
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert f"  child 1 ({key}/c1): inv_1abc running" in lines
    assert f"  child 2 ({key}/c2): waiting; the pump inv_1pump starts it" in lines
    # The lever for a child with no ID yet is its pump's, named by its ID (it said only "cancel ID").
    assert "`restate invocations cancel inv_1pump` cancels what the pump runs and starts no more" in lines[-1]
    # Its pump not known (completed as the close was read): named by its service and key.
    closed = CloseResult(key, True, "parked", "run_to_completion", 0, running)
    monkeypatch.setattr(inspection, "close_group", lambda *args, **kwargs: closed)
    done = lash("groups", "close", key, "--force", "--admin-url", "http://127.0.0.1:9")
    assert f"  child 2 ({key}/c2): waiting; the pump LashPump/…:{key} starts it" in done.stdout.splitlines()


def test_a_close_that_leaves_many_children_running_lists_twenty_and_counts_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wide `RunToCompletion` group's close may leave thousands running: the text lists twenty and
    counts the rest; `--json` lists every one."""
    key = "s:group:w:0"
    running = [ChildView(i, f"{key}/c{i}", None, None, f"inv_{i}", "running") for i in range(25)]
    closed = CloseResult(key, True, "orphaned", "run_to_completion", 0, running)
    monkeypatch.setattr(inspection, "close_group", lambda *args, **kwargs: closed)
    done = lash("groups", "close", key, "--admin-url", "http://127.0.0.1:9")
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert "25 of its children still run, as a RunToCompletion group's do:" in lines
    assert [line for line in lines if line.startswith("  child ")] == [
        f"  child {i} ({key}/c{i}): inv_{i} running" for i in range(20)
    ]
    assert "  and 5 more (--json lists every one)" in lines
    listed = json.loads(lash("groups", "close", key, "--json", "--admin-url", "http://127.0.0.1:9").stdout)
    assert len(listed["running"]) == 25


def test_redispatch_all_and_staged_release_go_on_past_a_request_that_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One group's re-dispatch (or one part's release) that fails, an ingress that does not answer
    in time say, neither stops the others nor hides those done: each line says what became of its
    group or part, and the command exits 1 (it printed the one error alone)."""
    from types import SimpleNamespace

    from lash_restate.engine import OperatorRedispatched
    from lash_restate.inspection import StagedPart, _operator

    meta = SimpleNamespace(incarnation="i")
    groups = [SimpleNamespace(key=f"s:group:b:{i}", missed=1, meta=meta) for i in range(3)]

    def call(api: object, ingress: str, key: str, route: object, request: object) -> OperatorRedispatched:
        if key.endswith(":1"):
            raise InspectionError("the ingress gave no answer within 60 s")
        return OperatorRedispatched(dispatched=1, unroutable=0)

    monkeypatch.setattr(_operator, "read_groups", lambda *args, **kwargs: groups)
    monkeypatch.setattr(_operator, "operator_call", call)
    done = lash("groups", "redispatch", "--all", "--admin-url", "http://127.0.0.1:9")
    assert done.returncode == 1, done
    assert done.stdout.splitlines() == [
        "s:group:b:0: 1 child(ren) dispatched again",
        "s:group:b:1: not dispatched again: the ingress gave no answer within 60 s",
        "s:group:b:2: 1 child(ren) dispatched again",
    ]
    parts = [StagedPart(f"{i}:s:group:b:0", "s:group:b:0", None) for i in range(3)]

    def release(admin: object, part: StagedPart) -> None:
        if part.pump_key.startswith("1:"):
            raise InspectionError("the admin API answered 500")

    monkeypatch.setattr(inspection, "left_staged", lambda admin: parts)
    monkeypatch.setattr(inspection, "left_outcomes", lambda admin: [])
    monkeypatch.setattr(inspection, "release_staged", release)
    released = lash("groups", "staged", "--release", "--admin-url", "http://127.0.0.1:9")
    assert released.returncode == 1, released
    assert [line.split(" (group")[0] for line in released.stdout.splitlines()] == [
        "released 0:s:group:b:0",
        "not released (the admin API answered 500) 1:s:group:b:0",
        "released 2:s:group:b:0",
    ]


def test_stranded_waits_by_default_as_long_as_the_inspection_does() -> None:
    """The command line's `--sent-before` default is the inspection's, written twice so the parser
    imports no inspection at start-up."""
    from lash_restate.cli._parser import build_parser
    from lash_restate.inspection._stranded import SENT_BEFORE_S

    assert build_parser().parse_args(["groups", "stranded"]).sent_before == SENT_BEFORE_S


def test_serve_app_refuses_a_class_or_a_function_that_is_no_asgi_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--app` naming a handler or a model (a mistake a user makes) is refused as it loads; any app
    object, or a function taking scope, receive and send, is served as given."""
    from lash_restate.cli import load_app

    (tmp_path / "apps.py").write_text(
        "class Order:\n    pass\n\n"
        "async def handler(ctx, order):\n    return order\n\n"
        "async def asgi(scope, receive, send):\n    pass\n\n"
        "class App:\n    async def __call__(self, scope, receive, send):\n        pass\n\n"
        "app = App()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit, match=r"'apps:Order' is a class, not an ASGI app"):
        load_app("apps:Order")
    with pytest.raises(SystemExit, match=r"'apps:handler' is not an ASGI app \(it cannot take scope"):
        load_app("apps:handler")
    assert load_app("apps:asgi").__name__ == "asgi"
    assert type(load_app("apps:app")).__name__ == "App"


def test_show_names_a_paused_handler_of_the_groups_own_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """A paused handler of the group's own object that runs one at a time on its key (a `guard`
    paused while it ran) holds up the group: `groups show` names it, with how to go on, as it
    names a paused pump (what the listing reads is tested in tests/test_inspection.py)."""
    view = GroupView(
        group_key="s:group:b:0",
        child_count=1,
        settled=0,
        wake="all",
        disposition="cancel",
        mode="direct",
        state="open",
        orphaned=False,
        age_s=1,
        paused=1,
        held=[HeldView(invocation_id="inv_1held", handler="guard")],
    )
    monkeypatch.setattr(inspection, "show_group", lambda admin, key: view)
    shown = lash("groups", "show", "s:group:b:0", "--admin-url", "http://127.0.0.1:9")
    assert shown.returncode == 0, shown
    assert (
        "LashGroup/guard inv_1held is paused: the group's reports, reads and close queue behind it"
        in shown.stdout
    )
    assert "then resume it (restate invocations resume ID" in shown.stdout
    assert "held:" not in shown.stdout  # named once, below, not as a field of the group
