"""An earlier release of lash_restate, materialised from this repository's own git history.

`materialise` archives a commit's tree into ``.lash/baseline-<commit>/src-tree`` and builds a
virtualenv beside it (``venv``, made without pip) whose site-packages holds one ``.pth`` file: the
archived ``src/`` first, then this environment's site-packages (for the dependencies). A plain path
line in a ``.pth`` does not run that directory's own ``.pth`` files, so the current checkout's
editable install is not loaded there: the venv's ``python -m lash_restate`` runs the archived
release. The directory is reused while its ``complete`` marker is present; it is rebuilt beside
and moved into place, so an interrupted build leaves nothing that looks complete.

``$LASH_BASELINE_CACHE`` names another directory for ``.lash`` (`make mutation-engine` points its copy
of the tests, which has no git history, at this clone's).

The baseline runs on this environment's dependencies (same pins today); a later release that moves
a pin the baseline cannot run with would need ``pip install`` of the archived tree instead.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Baseline", "BaselineError", "materialise"]

REPO = Path(__file__).resolve().parents[2]


class BaselineError(RuntimeError):
    """The baseline commit could not be found or installed; the message says what to do."""


@dataclass(frozen=True)
class Baseline:
    commit: str
    root: Path  # .lash/baseline-<commit>

    @property
    def source(self) -> Path:
        return self.root / "src-tree" / "src"

    @property
    def python(self) -> str:
        return str(self.root / "venv" / "bin" / "python")

    def imported_from(self, module: str = "lash_restate", env: dict[str, str] | None = None) -> Path:
        """Where the baseline interpreter, run with ``env`` added, takes `lash_restate` from (its package
        directory) once it has imported ``module``."""
        probe = (
            f"import importlib, pathlib; importlib.import_module({module!r}); import lash_restate; "
            "print(pathlib.Path(lash_restate.__file__).parent.resolve())"
        )
        out = subprocess.run(
            [self.python, "-c", probe],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **(env or {})},
        )
        return Path(out.stdout.strip())


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, check=False)


def materialise(commit: str, cache: Path | None = None) -> Baseline:
    """The release at ``commit`` with its own interpreter, built once into ``cache`` and reused.

    Processes that ask at once (pytest-xdist workers) take turns on a lock file beside it: the
    first builds, the others find it complete (a build moves the directory it replaces away)."""
    root = (cache or Path(os.environ.get("LASH_BASELINE_CACHE") or REPO / ".lash")) / f"baseline-{commit}"
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"baseline-{commit}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return _materialise(commit, root)


def _materialise(commit: str, root: Path) -> Baseline:
    baseline = Baseline(commit, root)
    here = sysconfig.get_path("purelib")  # this environment's packages, which the baseline runs on
    marker = f"{commit}\n{here}\n"
    if (root / "complete").is_file() and (root / "complete").read_text() == marker:
        return baseline
    found = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if found.returncode != 0:
        raise BaselineError(
            f"baseline commit {commit} is not in this clone's history ({REPO}): the upgrade test needs "
            "the full history (a shallow clone lacks it: `git fetch --unshallow`)"
        )
    building = Path(tempfile.mkdtemp(prefix=f".baseline-{commit}-", dir=root.parent))
    try:
        tree = building / "src-tree"
        tree.mkdir()
        archive = _git("archive", "--format=tar", commit)
        if archive.returncode != 0:
            raise BaselineError(f"git archive {commit} failed: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        venv = building / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = _site_packages(venv)
        # Paths as they will be once moved into place: the archived source first, then our packages.
        (site / "lash_baseline.pth").write_text(f"{root / 'src-tree' / 'src'}\n{here}\n")
        (building / "complete").write_text(marker)
        shutil.rmtree(root, ignore_errors=True)  # an incomplete earlier build
        building.rename(root)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return baseline


def _site_packages(venv: Path) -> Path:
    [site] = (venv / "lib").glob("python*/site-packages")
    return site
