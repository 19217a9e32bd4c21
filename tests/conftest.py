"""Fixtures shared by the test suite, named for what they return."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent

# Property tests draw the same examples on every run (a suite that passes passes again: CI
# and the README's test command are reproducible); HYPOTHESIS_PROFILE=explore draws fresh
# random examples to hunt for new failures.
settings.register_profile("reproducible", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))


@pytest.fixture
def tiny_scenario_data() -> dict[str, Any]:
    """A small valid transformer scenario as a mapping: 4 devices, data 2 x tensor 2."""
    return {
        "name": "tiny",
        "hardware": "cpu-x86",
        "cluster": {"nodes": 1, "devices_per_node": 4},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 64, "num_heads": 4,
                  "seq_length": 32, "vocab_size": 128, "dtype": "fp32"},
        "training": {"global_batch_size": 8, "micro_batch_size": 2},
        "parallel": {"data": 2, "tensor": 2, "pipeline": 1},
    }


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, Any], Path]:
    """write_file(name, content) -> path under tmp_path; a mapping is written as YAML,
    bytes as they are, anything else as text."""

    def write(name: str, content: Any) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, dict):
            path.write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
        else:
            path.write_text(str(content), encoding="utf-8")
        return path

    return write


@pytest.fixture
def fake_bundled_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Bundled hardware profiles replaced by three stub files, so that messages listing
    them do not change when profiles are added; returns their names. Bundled scenarios
    stay the real ones. (It moves `resources._PKG`, which `bundled_dir` reads on every
    call, so modules that imported `bundled_dir` by name see the same folders.)"""
    import simulator.config.resources as resources

    pkg = tmp_path / "_pkg" / "simulator"
    profiles = pkg / "_bundled" / "hardware_profiles"
    profiles.mkdir(parents=True)
    (pkg / "_bundled" / "scenarios").symlink_to(resources.bundled_dir("scenarios"))
    names = ["a100-80gb", "cpu-x86", "h100-sxm"]
    for name in names:
        (profiles / f"{name}.yaml").write_text("name: stub\n", encoding="utf-8")
    monkeypatch.setattr(resources, "_PKG", pkg)
    return names


@pytest.fixture
def invoke_cli() -> Callable[..., Any]:
    """invoke_cli(*args) -> click Result of `shardsim args...` run in-process."""
    from typer.testing import CliRunner

    from simulator.cli import app

    runner = CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(app, list(args), prog_name="shardsim")

    return invoke


# The modules that take longest (a minute or more of CPU between them, measured with
# `--durations`), run first: each xdist worker then ends on short tests that the other can
# steal (`--dist worksteal` steals from the end of a queue), rather than one worker finishing
# a long test while the other has nothing left. Only the order of whole modules changes, so
# module-scoped fixtures still set up once per worker.
_LONGEST_FIRST = ("test_plan_replay.py", "test_docs.py", "test_golden.py",
                  "test_sweep_faults.py", "test_plan_floors.py", "test_run_out.py",
                  "test_plan_cli.py", "test_sweep.py", "test_plan_search.py", "test_vit.py",
                  "test_offload_never_free.py", "test_plan_capacity.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept


def _command_once() -> None:
    """`CliRunner.invoke(app, ...)` builds the click command of the typer app on every call
    (typer.main.get_command: each command's parameters read from its signature again, about
    10 ms for `shardsim`); the in-process CLI tests call it thousands of times. Built once
    per app here (the app is held, so its id cannot be reused); every invocation still runs
    the whole command line."""
    import typer.testing

    build = typer.testing._get_command
    built: dict[int, tuple[Any, Any]] = {}

    def get_command(app: Any) -> Any:
        entry = built.get(id(app))
        if entry is None or entry[0] is not app:
            entry = built[id(app)] = (app, build(app))
        return entry[1]

    typer.testing._get_command = get_command  # type: ignore[attr-defined]


_command_once()
