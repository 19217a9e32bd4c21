"""The command line's normal paths (docs/contract.md section 1): listings, JSON purity, exit
statuses, and what `run`, `verify` and `comm` print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.config.resources import list_bundled

REPO = Path(__file__).resolve().parent.parent
# Subprocesses import the same `simulator` as this process (the source tree).
SUB_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}

CONTRACT_RUN_KEYS = {"scenario", "devices", "iteration_time_s", "samples_per_s",
                     "tokens_per_s", "model_flops_per_iteration", "tflops_per_device", "mfu",
                     "hfu", "breakdown_s", "memory", "communication", "simulation", "config"}


def test_help_lists_every_command(invoke_cli):
    result = invoke_cli("--help")
    assert result.exit_code == 0
    for command in ("run", "verify", "comm", "profiles", "scenarios"):
        assert command in result.stdout


def test_scenarios_lists_bundled(invoke_cli):
    result = invoke_cli("scenarios")
    assert result.exit_code == 0
    for name in ("gpt3-175b-1024-a100", "llama2-70b-64-h100", "llama2-7b-8-ascend910b",
                 "tiny-cpu"):
        assert name in result.stdout


def test_scenarios_json_is_one_object(invoke_cli):
    result = invoke_cli("scenarios", "--json")
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.stdout)["scenarios"]}
    assert rows["gpt3-175b-1024-a100"]["devices"] == 1024
    assert rows["tiny-cpu"]["hardware"] == "cpu-x86"


def test_profiles_json_lists_bundled_profiles(invoke_cli):
    result = invoke_cli("profiles", "--json")
    assert result.exit_code == 0, result.stderr
    names = [p["name"] for p in json.loads(result.stdout)["profiles"]]
    assert names == list_bundled("hardware_profiles")
    assert invoke_cli("profiles").exit_code == 0


def test_comm_json_has_contract_keys(invoke_cli):
    result = invoke_cli("comm", "all_reduce", "--bytes", "1073741824", "--devices", "16",
                        "--devices-per-node", "8", "--hardware", "a100-80gb", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) >= {"collective", "devices", "devices_per_node", "bytes", "algorithm",
                        "time_s", "algbw_GBps", "busbw_GBps"}
    assert (out["collective"], out["devices"], out["bytes"]) == ("all_reduce", 16, 2**30)
    assert out["busbw_GBps"] == pytest.approx(out["algbw_GBps"] * 2 * 15 / 16)


def test_comm_bytes_suffixes_are_binary(invoke_cli):
    def size(text):
        result = invoke_cli("comm", "broadcast", "--bytes", text, "--devices", "4",
                            "--hardware", "a100-80gb", "--json")
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)["bytes"]

    assert (size("32k"), size("1GiB"), size("1GB")) == (32 * 1024, 2**30, 10**9)


def test_comm_table(invoke_cli):
    result = invoke_cli("comm", "all_gather", "--bytes", "1M", "--devices", "8",
                        "--hardware", "a100-80gb")
    assert result.exit_code == 0, result.stderr
    assert "busbw_GBps" in result.stdout


def test_run_json_is_one_contract_object(invoke_cli, tmp_path):
    result = invoke_cli("run", "tiny-cpu", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) >= CONTRACT_RUN_KEYS
    assert out["devices"] == 4
    assert isinstance(out["memory"]["fits"], bool)


def test_run_writes_report_to_out(invoke_cli, tmp_path):
    out_dir = tmp_path / "rep"
    result = invoke_cli("run", "tiny-cpu", "--out", str(out_dir))
    assert result.exit_code == 0, result.stderr
    assert f"report files: {out_dir}/" in result.stdout
    assert any(out_dir.iterdir())


def test_run_set_changes_the_plan(invoke_cli):
    def devices_time(*sets):
        args = [a for s in sets for a in ("--set", s)]
        result = invoke_cli("run", "tiny-cpu", "--json", *args)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    base = devices_time()
    other = devices_time("parallel.data=4", "parallel.tensor=1")
    assert base["iteration_time_s"] != other["iteration_time_s"]


def test_run_strict_exits_1_when_it_does_not_fit(invoke_cli):
    args = ["run", "tiny-cpu", "--json", "--set", "hardware.memory_GB=0.001"]
    loose = invoke_cli(*args)
    strict = invoke_cli(*args, "--strict")
    assert loose.exit_code == 0, loose.stderr
    assert json.loads(loose.stdout)["memory"]["fits"] is False
    assert strict.exit_code == 1
    assert json.loads(strict.stdout)["memory"]["fits"] is False


def test_verify_tiny_passes(invoke_cli):
    result = invoke_cli("verify", "tiny-cpu", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["ok"] is True and out["tensors_checked"] > 0


def test_python_m_simulator_bad_input_has_no_traceback(tmp_path):
    (tmp_path / "s.yaml").write_text("parallel: [1\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "simulator", "run", "s.yaml", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, env=SUB_ENV)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: s.yaml: YAML syntax error at line 2")
    assert "Traceback" not in proc.stderr


def test_cli_import_is_light():
    """Startup stays fast: importing the CLI loads none of the heavy libraries."""
    code = ("import sys, simulator.cli; print(sorted(m for m in "
            "('pandas', 'matplotlib', 'simpy', 'numpy', 'pydantic') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=SUB_ENV)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_run_default_out_is_reports_stem(invoke_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke_cli("run", "tiny-cpu")
    assert result.exit_code == 0, result.stderr
    assert "report files: reports/tiny-cpu/" in result.stdout
    assert any((tmp_path / "reports" / "tiny-cpu").iterdir())


def test_run_json_writes_no_files_unless_asked(invoke_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke_cli("run", "tiny-cpu", "--json").exit_code == 0
    assert not (tmp_path / "reports").exists()


def test_stray_prints_do_not_reach_json_stdout(invoke_cli, monkeypatch):
    import simulator.api.tools as listing  # the scenario listing the command prints

    real = listing._scenario_row

    def noisy(name):
        print("debug output from a lower layer")
        return real(name)

    monkeypatch.setattr(listing, "_scenario_row", noisy)
    result = invoke_cli("scenarios", "--json")
    assert result.exit_code == 0
    json.loads(result.stdout)
    assert "debug output" in result.stderr


@pytest.mark.benchmark
def test_gpt3_run_json_within_one_second():
    """CONTRACT speed goal: the whole `shardsim run --json` process for GPT-3 175B on 1024
    devices takes at most a second (report files, written without --json, cost more)."""
    import time

    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "simulator", "run", "gpt3-175b-1024-a100",
                           "--json"], capture_output=True, text=True, timeout=60, env=SUB_ENV)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    assert elapsed <= 1.0, f"{elapsed:.2f} s"


def test_shell_completion_is_enabled(invoke_cli, monkeypatch):
    """`shardsim --install-completion` installs it; `--show-completion` prints the script for
    the shell it detects (shellingham reads the parent processes, which under a job runner
    need not include a shell: the detection is fixed to bash here)."""
    import typer.completion

    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    res = invoke_cli("--show-completion")
    assert res.exit_code == 0, res.output
    assert "_SHARDSIM_COMPLETE=complete_bash" in res.stdout
    assert "--install-completion" in invoke_cli("--help").stdout
