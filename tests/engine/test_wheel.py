"""The library as a user installs it: a built wheel, in a fresh virtualenv, next to the user's own pins."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from lash_restate.registration import register_deployment
from lash_restate.testing import LocalStack, free_port

ROOT = Path(__file__).resolve().parents[2]
# The user pins another patch version of a dependency lash-restate shares (the lock has httpx 0.28.1).
USER_PIN = "httpx==0.28.0"


def test_the_wheel_installs_beside_an_application_pinning_its_own_patch_version(tmp_path: Path) -> None:
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
    )
    assert install.returncode == 0, install.stderr[-3000:]
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True)
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
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert app.poll() is None, "the user's application exited"
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the user's application never answered /health"
                time.sleep(0.1)
            register_deployment(stack.admin_url, f"http://127.0.0.1:{port}")
            answer = httpx.post(f"{stack.ingress_url}/UserApp/hello", json="wheel", timeout=60)
            assert answer.status_code == 200, answer.text
            assert answer.json() == "hello wheel"
        finally:
            app.terminate()
            app.wait(30)
