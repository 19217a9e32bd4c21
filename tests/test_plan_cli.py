"""`shardsim plan`: the --json contract on tiny-cpu, that its best configuration is what
`run` gives, the target mode, Ctrl-C, and exact messages for bad options (exit 2)."""

from __future__ import annotations

import json

import pytest

from simulator.planner import search as search_mod


@pytest.fixture(scope="module")
def plan_json():
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["plan", "tiny-cpu", "--json", "--top", "4"],
                             prog_name="shardsim")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_plan_json_contract(plan_json):
    rep = plan_json
    assert set(rep) == {"scenario", "mode", "devices", "objective", "interrupted", "search",
                        "best", "top", "pareto", "files", "headroom", "hardware_overrides"}
    assert (rep["mode"], rep["devices"], rep["objective"], rep["interrupted"]) == \
        ("devices", 4, "time", False)
    assert rep["files"] == {}  # --json without --out writes nothing
    assert len(rep["top"]) == 4 and rep["best"] == rep["top"][0]
    times = [r["iteration_time_s"] for r in rep["top"]]
    assert times == sorted(times) and all(r["fits"] for r in rep["top"])
    cfg = rep["best"]["config"]
    assert cfg["data"] * cfg["tensor"] * cfg["pipeline"] == 4
    s = rep["search"]
    assert s["configurations"] == 360 and s["simulated"] >= 4


def test_best_configuration_runs_as_planned(plan_json, invoke_cli):
    best = plan_json["best"]
    args = [a for item in best["overrides"] for a in ("--set", item)]
    res = invoke_cli("run", "tiny-cpu", "--json", *args)
    assert res.exit_code == 0, res.stderr
    run = json.loads(res.stdout)
    assert run["iteration_time_s"] == best["iteration_time_s"]
    assert run["memory"]["peak_bytes"] == best["peak_bytes"]


def test_plan_writes_pareto_png(invoke_cli, tmp_path):
    res = invoke_cli("plan", "tiny-cpu", "--out", str(tmp_path), "--top", "2")
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert "pareto_png: " in res.stdout and "configuration" in res.stdout


def test_target_time_finds_fewest_devices(invoke_cli, tmp_path):
    # the best on one 4-device node, slowed by 10%: two devices already meet it (the counts
    # below a node are searched too)
    res = invoke_cli("plan", "tiny-cpu", "--json", "--top", "1")
    best = json.loads(res.stdout)["best"]["iteration_time_s"]
    res = invoke_cli("plan", "tiny-cpu", "--json", "--target-time", str(best * 1.1),
                     "--out", str(tmp_path))
    rep = json.loads(res.stdout)
    assert res.exit_code == 0 and rep["devices"] == 2
    assert [(s["devices"], s["meets"]) for s in rep["scaling"]] == [(1, False), (2, True)]
    assert (tmp_path / "scaling.png").is_file()
    # a target not met: exit 1, every count up to --max-devices tried and missed
    res = invoke_cli("plan", "tiny-cpu", "--json", "--target-time", str(best / 3),
                     "--max-devices", "8")
    rep = json.loads(res.stdout)
    assert res.exit_code == 1 and rep["devices"] is None
    assert [s["devices"] for s in rep["scaling"]] == [1, 2, 4, 8]  # 3 has no configuration
    assert rep["counts_without_configuration"] == 1
    assert not any(s["meets"] for s in rep["scaling"])
    # below 6 x parameters x tokens at every device's peak: no count is even tried
    res = invoke_cli("plan", "tiny-cpu", "--json", "--target-time", "1e-300")
    rep = json.loads(res.stdout)
    assert res.exit_code == 1 and rep["devices"] is None and rep["scaling"] == []


def test_plan_ctrl_c_prints_what_was_ranked(invoke_cli, monkeypatch):
    real, calls = search_mod.simulate_config, []

    def interrupt_third(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(search_mod, "simulate_config", interrupt_third)
    res = invoke_cli("plan", "tiny-cpu", "--json")
    assert res.exit_code == 130
    rep = json.loads(res.stdout)
    assert rep["interrupted"] and len(rep["top"]) == 2 and rep["search"]["simulated"] == 2
    assert "interrupted: showing what was ranked so far" in res.stderr


@pytest.mark.parametrize("args, expected", [
    (["--devices", "0"], "--devices: found 0; expected an integer >= 1"),
    (["--devices", "6"], "--devices: found 6; expected at most or a multiple of "
                         "cluster.devices_per_node=4 (whole nodes)"),
    (["--devices", "8", "--nodes", "2"], "--nodes: cannot be combined with --devices; "
                                         "give one of them"),
    (["--objective", "speed"], "--objective: found 'speed'; expected one of time, memory, "
                               "cost"),
    (["--tokens", "1e9"], "--tokens: needs --days too (the target is tokens in days; or "
                          "give --budget)"),
    (["--budget", "10"], "--budget: needs --tokens (the budget pays for training that many "
                         "tokens; add --days for a deadline too)"),
    (["--budget", "0", "--tokens", "1e9"], "--budget: found 0; expected a finite number > 0"),
    (["--days", "3"], "--days: needs --tokens too (the target is tokens in days)"),
    (["--target-time", "-1"], "--target-time: found -1; expected a finite number > 0"),
    (["--target-time", "1", "--tokens", "1e9", "--days", "1"],
     "--target-time: cannot be combined with --tokens/--days; give one target"),
    (["--target-time", "1", "--devices", "8"], "--devices: cannot be combined with a target "
     "(--target-time, --tokens/--days), which finds the devices"),
    (["--top", "0"], "--top: found 0; expected an integer >= 1"),
    (["--max-micro-batch", "0"], "--max-micro-batch: found 0; expected an integer >= 1"),
    (["--max-optimizer-shard", "4"], "--max-optimizer-shard: found 4; expected 0, 1, 2 or 3 "
                                     "(the highest ZeRO stage tried)"),
    (["--price-per-device-hour", "0"], "--price-per-device-hour: found 0; expected a "
                                       "finite number > 0"),
    (["--set", "parallel.tensor=3"], "scenarios/tiny-cpu.yaml with --set parallel.tensor=3: "
     "parallel: data*tensor*pipeline = 2*3*1 = 6 must equal cluster.nodes*"
     "cluster.devices_per_node = 1*4 = 4"),
])
def test_bad_options_exit_2(invoke_cli, args, expected):
    res = invoke_cli("plan", "tiny-cpu", *args)
    assert res.exit_code == 2, res.stderr
    assert res.stdout == ""
    assert res.stderr == f"error: {expected}\n"
