"""What a sweep row says (issue 25): `run --json` of the same configuration to the last
digit, parallel.data derived when the grid changes the layout (as `plan` does), typed
columns with `fits`, and a plot that says which series it left out."""

from __future__ import annotations

import json
import shlex

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.resources import resolve_yaml
from simulator.planner.sweep import sweep_into
from simulator.planner.sweep_exec import SerialExecutor
from simulator.planner.sweep_spec import SweepSpec, parse_grid
from simulator.report.sweep_table import MAX_SERIES, best_series

GPT3 = "gpt3-175b-1024-a100"  # data 8 x tensor 8 x pipeline 16 on 1024 devices
GRID = ("parallel.pipeline=4,8", "parallel.schedule=gpipe,1f1b",
        "training.micro_batch_size=1,2")
FIXED = ("training.global_batch_size=256",)


def _spec(grid=GRID, fixed=FIXED, name=GPT3) -> SweepSpec:
    return SweepSpec(str(resolve_yaml(name, "scenarios")), f"scenarios/{name}.yaml",
                     parse_grid(grid), tuple(fixed))


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return sweep_into(_spec(), None, SerialExecutor())


def test_rows_equal_run_json_to_the_last_digit(rows):
    """Every row, GPipe and 1F1B, one and two micro-batches, equals `run --json` of its
    `config` (the --set items that reproduce it) exactly."""
    runner = CliRunner()
    assert [r["status"] for r in rows] == ["ok"] * 8
    for row in rows:
        sets = [a for item in shlex.split(row["config"]) for a in ("--set", item)]
        res = runner.invoke(app, ["run", GPT3, "--json", *sets])
        assert res.exit_code == 0, res.output
        run = json.loads(res.stdout)
        want = {"iteration_time_s": run["iteration_time_s"],
                "samples_per_s": run["samples_per_s"], "tokens_per_s": run["tokens_per_s"],
                "tflops_per_device": run["tflops_per_device"], "mfu": run["mfu"],
                "peak_memory_bytes": run["memory"]["peak_bytes"],
                "capacity_bytes": run["memory"]["capacity_bytes"],
                **{f"{k}_s": v for k, v in run["breakdown_s"].items()},
                "comm_bytes_per_device": run["communication"]["bytes_per_device"],
                "fits": run["memory"]["fits"]}
        assert {k: row[k] for k in want} == want, row["config"]


def test_parallel_data_is_derived_when_the_grid_changes_the_layout(rows):
    """1024 devices over tensor 8 x pipeline 4 leave data 32 (the scenario's 8 would make
    512 devices, refused); pipeline 8 leaves 16. The row's config says so."""
    assert [r["config"].split()[-1] for r in rows] == (["parallel.data=32"] * 4
                                                        + ["parallel.data=16"] * 4)
    fixed = sweep_into(_spec(fixed=(*FIXED, "parallel.data=8")), None, SerialExecutor())
    assert {r["status"] for r in fixed} == {"error"}  # given explicitly, it is kept
    assert fixed[0]["error"].endswith("must equal cluster.nodes*cluster.devices_per_node = "
                                      "128*8 = 1024")


def test_columns_are_typed_with_fits(tmp_path):
    grid = ("parallel.comm_fusion.bucket_mb=12.5,25", "parallel.overlap.grad_reduce=true,false",
            "training.micro_batch_size=1,2", "parallel.recompute=none,full")
    sweep_into(_spec(grid, ()), tmp_path, SerialExecutor())
    schema = pq.read_schema(tmp_path / "sweep.parquet")
    assert {name: str(schema.field(name).type) for name in (
        "parallel.comm_fusion.bucket_mb", "parallel.overlap.grad_reduce",
        "training.micro_batch_size", "parallel.recompute", "fits", "iteration_time_s")} == {
        "parallel.comm_fusion.bucket_mb": "double", "parallel.overlap.grad_reduce": "bool",
        "training.micro_batch_size": "int64", "parallel.recompute": "string",
        "fits": "bool", "iteration_time_s": "double"}
    table = pq.read_table(tmp_path / "sweep.parquet").to_pylist()
    assert table[0]["parallel.comm_fusion.bucket_mb"] == 12.5
    assert table[0]["parallel.overlap.grad_reduce"] is True
    assert all(r["fits"] == (r["peak_memory_bytes"] <= r["capacity_bytes"]) for r in table)
    assert (tmp_path / "sweep.csv").read_text().splitlines()[1].startswith(
        '0,"parallel.comm_fusion.bucket_mb=12.5 parallel.overlap.grad_reduce=true '
        'training.micro_batch_size=1 parallel.recompute=none",12.5,true,1,"none","ok",,')


def test_the_plot_draws_every_series_or_says_which_it_left_out():
    lines = {f"s{i}": [{"iteration_time_s": 100.0 - i}] for i in range(MAX_SERIES + 3)}
    shown, note = best_series(lines)
    assert shown == [f"s{i}" for i in range(3, MAX_SERIES + 3)]  # the fastest, grid order
    assert note == f"; the {MAX_SERIES} fastest of {MAX_SERIES + 3} series shown (sweep.csv " \
                   "has all)"
    few = dict(list(lines.items())[:MAX_SERIES])
    assert best_series(few) == (list(few), "")
