"""Operator artefacts: the Dockerfile (linted, recipe run for real), Kubernetes manifests, cluster configs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
import yaml

from lash_restate.testing import free_port

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_dockerfile_passes_hadolint() -> None:
    run = subprocess.run([str(BIN / "hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_dockerfile_is_small_non_root_pinned_and_healthchecked() -> None:
    text = (ROOT / "Dockerfile").read_text()
    froms = [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]
    assert froms and all(":" in image and not image.endswith(":latest") for image in froms)
    assert "-slim" in froms[-1]
    assert "USER 10001" in text
    assert "EXPOSE 9080" in text
    assert "HEALTHCHECK" in text
    assert "--require-hashes" in text
    assert 'ENTRYPOINT ["lash-restate"]' in text


def test_lock_pins_every_runtime_dependency_with_hashes() -> None:
    lock = (ROOT / "requirements.lock").read_text()
    pinned = {
        line.split("==")[0].lower() for line in lock.splitlines() if "==" in line and not line.startswith(" ")
    }
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in declared:
        name = requirement.split("=")[0].split(">")[0].split("<")[0].strip().lower()
        assert name in pinned, f"{name} is not in requirements.lock"
    assert lock.count("--hash=sha256:") >= len(pinned)


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_the_image_recipe_installs_from_the_lock_and_serves_health(tmp_path: Path) -> None:
    """What the Dockerfile does, minus Docker (no engine here): its build stage's own `pip` steps, run
    in a venv of their own in a copy of the build context; nothing is fetched that is not hash-pinned
    (the build backend included), and the image keeps no build backend."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        # What .dockerignore leaves out of the image's build context, and what a mutation run builds.
        ignore=shutil.ignore_patterns(
            ".venv", "node_modules", ".git", ".lash", "tests", "__pycache__", "build", "mutants", "site"
        ),
    )
    steps = _pip_steps((ROOT / "Dockerfile").read_text())
    assert len(steps) == 2, steps  # the locks, then the package built with the pinned backend
    quiet = {"PIP_QUIET": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for step in steps:
        command = step.replace("/opt/lash/bin/pip", str(venv / "bin" / "pip"))
        subprocess.run(["sh", "-ec", command], cwd=source, check=True, env={**os.environ, **quiet})
    python = str(venv / "bin" / "python")
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    kept = subprocess.run([python, "-m", "pip", "show", "setuptools"], capture_output=True, text=True)
    assert kept.returncode != 0, kept.stdout  # the build backend is not in the image
    port = free_port()
    app = tmp_path / "app"
    shutil.copytree(ROOT / "examples", app / "examples")  # the image's application (COPY examples)
    # Serve with the image's interpreter and environment: nothing from the dev venv leaks in.
    image_env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(app),
        "LASH_APP": "examples.checkout:app",
    }
    process = subprocess.Popen(
        [str(venv / "bin" / "lash-restate"), "serve", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=image_env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "the endpoint exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    assert answer.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "no /health answer within 60 s"
                time.sleep(0.1)
        # The image's HEALTHCHECK, run as Docker runs it, finds the endpoint on the port it serves.
        [line] = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if 'CMD ["python"' in line]
        probe = json.loads(line.strip().removeprefix("CMD "))
        healthy = subprocess.run(
            probe, env={**image_env, "LASH_PORT": str(port)}, capture_output=True, text=True
        )
        assert healthy.returncode == 0, healthy.stderr
    finally:
        process.terminate()
        process.wait(30)


def _pip_steps(dockerfile: str) -> list[str]:
    """The build stage's `RUN /opt/lash/bin/pip ...` commands, in order."""
    build = dockerfile.split("\nFROM ", 2)[1]  # the text after the first FROM: the build stage
    return [
        line.removeprefix("RUN ") for line in build.splitlines() if line.startswith("RUN /opt/lash/bin/pip")
    ]


def test_the_build_backend_is_pinned_with_hashes_as_pyproject_names_it() -> None:
    """The image builds the package with `--no-build-isolation` from `requirements-build.lock`: that
    lock pins, with hashes, a version of every backend `[build-system]` requires."""
    from packaging.requirements import Requirement

    lock = (ROOT / "requirements-build.lock").read_text()
    pinned = dict(
        line.split(" ")[0].split("==")
        for line in lock.splitlines()
        if "==" in line and not line.startswith("#")
    )
    for required in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]:
        requirement = Requirement(required)
        assert requirement.specifier.contains(pinned[requirement.name]), (requirement, pinned)
    assert lock.count("--hash=sha256:") >= len(pinned)
    assert all("--no-build-isolation" in step for step in _pip_steps((ROOT / "Dockerfile").read_text())[1:])


def _docs(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_kubernetes_core_manifests_validate_against_the_schema() -> None:
    run = subprocess.run(
        [str(BIN / "kubernetes-validate"), "--strict", str(ROOT / "deploy/signing-key-secret.example.yaml")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_restate_cluster_has_the_fields_the_operator_requires() -> None:
    [cluster] = _docs(ROOT / "deploy/k8s/restate-cluster.yaml")
    assert (cluster["apiVersion"], cluster["kind"]) == ("restate.dev/v1", "RestateCluster")
    spec = cluster["spec"]
    assert spec["compute"]["image"].endswith(":1.7.12")
    assert spec["compute"]["replicas"] == 3
    assert isinstance(spec["storage"]["storageRequestBytes"], int)
    signing = spec["security"]["requestSigningPrivateKey"]
    assert signing["version"] == "v1"
    assert {"secretName", "key"} <= set(signing["secret"])
    config = tomllib.loads(spec["config"])
    assert config["default-replication"] == 2
    [secret] = _docs(ROOT / "deploy/signing-key-secret.example.yaml")
    assert secret["metadata"]["name"] == signing["secret"]["secretName"]
    assert signing["secret"]["key"] in secret["stringData"]


def test_restate_deployment_has_the_fields_the_operator_requires() -> None:
    [deployment] = _docs(ROOT / "deploy/k8s/lash-endpoint.yaml")
    assert (deployment["apiVersion"], deployment["kind"]) == ("restate.dev/v1beta1", "RestateDeployment")
    spec = deployment["spec"]
    register = spec["restate"]["register"]
    assert len({"cluster", "cloud", "service", "url"} & set(register)) == 1  # exactly one, per the CRD
    [cluster] = _docs(ROOT / "deploy/k8s/restate-cluster.yaml")
    assert register["cluster"] == cluster["metadata"]["name"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    [container] = spec["template"]["spec"]["containers"]
    assert {"name": "restate", "containerPort": 9080} in container["ports"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LASH_IDENTITY_KEYS"].startswith("publickeyv1_")
    # A prefix of the application's own: the operator registers without lash's check of who holds one.
    assert env["LASH_PREFIX"].isalnum() and env["LASH_PREFIX"] != "Lash"
    assert spec["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_cluster_node_configs_form_one_cluster_with_replication_two() -> None:
    nodes = [tomllib.loads((ROOT / f"deploy/cluster/node{i}.toml").read_text()) for i in (1, 2, 3)]
    assert [n["auto-provision"] for n in nodes] == [True, False, False]  # exactly one provisions
    assert all(n["default-replication"] == 2 for n in nodes)
    assert len({tuple(n["metadata-client"]["addresses"]) for n in nodes}) == 1
    assert len({n["node-name"] for n in nodes}) == 3
    addresses = [n["advertised-address"] for n in nodes]
    assert sorted(addresses) == sorted(nodes[0]["metadata-client"]["addresses"])
