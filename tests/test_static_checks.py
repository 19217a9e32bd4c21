"""The package passes its linters: ruff (style and likely bugs, the rules in pyproject.toml)
and mypy (types). Both run in CI through this test, on the installed tools of the dev
extra; they check the source tree the tests run from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=240)


@pytest.mark.skipif(not (REPO / "pyproject.toml").exists(), reason="needs the source tree")
def test_ruff_is_clean():
    out = _run("ruff", "check", "simulator", "tests", "benchmarks")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(not (REPO / "pyproject.toml").exists(), reason="needs the source tree")
def test_mypy_is_clean(tmp_path: Path):
    out = _run("mypy", "--cache-dir", str(tmp_path / "mypy"), "simulator")
    assert out.returncode == 0, out.stdout + out.stderr
