"""Seeded fuzzing of the newer scenario keys and of every command (issue 13, after
tests/test_fuzz.py): framework, tensor_nd, context, expert and model.moe, pipeline_layers,
the parameter server, recompute_comm, comm_fusion's per-kind entries, comm_subgraph, the
dataset strategy, the optimizer threshold, mixed clusters and stragglers, Hugging Face
configs, graph operator attrs, and the flags of `comm`, `plan`, `sweep`, `profiles`. Every
command answers 0, 1 or 2 (never 3, never a traceback) within 10 s, a refusal is one
`error: ...` line; the pinned cases below are the defects this fuzzing found.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import yaml
from test_fuzz import check_command

SEED = 1313

# key -> values (good, bad, out of range, wrong type); several are set in one command
VALUES: dict[str, list[str]] = {
    "framework": ["megatron-core", "mindspore", "nope", "''", "123", "/etc/hostname", "[a]"],
    "model.attention": ["fa1", "fa2", "te", "standard", "fa9", "1"],
    "parallel.tensor_nd": ["[2, 1]", "[1, 2]", "[2, 2]", "[0, 2]", "[2]", "[2, 2, 2, 2]",
                           "[a, b]", "[2.0, 1]", "2", "[1, 1, 2]", "[100000, 100000]", "null"],
    "parallel.context": ["1", "2", "0", "3", "100000", "-1", "true"],
    "parallel.expert": ["1", "2", "4", "0", "3"],
    "model.moe.experts": ["2", "4", "3", "1", "100000", "0", "1e9"],
    "model.moe.top_k": ["1", "2", "5", "0", "1000"],
    "model.moe.capacity_factor": ["1.0", "1e-9", "1000", "0", ".nan", "-1"],
    "model.moe.every": ["1", "2", "5", "0"],
    "model.moe.imbalance": ["1", "2", "0.5", "1000", ".inf"],
    "model.moe": ["null", "5", "{experts: 4}"],
    "parallel.pipeline_layers": ["[2]", "[3]", "[-1]", "[[1, 1]]", "[]", "2", "[1, 1]",
                                 "[2, 0]", "[1.5, 0.5]", "[true, 1]"],
    "parallel.pipeline": ["1", "2", "3"],
    "parallel.data": ["1", "2", "4"],
    "parallel.tensor": ["1", "2", "4"],
    "parallel.mode": ["parameter_server", "auto", "semi_auto", "ps"],
    "parallel.parameter_server.servers": ["1", "4", "0", "100000"],
    "parallel.parameter_server.sync": ["false", "maybe"],
    "parallel.parameter_server.server_hardware": ["cpu-x86", "nope", "/etc/hostname"],
    "parallel.parameter_server.server_nic_Gbps": ["100", "0", "1e-300", ".inf"],
    "parallel.recompute": ["none", "selective", "full"],
    "parallel.recompute_comm.tensor": ["false", "true", "0"],
    "parallel.recompute_comm.optimizer": ["false", "true"],
    "parallel.optimizer_shard": ["0", "1", "2", "3"],
    "parallel.comm_fusion.mode": ["index", "size", "none", "auto"],
    "parallel.comm_fusion.index": ["[]", "[1]", "[0]", "[1, 1]", "[5]", "[2, 1]"],
    "parallel.comm_fusion.all_reduce.mode": ["index", "size", "none"],
    "parallel.comm_fusion.all_reduce.index": ["[]", "[1]", "[99]"],
    "parallel.comm_fusion.reduce_scatter.bucket_mb": ["0.01", "1", "0.001", ".nan"],
    "parallel.comm_fusion.all_gather.mode": ["size", "none", "index"],
    "parallel.comm_fusion.all_gather.bucket_mb": ["0.01", "25"],
    "parallel.comm_fusion.all_gather.index": ["[]", "[1]"],
    "parallel.comm_subgraph.reuse": ["true", "false"],
    "parallel.comm_subgraph.max_reused_ops": ["1", "0", "-1", "1000000000"],
    "parallel.comm_subgraph.build_ms_per_op": ["0", "1e6", "-1", ".nan"],
    "parallel.dataset_strategy": ["data_parallel", "full_batch", "[[1, 1]]", "[[2, 1], [2]]",
                                  "bogus", "[[0]]"],
    "parallel.full_batch": ["true", "false", "yes"],
    "parallel.optimizer_threshold_kb": ["0", "64", "1e9", "-1", ".nan"],
    "parallel.micro_batches": ["1", "3", "100000", "0"],
    "cluster.slow": ["[{devices: [1], compute: 0.5}]", "[{devices: [1], compute: 1e-300}]",
                     "[{nodes: [0], nic: 1e-9}]", "[{devices: [99]}]", "[{}]", "5"],
    "cluster.jitter": ["{compute_cv: 0.05, samples: 1000}", "{compute_cv: 2}", "{}"],
    "cluster.node_types": ["[{hardware: cpu-x86, nodes: 1}]", "[{hardware: nope, nodes: 1}]",
                           "[{hardware: ascend-910a, nodes: 1}]", "[]",
                           "[{hardware: /etc/hostname, nodes: 1}]"],
    "model": ["{from_hf: llama-2-7b}", "{from_hf: mixtral-8x7b}", "{from_hf: nope}",
              "{from_hf: gpt2, seq_length: 0}", "{from_hf: 5}"],
    "model.hybrid_pattern": ["M*-M", "MM", "M*E-", "''", "null", "'*-*-'", "5"],
    "model.mamba": ["{state_size: 4, head_dim: 4, groups: 2}", "{groups: 0}", "{}",
                    "{num_heads: 3, groups: 2}", "{expand: 100, head_dim: 1}", "null"],
    "model.mamba.chunk_size": ["1", "1000000", "0"],
}
SCENARIOS = ["tiny-cpu", "moe-tiny-verify", "cp-tiny-verify", "tp2d-tiny-verify",
             "hybrid-tiny-verify",
             "seed-a-weight-ops", "pipeline-graph-seed-c-8-cpu", "recompute-graph-seed-a-ops",
             "ps-gpt2-medium-16-a100", "mixed-a100-h100-pp2", "straggler-dp16-a100"]
GRAPH_ATTRS = [{"recompute": "yes"}, {"recompute": True}, {"pipeline_stage": 5},
               {"pipeline_stage": -1}, {"pipeline_stage": "0"}, {"primitive_target": "CPU"},
               {"primitive_target": "cpu"}, {"primitive_target": 3}, {"unknown": 1},
               {"recompute": True, "primitive_target": "CPU"}, {"pipeline_stage": 10**30}]


_check = check_command


def _graph_case(rng: random.Random, path: Path) -> Path:
    from simulator.config.resources import bundled_dir

    name = rng.choice(["recompute-graph-seed-a-ops", "pipeline-graph-seed-c-8-cpu",
                       "hetero-embedding-cpu-8-a100"])
    data = yaml.safe_load((bundled_dir("scenarios") / f"{name}.yaml").read_text())
    op = rng.randrange(len(data["model"]["ops"]))
    data["model"]["ops"][op]["attrs"] = dict(data["model"]["ops"][op].get("attrs", {}),
                                             **rng.choice(GRAPH_ATTRS))
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_fuzzed_keys_never_crash_or_hang(tmp_path):
    rng = random.Random(SEED)
    codes: dict[int, int] = {}
    for i in range(160):
        if i % 8 == 7:
            args = [rng.choice(["run", "verify"]), str(_graph_case(rng, tmp_path / f"g{i}.yaml")),
                    "--json"]
        else:
            command = rng.choice(["run"] * 6 + ["verify"] * 3 + ["explain"])
            args = [command, rng.choice(SCENARIOS), "--json"]
            for key in rng.sample(sorted(VALUES), rng.randint(1, 3)):
                args += ["--set", f"{key}={rng.choice(VALUES[key])}"]
        code = _check(args).exit_code  # type: ignore[attr-defined]
        codes[code] = codes.get(code, 0) + 1
    assert codes.get(0, 0) > 10 and codes.get(2, 0) > 80, codes


def test_fuzzed_comm_flags_never_crash(tmp_path):
    rng = random.Random(SEED)
    values = {"--bytes": ["0", "-1", "1e999", "9" * 400, "1T", "17T", "1G", "nan", "0.5",
                          "1", "1GiB", "1GB"],
              "--devices": ["0", "1", "8", "9", "100000", "1000000000", "-3"],
              "--devices-per-node": ["0", "1", "8", "3", "100000"],
              "--algorithm": ["auto", "ring", "tree", "nvls", "pat", "hierarchical", "bogus"],
              "--hardware": ["a100-80gb", "h100-sxm", "cpu-x86", "nope", "/etc/hostname"]}
    for _ in range(60):
        args = ["comm", rng.choice(["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                    "broadcast", "send_recv", "bogus"]), "--json"]
        for flag, pool in values.items():
            if flag in ("--bytes", "--devices", "--hardware") or rng.random() < 0.4:
                args += [flag, rng.choice(pool)]
        _check(args)


# ---- the defects found, pinned ---------------------------------------------------------

def _refused(*args: str) -> str:
    result = _check(list(args))
    assert result.exit_code == 2, (args, result.stdout[-300:])  # type: ignore[attr-defined]
    return result.stderr[len("error: "):-1]  # type: ignore[attr-defined]


def test_an_empty_fusion_index_is_refused():
    assert _refused("run", "tiny-cpu", "--set", "parallel.comm_fusion.mode=index", "--set",
                    "parallel.comm_fusion.index=[]") == (
        "scenarios/tiny-cpu.yaml with --set parallel.comm_fusion.index=[]: "
        "parallel.comm_fusion.index: []: expected at least one layer number that starts a "
        "fusion group (or leave the key out: one group per layer)")


@pytest.mark.parametrize("kind, shard", [("reduce_scatter", 1), ("all_gather", 1),
                                         ("reduce_scatter", 2)])
def test_per_kind_buckets_count_in_the_work_budget(kind, shard):
    key = f"parallel.comm_fusion.{kind}"
    msg = _refused("run", "gpt3-175b-1024-a100", "--json", "--set",
                   f"parallel.optimizer_shard={shard}", "--set", f"{key}.mode=size",
                   "--set", f"{key}.bucket_mb=0.01")
    assert msg.startswith(f"scenarios/gpt3-175b-1024-a100.yaml with --set {key}.bucket_mb=0.01: "
                          f"{key}.bucket_mb: about 8,752,832 events to simulate (545675 "
                          "gradient buckets of 0.01 MB on each of 16 simulated devices")


def test_a_straggler_factor_has_physical_bounds():
    assert _refused("run", "straggler-dp16-a100", "--set",
                    "cluster.slow=[{devices: [11], compute: 1e-300}]").endswith(
        "cluster.slow[0].compute: found 1e-300; expected a value from 0.001 to 1 (a range a "
        "real system could have)")


@pytest.mark.parametrize("command", ["run", "verify", "explain"])
def test_every_command_checks_node_kinds_and_framework(command, write_file):
    scenario = "mixed-a100-h100-pp2" if command != "explain" else "seed-a-weight-ops"
    nodes = "[{hardware: nope, nodes: 2}, {hardware: h100-sxm, nodes: 2}]" \
        if command != "explain" else "[{hardware: nope, nodes: 1}]"
    assert "cluster.node_types[0].hardware: unknown hardware profile 'nope'" in _refused(
        command, scenario, "--set", f"cluster.node_types={nodes}")
    path = write_file("fw.yaml", "[1, 2]\n")
    assert _refused(command, scenario, "--set", f"framework={path}").endswith(
        f"framework: {path}: expected a mapping of keys to values at the top level, found "
        "a list")
    if command != "explain":
        assert _refused(command, "mixed-a100-h100-pp2", "--set", "cluster.node_types=[{hardware: "
                        "ascend-910a, nodes: 2}, {hardware: h100-sxm, nodes: 2}]").endswith(
            "cluster.node_types[0].hardware: device 'ascend-910a' has no peak for dtype "
            "'bf16'; it has: fp16 (the scenario's model.dtype is bf16)")


@pytest.mark.parametrize("args, expected", [
    (["--devices", "1000000000"], "--devices: found 1000000000; expected at most 100,000 "
     "devices (a range a real system could have)"),
    (["--target-time", "inf"], "--target-time: found inf; expected a finite number > 0"),
    (["--tokens", "inf", "--days", "1"], "--tokens: found inf; expected a finite number > 0"),
])
def test_plan_flags_have_bounds(args, expected):
    assert _refused("plan", "tiny-cpu", "--json", *args) == expected


def test_plan_on_one_device_keeps_unset_keys_unset():
    result = _check(["plan", "tiny-cpu", "--json", "--devices", "1"])
    assert result.exit_code == 0 and json.loads(result.stdout)["best"]  # type: ignore


@pytest.mark.parametrize("flags, expected", [
    (["--bytes", "9" * 400], f"--bytes: found '{'9' * 400}'; expected at most 16 TiB (2^44 "
     "bytes, a range a real system could have)"),
    (["--bytes", "1G", "--devices", "1000000000"], "--devices: found 1000000000; expected at "
     "most 100,000 (a range a real system could have)"),
])
def test_comm_flags_have_bounds(flags, expected):
    base = {"--devices": "8", "--hardware": "a100-80gb"}
    args = ["comm", "all_reduce", *flags]
    for flag, value in base.items():
        if flag not in flags:
            args += [flag, value]
    assert _refused(*args) == expected


def test_sweep_bounds_workers_grid_and_out(tmp_path):
    cores = len(os.sched_getaffinity(0))
    grid = ["--grid", "training.micro_batch_size=1,2"]
    assert _refused("sweep", "tiny-cpu", *grid, "--workers", "100000", "--out",
                    str(tmp_path / "a")) == (
        f"--workers: 100000: expected 1 to {4 * cores} processes (4 per usable core of this "
        "machine; each more only adds memory and switching)")
    big = ",".join(str(v) for v in range(1, 201))
    assert _refused("sweep", "tiny-cpu", "--grid", f"training.micro_batch_size={big}",
                    "--grid", f"parallel.tensor={big}", "--out", str(tmp_path / "b")) == (
        "--grid: 40,000 configurations (200 training.micro_batch_size x 200 parallel.tensor), "
        "above the limit of 10,000; give fewer values or raise the limit with --max-configs "
        "40000")
    file = tmp_path / "file"
    file.write_text("x")
    assert _refused("sweep", "tiny-cpu", *grid, "--executor", "serial", "--out",
                    str(file)) == f"--out: {file}: is a file; expected a folder (new or existing)"


def test_graph_micro_batches_are_budgeted_and_verify_runs_two():
    ran = _check(["run", "pipeline-graph-seed-c-8-cpu", "--json", "--set",
                  "parallel.micro_batches=100000"])
    assert ran.exit_code == 0  # type: ignore[attr-defined]
    assert json.loads(ran.stdout)["simulation"]["events"] < 1000  # type: ignore[attr-defined]
    verified = _check(["verify", "pipeline-graph-seed-c-8-cpu", "--json", "--set",
                       "parallel.micro_batches=100000"])
    assert verified.exit_code == 0  # type: ignore[attr-defined]


def test_bad_hugging_face_configs_are_input_errors(write_file):
    deep = write_file("deep.json", '{"a": ' * 5000 + "1" + "}" * 5000)
    assert _refused("run", "tiny-cpu", "--set", f"model={{from_hf: {deep}}}").endswith(
        f"model.from_hf: {deep}: nested too deeply to be a config.json (a model config nests "
        "2 or 3 levels)")
    cfg = {"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 2, "vocab_size": 100, "intermediate_size": 10,
           "max_position_embeddings": 64, "num_local_experts": 0, "num_experts_per_tok": 5}
    zero = write_file("zero.json", json.dumps(cfg))
    assert _refused("run", "tiny-cpu", "--set", f"model={{from_hf: {zero}}}").endswith(
        "model.from_hf: num_local_experts: found 0; expected an integer from 1 to 100000 (a "
        "range a real system could have)")


def test_moe_every_is_named_and_profiles_take_the_hardware_prefix():
    assert _refused("run", "tiny-cpu", "--set", "model.moe.experts=4", "--set",
                    "model.moe.every=5") == (
        "scenarios/tiny-cpu.yaml with --set model.moe.every=5: model.moe.every: 5 must divide "
        "model.layers=2 (valid: 1, 2)")
    assert _refused("profiles", "a100-80gb", "--set", "hardware.memory_GB=-1").endswith(
        "memory_GB: found -1; expected a value from 0.001 to 100000 (a range a real system "
        "could have)")


@pytest.mark.parametrize("args, expected", [
    (["plan", "tiny-cpu", "--devices", "abc"], "Invalid value for '--devices': Input should be "
     "a valid integer, unable to parse string as an integer (`shardsim plan --help` lists "
     "the options)"),
    (["schema", "--json"], "No such option: --json (`shardsim schema --help` lists the "
     "options)"),
    (["comm", "all_reduce", "--bytes", "8"], "Missing option '--devices'. (`shardsim comm "
     "--help` lists the options)"),
])
def test_usage_errors_are_one_error_line(args, expected):
    assert _refused(*args) == expected


def test_every_import_format_has_a_key_fuzz():
    """Each `shardsim import` format (config.imports.load.FORMATS) is fuzzed over its own keys
    by tests/test_import_FORMAT.py's test_fuzz_never_ends_in_an_internal_error (exit 0 or 2,
    never 3): a new format without one fails here."""
    from simulator.config.imports.load import FORMATS

    tests = Path(__file__).parent
    missing = [fmt for fmt in FORMATS if "def test_fuzz_never_ends_in_an_internal_error" not in
               (tests / f"test_import_{fmt}.py").read_text(encoding="utf-8")]
    assert FORMATS and missing == []
