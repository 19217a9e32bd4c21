"""`simulator.api.sweep_frame`: a sweep as a typed pandas DataFrame (numeric columns
numeric, `fits` boolean, failed rows NaN/NA), the same rows as `sweep`; without pandas an
ImportError naming the extra, before any configuration runs."""

from __future__ import annotations

import sys

import pytest

from simulator import api

pd = pytest.importorskip("pandas")

GRID = {"training.micro_batch_size": [1, 2], "parallel.comm_fusion.bucket_mb": [12.5, 25],
        "parallel.overlap.grad_reduce": [True, False], "parallel.recompute": ["none", "full"],
        "parallel.tensor": [1, 3]}  # tensor 3 does not divide tiny-cpu's heads: failed rows


@pytest.fixture(scope="module")
def swept():
    frame = api.sweep_frame("tiny-cpu", GRID, executor="serial")
    rows = api.sweep("tiny-cpu", GRID, executor="serial")
    return frame, rows


def test_columns_are_typed(swept):
    frame, _ = swept
    dtypes = {k: str(v) for k, v in frame.dtypes.items()}
    assert dtypes["training.micro_batch_size"] == "int64"
    assert dtypes["parallel.tensor"] == "int64"
    assert dtypes["parallel.comm_fusion.bucket_mb"] == "float64"
    assert dtypes["parallel.overlap.grad_reduce"] == "bool"
    assert dtypes["fits"] == "boolean"
    for metric in api_metrics():
        assert dtypes[metric] == "float64", metric
    for text in ("config", "status", "error", "parallel.recompute"):
        assert pd.api.types.is_string_dtype(frame[text]), text
    assert frame.index.name == "index" and list(frame.index) == list(range(32))


def api_metrics() -> tuple[str, ...]:
    from simulator.report.sweep_journal import ROW_METRICS

    return ROW_METRICS


def test_values_are_the_rows_of_sweep(swept):
    frame, rows = swept
    assert len(frame) == len(rows) == 32
    ok = frame[frame["status"] == "ok"]
    failed = frame[frame["status"] != "ok"]
    assert len(ok) == len(failed) == 16 and set(failed["parallel.tensor"]) == {3}
    for row in rows:
        got = frame.loc[row["index"]]
        if row["status"] == "ok":
            assert got["fits"] == row["fits"] == (
                row["peak_memory_bytes"] <= row["capacity_bytes"])
            assert got["iteration_time_s"] == row["iteration_time_s"]
            assert pd.isna(got["error"])
        else:
            assert pd.isna(got["fits"]) and pd.isna(got["iteration_time_s"])
            assert got["error"] == row["error"]
        assert got["config"] == row["config"]
    # the typed columns compute as numbers and masks do
    assert ok["iteration_time_s"].sum() > 0
    assert frame[frame["fits"].fillna(False)].index.tolist() == ok.index.tolist()
    assert (ok.groupby("training.micro_batch_size")["tokens_per_s"].mean() > 0).all()


def test_without_pandas_an_import_error_names_the_extra(monkeypatch):
    ran = []
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    monkeypatch.setattr("simulator.planner.sweep.sweep_into", lambda *a, **k: ran.append(a))
    with pytest.raises(ImportError) as err:
        api.sweep_frame("tiny-cpu", {"training.micro_batch_size": [1, 2]}, executor="serial")
    assert "pip install 'shardsim[dev]'" in str(err.value) and "pandas" in str(err.value)
    assert not ran  # refused before any configuration ran
