"""`plan` answers every bundled scenario (exit 0, ranked, fitting: MoE, context-parallel,
2-D/3-D tensor-parallel, parameter-server and graph ones included), and its answers can be
replayed: each ranked row carries the complete scenario of its configuration, and `run` of
that file (as is, cluster included) gives the plan's iteration time and peak memory to the
last digit; `--headroom` keeps that share of device memory free."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO

# the space is cut (micro-batch <= 2, two model chunks) so that the whole set runs in
# about a minute; the rows are replayed exactly the same way whatever the space
_SMALL = ("--max-micro-batch", "2", "--max-virtual-stages", "2", "--top", "1")
# DeepSeek-V3 on 2048 devices takes a minute of CPU to plan (its search is timed by
# benchmarks/plan_speed.py): its replay runs with `-m benchmark`, outside the default suite
_SLOW = {"deepseek-v3-2048-h800"}
BUNDLED = [pytest.param(name, marks=pytest.mark.benchmark) if name in _SLOW else name
           for name in sorted(p.stem for p in (REPO / "scenarios").glob("*.yaml"))]


def _plan(invoke_cli, *args: str) -> dict:
    res = invoke_cli("plan", *args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("name", BUNDLED)
def test_best_plan_scenario_runs_as_planned(name, invoke_cli, tmp_path: Path):
    # micro-batch 1 only: the replay is the same whatever the space, and this test plans
    # every bundled scenario (a third of the time of micro-batches up to 2)
    rep = _plan(invoke_cli, name, "--max-micro-batch", "1", *_SMALL[2:-1], "3")
    best = rep["best"]
    assert best is not None and best["fits"] and best == rep["top"][0]
    times = [r["iteration_time_s"] for r in rep["top"] if r["fits"]]
    assert times == sorted(times)
    path = tmp_path / "best.json"
    path.write_text(json.dumps(best["scenario"]))  # JSON is YAML: a file `run` reads
    res = invoke_cli("run", str(path), "--json")
    assert res.exit_code == 0, res.stderr
    run = json.loads(res.stdout)
    assert run["devices"] == rep["devices"]
    assert run["iteration_time_s"] == best["iteration_time_s"]
    assert run["memory"]["peak_bytes"] == best["peak_bytes"]


def test_overrides_carry_the_cluster(invoke_cli):
    # planned on 8 devices, replayed on a scenario of 4: the overrides resize the cluster
    rep = _plan(invoke_cli, "tiny-cpu", "--devices", "8", "--top", "1")
    best = rep["best"]
    assert best["overrides"][:2] == ["cluster.nodes=2", "cluster.devices_per_node=4"]
    args = [a for item in best["overrides"] for a in ("--set", item)]
    res = invoke_cli("run", "tiny-cpu", "--json", *args)
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["iteration_time_s"] == best["iteration_time_s"]


def test_headroom_keeps_memory_free(invoke_cli):
    # device memory set so that the best plan without headroom uses 95% of it
    first = _plan(invoke_cli, "llama2-7b-8-ascend910b", *_SMALL)["best"]
    gb = first["peak_bytes"] / 0.95 / 1e9  # memory_GB is 10^9 bytes
    mem = f"hardware.memory_GB={gb:.6f}"
    rep = _plan(invoke_cli, "llama2-7b-8-ascend910b", *_SMALL, "--set", mem)
    assert rep["best"]["peak_bytes"] == first["peak_bytes"]
    cap = rep["best"]["capacity_bytes"]
    assert 0.94 * cap < first["peak_bytes"] < 0.96 * cap
    kept = _plan(invoke_cli, "llama2-7b-8-ascend910b", *_SMALL, "--set", mem,
                 "--headroom", "0.1")
    assert kept["headroom"] == 0.1
    assert kept["best"]["peak_bytes"] <= 0.9 * cap
    assert kept["best"]["label"] != first["label"]
    assert kept["best"]["iteration_time_s"] >= first["iteration_time_s"]


@pytest.mark.parametrize("value", ["1", "-0.1"])
def test_headroom_out_of_range(invoke_cli, value):
    res = invoke_cli("plan", "tiny-cpu", "--headroom", value)
    assert res.exit_code == 2
    assert f"--headroom: found {float(value):g}; expected a share of device memory to keep " \
        "free, at least 0 and below 1 (0.1: 10%)" in " ".join(res.stderr.split())
