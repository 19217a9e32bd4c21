"""`shardsim sweep`: rows equal `run` of the same overrides, failures recorded, resume after an
interrupt or a kill with no row lost or duplicated, the same rows on Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from simulator.api import load_hardware, load_scenario
from simulator.cli import app
from simulator.config.resources import resolve_yaml
from simulator.errors import InputError
from simulator.planner.sweep import sweep_into
from simulator.planner.sweep_exec import RayExecutor, SerialExecutor
from simulator.planner.sweep_spec import SweepSpec, expand, parse_grid
from simulator.simulation.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
# tiny-cpu: data 2 x tensor 2, global batch 8; parallel.tensor=3 is rejected (4 heads, and
# 2*3 != 4 devices): the sweep records it and goes on.
GRID = ("parallel.tensor=2,3", "training.micro_batch_size=1,2,4")


@pytest.fixture(autouse=True)
def no_affinity(monkeypatch):
    """macOS and Windows have no os.sched_getaffinity: these sweeps run without it."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)


def _spec(grid=GRID, fixed=()) -> SweepSpec:
    return SweepSpec(str(resolve_yaml("tiny-cpu", "scenarios")), "scenarios/tiny-cpu.yaml",
                     parse_grid(grid), tuple(fixed))


def _comparable(rows):
    return [{k: v for k, v in r.items()} for r in sorted(rows, key=lambda r: r["index"])]


def test_rows_equal_run_of_the_same_overrides():
    rows = sweep_into(_spec(), None, SerialExecutor())
    assert [r["index"] for r in rows] == list(range(6))
    for row, config in zip(rows, expand(_spec())):
        assert row["config"] == config.label
        try:
            loaded = load_scenario("tiny-cpu", list(config.overrides))
        except InputError as err:
            assert row["status"] == "error" and row["error"] == str(err)
            assert row["iteration_time_s"] is None
            continue
        want = simulate(loaded.scenario, load_hardware(loaded))
        assert row["status"] == "ok" and row["error"] is None
        assert row["iteration_time_s"] == want.iteration_time_s
        assert row["peak_memory_bytes"] == round(want.memory.peak_bytes)
    assert [r["status"] for r in rows] == ["ok"] * 3 + ["error"] * 3
    assert rows[3]["error"].startswith("scenarios/tiny-cpu.yaml with --set parallel.tensor=3:")


def test_grid_errors_name_the_key():
    with pytest.raises(InputError, match=r"^--grid: parallel.tensor: the key is given twice"):
        parse_grid(["parallel.tensor=1", "parallel.tensor=2"])
    with pytest.raises(InputError, match=r"^--grid: parallel.tensor: found '1,,2'; expected"):
        parse_grid(["parallel.tensor=1,,2"])


def test_interrupt_then_resume_loses_and_repeats_nothing(tmp_path):
    spec = _spec()
    full = sweep_into(spec, None, SerialExecutor())
    seen = []

    def stop_after_two(row):
        seen.append(row["index"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep_into(spec, tmp_path, SerialExecutor(), on_row=stop_after_two)
    again = []
    rows = sweep_into(spec, tmp_path, SerialExecutor(), resume=True,
                      on_row=lambda r: again.append(r["index"]))
    assert sorted(again) == list(range(2, 6))  # the two journaled rows are not run again
    assert _comparable(rows) == _comparable(full)
    table = pq.read_table(tmp_path / "sweep.parquet").to_pylist()
    assert _comparable(table) == _comparable(full)
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_folder_of_another_sweep_is_refused(tmp_path):
    sweep_into(_spec(), tmp_path, SerialExecutor())
    with pytest.raises(InputError, match=r"already holds a sweep; pass --resume"):
        sweep_into(_spec(), tmp_path, SerialExecutor())
    with pytest.raises(InputError, match=r"holds a different sweep"):
        sweep_into(_spec(fixed=("seed=1",)), tmp_path, SerialExecutor(), resume=True)


# rows that take tens of milliseconds each (GPT-3 175B on 4 pipeline stages), so that the
# journal's first part file (written after the first row) lands well before the last row:
# tiny-cpu's rows take about a millisecond once its model program is memoised
_KILL_SCENARIO = "gpt3-175b-1024-a100"
_KILL_ROWS = 24
_KILL_GRID = ["--grid", "parallel.comm_fusion.bucket_mb=10,20,30,40",
              "--grid", "training.micro_batch_size=1,2,4",
              "--grid", "parallel.overlap.grad_reduce=true,false"]
_KILL_SET = ("parallel.pipeline=4", "parallel.data=32", "training.global_batch_size=256")


def _cli(out: Path, *extra: str) -> list[str]:
    sets = [a for s in _KILL_SET for a in ("--set", s)]
    return [sys.executable, "-m", "simulator", "sweep", _KILL_SCENARIO, *_KILL_GRID, *sets,
            "--executor", "serial", "--out", str(out), *extra]


def test_kill_midway_then_resume(tmp_path):
    """SIGKILL the CLI once its first rows are on disk; --resume completes the table with
    every configuration exactly once, equal to an uninterrupted sweep."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "sweep"
    proc = subprocess.Popen(_cli(out), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list((out / "rows").glob("part-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = pq.read_table(out / "rows").num_rows
    assert 0 < killed < _KILL_ROWS and not (out / "sweep.parquet").exists()
    done = subprocess.run(_cli(out, "--resume"), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(out / "sweep.parquet").to_pylist()
    assert [r["index"] for r in rows] == list(range(_KILL_ROWS))
    grid = [g for g in _KILL_GRID if g != "--grid"]
    whole = sweep_into(SweepSpec(str(resolve_yaml(_KILL_SCENARIO, "scenarios")),
                                 f"scenarios/{_KILL_SCENARIO}.yaml", parse_grid(grid),
                                 _KILL_SET), None, SerialExecutor())
    assert _comparable(rows) == _comparable(whole)


def test_cli_summary_and_sweep_file(tmp_path):
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text("sweep:\n  scenario: tiny-cpu\n  grid:\n    parallel.tensor: [2, 3]\n"
                          "    training.micro_batch_size: [1, 2, 4]\n")
    res = CliRunner().invoke(app, ["sweep", str(sweep_file), "--executor", "serial",
                                   "--out", str(tmp_path / "o")])
    assert res.exit_code == 1, res.output  # rows failed: the status says so, not only the table
    assert res.stderr.endswith(f"error: 3 of 6 configurations failed; the error column of "
                               f"{tmp_path / 'o' / 'sweep.csv'} says why\n")
    assert "fastest configurations that fit (3 of 3)" in res.stdout
    assert "6 configurations: 3 fit, 0 do not fit, 3 failed" in res.stdout
    for name in ("sweep.parquet", "sweep.csv", "sweep.png", "sweep.json", "report.html"):
        assert (tmp_path / "o" / name).is_file()
    page = (tmp_path / "o" / "report.html").read_text()
    assert page.count("<tr>") == 1 + 3 + 1 + 3  # comparison: header + 3; failed: header + 3
    from simulator.report.interactive import plotly_js

    if plotly_js() is not None:  # the interactive plot (tests/test_html_report.py)
        assert '<div id="fig-sweep" class="plot"' in page and '"fig-sweep":{"data"' in page
    else:  # the PNG, and a note that says it is static
        assert 'id="fig-sweep" alt="sweep plot" src="data:image/png;base64,' in page
        assert 'id="static-note"' in page
    bad = CliRunner().invoke(app, ["sweep", "tiny-cpu", "--grid", "parallel.tensor"])
    assert bad.exit_code == 2
    assert "error: --set: parallel.tensor: expected KEY=VALUE" in bad.stderr


def test_ray_gives_identical_rows():
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'shardsim[sweep]')")
    spec = _spec()
    local = sweep_into(spec, None, SerialExecutor())
    on_ray = sweep_into(spec, None, RayExecutor())
    assert _comparable(on_ray) == _comparable(local)


def test_cli_bad_input_exits_2_naming_the_option():
    runner = CliRunner()
    none = runner.invoke(app, ["sweep", "tiny-cpu"])
    assert none.exit_code == 2 and none.stderr == (
        "error: --grid: nothing to sweep; give --grid KEY=V1,V2,... (or a sweep file with a "
        "sweep.grid block)\n")
    addr = runner.invoke(app, ["sweep", "tiny-cpu", "--grid", "seed=1,2", "--address", "auto"])
    assert addr.exit_code == 2 and addr.stderr == (
        "error: --address: auto: only the ray executor takes an address, found --executor "
        "local\n")
