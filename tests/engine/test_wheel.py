"""The library as a user installs it: a built wheel, in a fresh virtualenv, next to the user's own pins."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from lash_restate._http import tls
from lash_restate.registration import register_deployment
from lash_restate.testing import LocalStack, free_port
from lash_restate.testing.processes import restate_server_binary

ROOT = Path(__file__).resolve().parents[2]
# The user pins another patch version of a dependency lash-restate shares (the lock has httpx 0.28.1).
USER_PIN = "httpx==0.28.0"
# One worker runs both tests, and the fixture lives for the session (the worker may run other modules'
# tests between them), so the wheel and its virtualenv are built once per run.
# The session fixture builds the wheel and installs it: on a busy machine past the default 120 s.
pytestmark = [pytest.mark.xdist_group("wheel"), pytest.mark.timeout(900)]

# The user's environment: nothing of this checkout on the path (a PYTHONPATH naming its `src`, as a run
# of the suite from a worktree sets, would hand pip an installed-looking lash-restate to skip).
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="session")
def user_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the built wheel installed next to the user's own pin: its python."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    [wheel] = dist.glob("lash_restate-*.whl")
    assert list(dist.glob("lash_restate-*.tar.gz")), "no sdist was built"

    venv = tmp_path / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel), USER_PIN],
        capture_output=True,
        text=True,
        timeout=600,
        env=USER_ENV,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return python


def test_the_wheel_installs_beside_an_application_pinning_its_own_patch_version(
    user_venv: Path, tmp_path: Path
) -> None:
    python = user_venv
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, env=USER_ENV)
    assert check.returncode == 0, check.stdout
    version = subprocess.run(
        [str(python), "-c", "import httpx; print(httpx.__version__)"], capture_output=True, text=True
    )
    assert version.stdout.strip() == USER_PIN.split("==")[1]  # the user's pin held

    port = free_port()
    app_dir = Path(__file__).parent / "userapp"
    with LocalStack(tmp_path / "stack") as stack:
        stack.add_server()
        stack.start_servers()
        app = subprocess.Popen(
            [str(python), str(app_dir / "userapp.py"), "--port", str(port)],
            cwd=tmp_path,  # nothing of this checkout is importable but the installed wheel
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=USER_ENV,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert app.poll() is None, "the user's application exited"
                try:
                    if (
                        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1, verify=tls()).status_code
                        == 200
                    ):
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the user's application never answered /health"
                time.sleep(0.1)
            register_deployment(stack.admin_url, f"http://127.0.0.1:{port}")
            answer = httpx.post(f"{stack.ingress_url}/UserApp/hello", json="wheel", timeout=60, verify=tls())
            assert answer.status_code == 200, answer.text
            assert answer.json() == "hello wheel"
        finally:
            app.terminate()
            app.wait(30)


def test_dev_works_for_a_pip_user_with_a_server_on_path_and_says_how_to_get_one_without(
    user_venv: Path, tmp_path: Path
) -> None:
    """No checkout, no node_modules, no restate.toml: `lash-restate dev` from the wheel runs the
    restate-server on PATH, and without one names the pinned version and how to get it."""
    dev = [str(user_venv.with_name("lash-restate")), "dev", "--once"]
    clean = {k: v for k, v in USER_ENV.items() if k not in ("LASH_RESTATE_SERVER", "PATH")}
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    without = subprocess.run(
        dev, cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**clean, "PATH": "/usr/bin:/bin"}
    )
    assert without.returncode == 1
    assert "npm install --save-dev @restatedev/restate-server@1.7.12" in without.stderr, without.stderr
    assert "Traceback" not in without.stderr

    server = restate_server_binary()  # this checkout's pinned one, put on the user's PATH
    path = f"{server.parent}:/usr/bin:/bin"
    env = {**clean, "PATH": path, "TMPDIR": str(temporary)}
    ran = subprocess.run(dev, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "winner: arm" in ran.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"] and list(temporary.iterdir()) == []
