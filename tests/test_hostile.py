"""Hostile inputs and honest output (issue 13): depth limits, physical bounds, one validation
for run and verify, the work budget, and what the CLI says about itself."""

from __future__ import annotations

import json
import math

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.config.yamlio import MAX_DEPTH, parse_override, read_yaml_file
from simulator.errors import InputError
from simulator.simulation.budget import check_budget, estimate_run, estimate_verify
from simulator.simulation.simulate import simulate


def test_deep_yaml_file_is_refused_with_its_key_path(write_file):
    path = write_file("deep.yaml", "model:\n  attrs: " + "[" * 40 + "]" * 40 + "\n")
    with pytest.raises(InputError) as info:
        read_yaml_file(path, "deep.yaml")
    assert str(info.value) == (
        f"deep.yaml: model.attrs[0][0][0][0]...({MAX_DEPTH - 6} levels more): nested deeper "
        f"than {MAX_DEPTH} levels; a scenario nests at most 6")


def test_a_cyclic_alias_is_refused(write_file):
    path = write_file("cycle.yaml", "a: &x [1, {b: *x}]\n")
    with pytest.raises(InputError) as info:
        read_yaml_file(path, "cycle.yaml")
    assert str(info.value) == ("cycle.yaml: a[1].b: alias *x refers to a collection that "
                               "contains it (a cycle)")


def test_a_deep_set_value_is_refused_without_recursion():
    with pytest.raises(InputError) as info:
        parse_override("parallel.tensor=" + "[" * 5000 + "]" * 5000)
    assert info.value.source == "--set"
    assert info.value.key.startswith("parallel.tensor[0][0]")


def test_a_huge_integer_is_an_input_error(write_file):
    path = write_file("big.yaml", "seed: " + "9" * 5000 + "\n")
    with pytest.raises(InputError, match="big.yaml: unreadable value"):
        read_yaml_file(path, "big.yaml")


@pytest.mark.parametrize("item, expected", [
    ("training.learning_rate=.inf", "scenarios/tiny-cpu.yaml with --set "
     "training.learning_rate=.inf: training.learning_rate: found inf; expected a finite "
     "number from 1e-10 to 10 (a range a real system could have)"),
    ("hardware.intra_node.bandwidth_GBps=1e-300", "hardware_profiles/cpu-x86.yaml with --set "
     "hardware.intra_node.bandwidth_GBps=1e-300: intra_node.bandwidth_GBps: found 1e-300; "
     "expected a value from 0.001 to 100000 (a range a real system could have)"),
    ("hardware.kernel_launch_us=1e9", "hardware_profiles/cpu-x86.yaml with --set "
     "hardware.kernel_launch_us=1e9: kernel_launch_us: found 1000000000.0; expected a value "
     "from 0 to 1000 (a range a real system could have)"),
    ("model.vocab_size=1000000000000", "scenarios/tiny-cpu.yaml with --set "
     "model.vocab_size=1000000000000: model.vocab_size: found 1000000000000; expected a "
     "value from 1 to 10000000 (a range a real system could have)"),
])
def test_out_of_range_values_name_key_value_and_range(invoke_cli, item, expected):
    result = invoke_cli("run", "tiny-cpu", "--json", "--set", item)
    assert result.exit_code == 2
    assert result.stderr == f"error: {expected}\n"


@pytest.mark.parametrize("sets", [
    ["parallel.offload.activations=true", "parallel.recompute=full"],
    ["hardware=ascend-910a", "model.dtype=bf16"],
])
def test_run_and_verify_refuse_the_same_way(invoke_cli, sets):
    args = [a for s in sets for a in ("--set", s)]
    ran = invoke_cli("run", "tiny-cpu", "--json", *args)
    verified = invoke_cli("verify", "tiny-cpu", "--json", *args)
    assert ran.exit_code == verified.exit_code == 2
    assert ran.stderr == verified.stderr
    assert ran.stderr.startswith("error: ")


def test_cross_field_error_names_the_set_that_caused_it(invoke_cli):
    result = invoke_cli("run", "tiny-cpu", "--set", "model.num_heads=3")
    assert result.stderr == (
        "error: scenarios/tiny-cpu.yaml with --set model.num_heads=3: model.num_heads: 3 "
        "must divide model.hidden_size=64 (valid: 1, 2, 4, 8, 16, 32, 64)\n")
    result = invoke_cli("run", "tiny-cpu", "--set", "cluster.devices_per_node=8")
    assert "with --set cluster.devices_per_node=8: parallel: " in result.stderr


@pytest.mark.parametrize("name", ["gpt3-175b-1024-a100", "llama2-70b-64-h100",
                                  "llama2-7b-8-ascend910b"])
def test_event_estimate_is_within_a_factor_two_of_the_simulation(name):
    loaded = load_scenario(name, [])
    result = simulate(loaded.scenario, load_hardware(loaded))
    ratio = estimate_run(loaded.scenario).count / result.trace.events
    assert 0.5 <= ratio <= 2.0


def test_run_refuses_above_max_events_and_says_how_to_raise(invoke_cli):
    sets = ["--set", "training.global_batch_size=4000"]
    est = estimate_run(load_scenario("tiny-cpu", sets[1::2]).scenario).count
    refused = invoke_cli("run", "tiny-cpu", "--json", "--max-events", str(est - 1), *sets)
    assert refused.exit_code == 2
    assert refused.stderr == (
        f"error: scenarios/tiny-cpu.yaml with --set training.global_batch_size=4000: "
        f"training.global_batch_size: about {est:,} events to simulate (1000 micro-batches "
        f"x 2 tasks on each of 1 simulated devices (pipeline stages)), above the limit of "
        f"{est - 1:,}; change training.global_batch_size or raise the limit with "
        f"--max-events {est}\n")
    allowed = invoke_cli("run", "tiny-cpu", "--json", "--max-events", str(est), *sets)
    assert allowed.exit_code == 0, allowed.stderr


def test_verify_with_a_million_devices_is_refused(invoke_cli):
    sets = ["parallel.data=100000", "parallel.tensor=10", "cluster.nodes=1000",
            "cluster.devices_per_node=1000", "training.global_batch_size=100000",
            "training.micro_batch_size=1", "model.num_heads=10", "model.hidden_size=640",
            "model.vocab_size=1280"]
    result = invoke_cli("verify", "tiny-cpu", *[a for s in sets for a in ("--set", s)])
    assert result.exit_code == 2
    assert "about 1,000,000 numpy devices to run" in result.stderr
    assert "--max-devices 1000000" in result.stderr


def test_verify_of_a_graph_too_large_to_execute_is_refused_with_its_gflop(invoke_cli):
    # an operator graph runs at the shapes it gives (two 4096^2 images through three
    # convolutions): 2 x (forward + backward) contractions, estimated before anything runs
    from simulator.models.model_graph import planned_graph
    from simulator.program.graph_program import graph_model_flops
    from simulator.simulation.budget import estimate_verify_gflop

    sc = load_scenario("seed-hw-split-large-images", []).scenario
    graph, _ = planned_graph(sc)
    est = estimate_verify_gflop(sc)
    assert est is not None and est.count == math.ceil(2 * graph_model_flops(graph, 1) / 1e9)
    result = invoke_cli("verify", "seed-hw-split-large-images")
    assert result.exit_code == 2
    assert (f"model.tensors: about {est.count:,} GFLOP to execute (matrix GFLOP of the "
            f"graph's forward and backward, run sharded and on one device at the shapes "
            f"model.tensors gives), above the limit of 20; change model.tensors or raise the "
            f"limit with --max-gflop {est.count}") in result.stderr
    assert estimate_verify_gflop(load_scenario("tiny-cpu", []).scenario) is None


def test_check_budget_passes_at_the_limit():
    est = estimate_verify(load_scenario("tiny-cpu", []).scenario)
    assert est.count == 4
    check_budget(est, 4, "s.yaml", "numpy devices to run", "--max-devices")
    with pytest.raises(InputError):
        check_budget(est, 3, "s.yaml", "numpy devices to run", "--max-devices")


def test_version_and_flags_take_no_value(invoke_cli):
    assert invoke_cli("--version").stdout.startswith("shardsim ")
    for command in ("run", "verify", "comm", "profiles", "scenarios", "sweep"):
        help_text = invoke_cli(command, "--help").stdout
        line = next(x for x in help_text.splitlines() if "--json" in x)
        assert "<bool>" not in line


def test_strict_says_peak_capacity_and_a_remedy_that_fits(invoke_cli):
    args = ["run", "tiny-cpu", "--json", "--strict", "--set", "hardware.memory_GB=0.001"]
    result = invoke_cli(*args)
    assert result.exit_code == 1
    assert "peak 0.00138 GB > capacity 0.001 GB; cheapest remedy: --set " in result.stderr
    remedy = result.stderr.split("cheapest remedy: ")[1].split(" (")[0].split()
    fixed = invoke_cli(*args, *remedy)
    assert fixed.exit_code == 0, fixed.stderr
    assert json.loads(fixed.stdout)["memory"]["fits"] is True


def test_full_trace_writes_identical_devices_once(invoke_cli, tmp_path):
    result = invoke_cli("run", "tiny-cpu", "--fidelity", "full", "--out", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    trace = json.loads((tmp_path / "trace.json").read_text())
    pids = {e["pid"] for e in trace["traceEvents"]}
    assert trace["otherData"]["devices"] == "4 simulated devices written as 1 distinct ones"
    assert pids == {0}
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert names == ["device 0 (stage 0, 4 identical devices)"]


def test_table_is_printed_before_the_figures_are_drawn(invoke_cli, tmp_path, monkeypatch):
    import simulator.report

    def broken(result, out_dir):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(simulator.report, "write_report", broken)
    result = invoke_cli("run", "tiny-cpu", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert result.stdout.splitlines()[0].startswith("scenario ")
    assert result.stderr == (f"error: --out: {tmp_path}: cannot write the report files "
                             "(No space left on device)\n")


def test_vocabulary_not_split_by_tensor_is_an_input_error(invoke_cli):
    # found by the fuzz test (seed 7): exit 3 SignatureError from the embedding's plan
    result = invoke_cli("run", "tiny-cpu", "--json", "--set", "model.vocab_size=50257")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: scenarios/tiny-cpu.yaml with --set model.vocab_size=50257: model.vocab_size: "
        "50257 must be a multiple of parallel.tensor=2 (the embedding is split across "
        "tensor-parallel ranks; Megatron-LM pads it to 50432)\n")


def test_the_cli_defaults_are_the_budgets():
    # simulator.cli.run writes the limits again to keep `shardsim --help` from importing the
    # scenario schema; they must stay the ones simulator.simulation.budget applies
    import importlib

    from simulator.simulation import budget

    run = importlib.import_module("simulator.cli.run")  # (simulator.cli.run is the command)
    for name in ("DEFAULT_MAX_EVENTS", "DEFAULT_MAX_VERIFY_DEVICES", "DEFAULT_MAX_VERIFY_GFLOP",
                 "DEFAULT_MAX_VERIFY_GB"):
        assert getattr(run, name) == getattr(budget, name), name
