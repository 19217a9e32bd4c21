"""The wheel carries the bundled YAML folders, and an installed copy finds them.

The wheel is built in-process with hatchling (the build backend, a dev dependency): no
network, no install. Unpacking it and importing from there stands in for an install.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel_path(tmp_path_factory) -> Path:
    """A wheel of the working tree, built once for this module."""
    builder = pytest.importorskip("hatchling.builders.wheel").WheelBuilder
    out = tmp_path_factory.mktemp("wheel")
    (built,) = builder(str(REPO)).build(directory=str(out), versions=["standard"])
    return Path(built)


def _yaml_names(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.yaml")}


def test_wheel_carries_bundled_yaml(wheel_path):
    names = set(zipfile.ZipFile(wheel_path).namelist())
    for kind in ("scenarios", "hardware_profiles"):
        expected = {f"simulator/_bundled/{kind}/{n}" for n in _yaml_names(REPO / kind)}
        assert expected, f"no {kind}/*.yaml in the repository"
        assert expected <= names, sorted(expected - names)
    assert "simulator/cli/__init__.py" in names
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)


def test_wheel_declares_console_script(wheel_path):
    with zipfile.ZipFile(wheel_path) as zf:
        entry = next(n for n in zf.namelist() if n.endswith("entry_points.txt"))
        text = zf.read(entry).decode()
    assert "shardsim = simulator.cli:main" in text


def test_unpacked_wheel_finds_bundled_files(wheel_path, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel_path).extractall(site)
    code = ("import simulator.config.resources as r; "
            "print(r.bundled_dir('scenarios')); "
            "print(r.resolve_yaml('gpt3-175b-1024-a100', 'scenarios')); "
            "print(len(r.list_bundled('hardware_profiles')))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    folder, scenario, profiles = proc.stdout.split("\n")[:3]
    bundled = site / "simulator" / "_bundled"
    assert Path(folder) == bundled / "scenarios"
    assert Path(scenario) == bundled / "scenarios" / "gpt3-175b-1024-a100.yaml"
    assert int(profiles) == len(_yaml_names(REPO / "hardware_profiles"))


def test_bundled_dir_prefers_bundled_copy(tmp_path, monkeypatch):
    import simulator.config.resources as resources

    pkg = tmp_path / "simulator"
    (pkg / "_bundled" / "scenarios").mkdir(parents=True)
    (tmp_path / "hardware_profiles").mkdir()
    monkeypatch.setattr(resources, "_PKG", pkg)
    assert resources.bundled_dir("scenarios") == pkg / "_bundled" / "scenarios"
    assert resources.bundled_dir("hardware_profiles") == tmp_path / "hardware_profiles"


def test_source_tree_uses_repository_folders():
    from simulator.config.resources import bundled_dir

    if (REPO / "simulator" / "_bundled").exists():
        pytest.skip("a _bundled folder sits in the source tree")
    assert bundled_dir("scenarios") == REPO / "scenarios"


def _quickstart_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```bash\n")[1:]
    return [b.split("```", 1)[0].strip() for b in blocks]


def test_readme_quickstart_is_two_commands():
    install, test = _quickstart_commands()
    assert "pip install . " in install and "shardsim run " in install
    assert "[dev]" not in install  # a plain install runs a scenario
    assert "\n" not in install and "\n" not in test
    assert test == "pip install '.[dev]' && python -m pytest"


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "set -euo pipefail" in ci
    assert "pip install --quiet . " in ci
    assert f"\n{_quickstart_commands()[1]} " in ci
    assert os.access(REPO / ".ci" / "run", os.X_OK)
