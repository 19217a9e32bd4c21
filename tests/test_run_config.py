"""Every result says what was simulated: `config` in `run --json` (docs/contract.md section 3),
the same in the table and report.html; `--set hardware=` keeps the scenario's framework, or
says which stack it took when the scenario leaves that to the profile."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from simulator.config.resources import resolve_yaml

LLAMA = "llama2-70b-64-h100"
LLAMA_CONFIG = {
    "hardware": "h100-sxm", "framework": "megatron-core", "dtype": "bf16", "devices": 64,
    "nodes": 8, "devices_per_node": 8,
    "parallel": {"data": 2, "tensor": 8, "pipeline": 4, "virtual_stages": 1, "expert": 1,
                 "context": 1, "sequence_parallel": True, "schedule": "1f1b",
                 "recompute": "selective", "optimizer_shard": 1},
    "global_batch_size": 256, "micro_batch_size": 1, "grad_accum_steps": 128}
STACK_NOTE = ("--set hardware=a100-80gb: the scenario names no framework, so the software "
              "stack is a100-80gb's default_framework, megatron-lm-2021 (the scenario's "
              "h100-sxm runs megatron-core); add --set framework=megatron-core to change the "
              "hardware alone")


def _json(invoke_cli, *args):
    res = invoke_cli("run", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr


def test_config_names_hardware_stack_degrees_and_batch(invoke_cli):
    out, _ = _json(invoke_cli, LLAMA)
    assert out["config"] == LLAMA_CONFIG
    assert list(out)[list(out).index("simulation") + 1] == "config"  # CONTRACT's order


def test_config_of_2d_tensor_parallel_and_of_a_mixed_cluster(invoke_cli):
    tp2d, _ = _json(invoke_cli, "tp2d-gpt-32b-64-h100")
    assert "tensor" not in tp2d["config"]["parallel"]
    assert tp2d["config"]["parallel"]["tensor_nd"] == [16, 4]
    mixed, _ = _json(invoke_cli, "mixed-a100-h100-pp2")
    assert mixed["config"]["node_types"] == [{"hardware": "a100-80gb", "nodes": 2},
                                             {"hardware": "h100-sxm", "nodes": 2}]
    from simulator.report.run_config import config_lines

    assert config_lines(mixed["config"])[0] == (
        "hardware, stack", "2 nodes of a100-80gb + 2 nodes of h100-sxm, megatron-core, bf16")
    assert config_lines(tp2d["config"])[1][1].startswith("data 1 x tensor 16x4 x pipeline 1")


def test_table_and_html_show_the_config(invoke_cli, tmp_path):
    res = invoke_cli("run", LLAMA, "--out", str(tmp_path / "r"))
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[2:5] == [
        "hardware, stack          h100-sxm, megatron-core, bf16",
        "parallel                 data 2 x tensor 8 x pipeline 4 (1f1b, sequence parallel, "
        "recompute selective, optimizer shard 1)",
        "batch                    global 256, micro 1, 128 accumulation steps"]
    page = (tmp_path / "r" / "report.html").read_text()
    assert "<tr><td>hardware, stack</td><td>h100-sxm, megatron-core, bf16</td></tr>" in page
    assert "<td>global 256, micro 1, 128 accumulation steps</td>" in page


def test_hardware_override_says_which_stack_it_took(invoke_cli):
    out, err = _json(invoke_cli, LLAMA, "--set", "hardware=a100-80gb")
    assert err == f"note: {STACK_NOTE}\n"
    assert out["notes"] == [STACK_NOTE]
    assert (out["config"]["hardware"], out["config"]["framework"]) == ("a100-80gb",
                                                                      "megatron-lm-2021")
    same, err = _json(invoke_cli, LLAMA, "--set", "hardware=a100-80gb",
                      "--set", "framework=megatron-core")
    assert err == "" and same["notes"] == []
    assert (same["config"]["hardware"], same["config"]["framework"]) == ("a100-80gb",
                                                                        "megatron-core")
    assert same["iteration_time_s"] != out["iteration_time_s"]  # the stack matters


def test_a_scenario_that_names_its_framework_keeps_it(invoke_cli, tmp_path):
    scen = tmp_path / "llama.yaml"
    shutil.copy(resolve_yaml(LLAMA, "scenarios"), scen)
    scen.write_text(scen.read_text() + "framework: megatron-core\n")
    out, err = _json(invoke_cli, str(scen), "--set", "hardware=a100-80gb")
    assert err == "" and out["notes"] == []
    assert out["config"]["framework"] == "megatron-core"


def test_the_api_gives_the_same_note():
    from simulator import load_scenario, simulate

    result = simulate(load_scenario(LLAMA, ["hardware=a100-80gb"]))
    assert result.notes == (STACK_NOTE,)
    assert Path(str(result.scenario.source)).name == f"{LLAMA}.yaml"
