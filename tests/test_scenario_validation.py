"""Every class of bad scenario input gives one exact message naming the file and dotted key.

The same table is checked through the library (`read_yaml_file`, `parse_scenario`,
`resolve_hardware`) here and through the command line (exit status 2, message on stderr,
nothing on stdout) in test_cli_errors.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.resources import bundled_dir, list_bundled
from simulator.config.scenario import parse_scenario, resolve_hardware, split_overrides
from simulator.config.yamlio import apply_overrides, parse_override, read_yaml_file
from simulator.errors import InputError

# (id, raw file content, expected message)
FILE_CASES = [
    ("empty", "", "s.yaml: the file is empty; expected a mapping of keys to values"),
    ("only-comments", "# nothing here\n",
     "s.yaml: the file is empty; expected a mapping of keys to values"),
    ("yaml-syntax", "name: x\nmodel: {layers: 2\n",
     "s.yaml: YAML syntax error at line 3, column 1: expected ',' or '}', but got '<stream end>'"),
    ("tab-indent", "model:\n\tlayers: 2\n",
     "s.yaml: YAML syntax error at line 2, column 1: found character '\\t' that cannot start "
     "any token"),
    ("duplicate-key", "model:\n  layers: 2\n  layers: 3\n",
     "s.yaml: YAML syntax error at line 3, column 3: duplicate key 'layers'"),
    ("non-utf8", b"name: caf\xe9\n", "s.yaml: not UTF-8 text (byte 0xe9 at offset 9)"),
    ("top-level-list", "- a\n- b\n",
     "s.yaml: expected a mapping of keys to values at the top level, found a list"),
    ("top-level-scalar", "hello\n",
     "s.yaml: expected a mapping of keys to values at the top level, found a string"),
]

# (id, edits applied to the tiny scenario in the file, expected message)
DATA_CASES = [
    ("string-for-int", ["model.layers=many"],
     "s.yaml: model.layers: found 'many'; expected an integer"),
    ("float-for-int", ["model.hidden_size=64.5"],
     "s.yaml: model.hidden_size: found 64.5; expected an integer"),
    ("bool-for-int", ["parallel.tensor=true"],
     "s.yaml: parallel.tensor: found a boolean (true); expected an integer"),
    ("bool-for-float", ["training.learning_rate=yes"],
     "s.yaml: training.learning_rate: found a boolean (true); expected a number"),
    ("bool-for-optimizer-shard", ["parallel.optimizer_shard=true"],
     "s.yaml: parallel.optimizer_shard: found a boolean (true); expected an integer"),
    ("zero-degree", ["parallel.pipeline=0"],
     "s.yaml: parallel.pipeline: found 0; expected a value from 1 to 100000 "
     "(a range a real system could have)"),
    ("mapping-expected", ["parallel=4"], "s.yaml: parallel: found 4; expected a mapping"),
    ("missing-key", ["model.seq_length=null"],
     "s.yaml: model.seq_length: found nothing (null); expected an integer"),
    ("unknown-key", ["parallel.tensr=2"],
     "s.yaml: parallel.tensr: unknown key (did you mean 'tensor'?); allowed: comm_fusion, "
     "comm_subgraph, context, data, dataset_strategy, enable_alltoall, expert, "
     "expert_dispatcher, expert_tensor, full_batch, micro_batches, mode, offload, "
     "optimizer_shard, optimizer_threshold_kb, overlap, "
     "parameter_server, pipeline, pipeline_layers, recompute, recompute_comm, "
     "recompute_modules, recompute_slice_activation, schedule, search, sequence_parallel, "
     "strategy_ckpt_load_file, strategy_ckpt_save_file, tensor, tensor_nd, virtual_stages"),
    ("unknown-top-key", ["hardwre=cpu-x86"],
     "s.yaml: hardwre: unknown key (did you mean 'hardware'?); allowed: cluster, framework, "
     "hardware, model, name, parallel, seed, training"),
    ("unknown-nested-key", ["parallel.offload.paramters=true"],
     "s.yaml: parallel.offload.paramters: unknown key (did you mean 'parameters'?); "
     "allowed: activations, nvme_pipeline_read, nvme_pipeline_write, optimizer_states, "
     "parameters"),
    ("unknown-model-type", ["model.type=transfomer"],
     "s.yaml: model.type: found 'transfomer'; allowed: transformer, mlp, resnet, graph, "
     "vit (did you mean 'transformer'?)"),
    ("unknown-dtype", ["model.dtype=bf61"],
     "s.yaml: model.dtype: found 'bf61'; allowed: fp32, fp16, bf16, fp8 (did you mean "
     "'bf16'?)"),
    ("unknown-schedule", ["parallel.schedule=1f1f"],
     "s.yaml: parallel.schedule: found '1f1f'; allowed: gpipe, 1f1b, interleaved_1f1b, "
     "zb_h1, zb_h2, dualpipe (did you mean '1f1b'?)"),
    ("degrees-product", ["parallel.data=4"],
     "s.yaml: parallel: data*tensor*pipeline = 4*2*1 = 8 must equal "
     "cluster.nodes*cluster.devices_per_node = 1*4 = 4"),
    ("heads-by-tensor", ["parallel.data=1", "parallel.tensor=4", "model.num_heads=2"],
     "s.yaml: parallel.tensor: 4 must divide model.num_heads=2 (valid: 1, 2)"),
    ("kv-heads-by-tensor", ["model.num_kv_heads=1"],
     "s.yaml: parallel.tensor: 2 must divide model.num_kv_heads=1 (valid: 1)"),
    ("hidden-by-heads", ["model.num_heads=6"],
     "s.yaml: model.num_heads: 6 must divide model.hidden_size=64 (valid: 1, 2, 4, 8, 16, "
     "32, 64)"),
    ("batch-by-micro-data", ["training.global_batch_size=6"],
     "s.yaml: training.global_batch_size: 6 must be a multiple of "
     "training.micro_batch_size*parallel.data = 2*2 = 4 (gradient-accumulation steps must "
     "be whole)"),
    ("stage-layers-sum", ["parallel.data=1", "parallel.pipeline=2", "model.layers=3",
                          "parallel.pipeline_layers=[1,1]"],
     "s.yaml: parallel.pipeline_layers: adds up to 2 layers; expected model.layers = 3"),
    ("stage-layers-count", ["parallel.data=1", "parallel.pipeline=2",
                            "parallel.pipeline_layers=[1,1,2]"],
     "s.yaml: parallel.pipeline_layers: has 3 entries; expected one per virtual stage, "
     "parallel.pipeline*virtual_stages = 2"),
    ("stages-without-layers", ["parallel.data=1", "parallel.tensor=1", "parallel.pipeline=4",
                               "model.layers=3"],
     "s.yaml: parallel.pipeline: 4 stages x 1 chunks need at least 4 layers; model.layers is "
     "3"),
    ("seq-by-tensor-sp", ["parallel.sequence_parallel=true", "model.seq_length=33"],
     "s.yaml: parallel.tensor: 2 must divide model.seq_length=33 (valid: 1, 3, 11, 33)"),
    ("unknown-hardware", ["hardware=a100-80gbb"],
     "s.yaml: hardware: found 'a100-80gbb', which is neither a bundled profile nor a file "
     "(did you mean 'a100-80gb'?); bundled: a100-80gb, cpu-x86, h100-sxm"),
]

# (id, --set items, expected message): bad override syntax and overrides to blame.
SET_CASES = [
    ("set-no-equals", ["parallel.tensor"],
     "--set: parallel.tensor: expected KEY=VALUE, for example parallel.tensor=4"),
    ("set-empty-key", ["=4"], "--set: =4: the key must be a dotted path like parallel.tensor"),
    ("set-empty-part", ["parallel..tensor=4"],
     "--set: parallel..tensor: the key must be a dotted path like parallel.tensor"),
    ("set-into-scalar", ["parallel.tensor.x=4"],
     "--set: parallel.tensor.x: parallel.tensor is not a mapping"),
    ("set-unknown-key", ["parallel.tensr=2"],
     "s.yaml with --set parallel.tensr=2: parallel.tensr: unknown key (did you mean "
     "'tensor'?); allowed: comm_fusion, comm_subgraph, context, data, dataset_strategy, "
     "enable_alltoall, expert, expert_dispatcher, expert_tensor, full_batch, "
     "micro_batches, mode, offload, optimizer_shard, "
     "optimizer_threshold_kb, overlap, parameter_server, pipeline, pipeline_layers, "
     "recompute, recompute_comm, recompute_modules, recompute_slice_activation, schedule, "
     "search, sequence_parallel, strategy_ckpt_load_file, strategy_ckpt_save_file, tensor, "
     "tensor_nd, virtual_stages"),
    ("set-breaks-rule", ["parallel.tensor=4"],
     "s.yaml with --set parallel.tensor=4: parallel: data*tensor*pipeline = 2*4*1 = 8 must "
     "equal cluster.nodes*cluster.devices_per_node = 1*4 = 4"),
    ("set-unknown-hardware", ["hardware=h100-sxn"],
     "s.yaml with --set hardware=h100-sxn: hardware: found 'h100-sxn', which is neither a "
     "bundled profile nor a file (did you mean 'h100-sxm'?); bundled: a100-80gb, cpu-x86, "
     "h100-sxm"),
]


def _load(data: dict[str, Any], overrides: list[str] = ()) -> None:
    """What the CLI does after reading the file: validate, then check the hardware."""
    for item in overrides:
        parse_override(item)
    scen_o, _ = split_overrides(overrides)
    scenario = parse_scenario(data, "s.yaml", scen_o)
    resolve_hardware(scenario, None, scen_o)


@pytest.mark.parametrize("content, expected", [c[1:] for c in FILE_CASES],
                         ids=[c[0] for c in FILE_CASES])
def test_unusable_file_is_named(write_file, content, expected):
    path = write_file("s.yaml", content)
    with pytest.raises(InputError) as info:
        read_yaml_file(path, "s.yaml")
    assert str(info.value) == expected


@pytest.mark.parametrize("edits, expected", [c[1:] for c in DATA_CASES],
                         ids=[c[0] for c in DATA_CASES])
def test_bad_value_names_key(tiny_scenario_data, fake_bundled_profiles, edits, expected):
    data = apply_overrides(tiny_scenario_data, edits)
    with pytest.raises(InputError) as info:
        _load(data)
    assert str(info.value) == expected


@pytest.mark.parametrize("overrides, expected", [c[1:] for c in SET_CASES],
                         ids=[c[0] for c in SET_CASES])
def test_bad_override_is_blamed(tiny_scenario_data, fake_bundled_profiles, overrides,
                                expected):
    with pytest.raises(InputError) as info:
        _load(tiny_scenario_data, overrides)
    assert str(info.value) == expected


def test_valid_scenario_takes_contract_defaults(tiny_scenario_data, fake_bundled_profiles):
    s = parse_scenario(tiny_scenario_data, "s.yaml")
    p = s.parallel
    assert (p.schedule, p.virtual_stages, p.sequence_parallel, p.optimizer_shard,
            p.recompute) == ("1f1b", 1, False, 0, "none")
    assert (p.comm_fusion.mode, p.comm_fusion.bucket_mb) == ("size", 25)
    assert (p.overlap.grad_reduce, p.overlap.copies) == (True, 1)
    assert not (p.offload.optimizer_states or p.offload.parameters or p.offload.activations)
    assert s.grad_accum_steps == 2
    assert resolve_hardware(s).name == "cpu-x86.yaml"


def test_degrees_default_to_one(tiny_scenario_data):
    data = apply_overrides(tiny_scenario_data, ["cluster.devices_per_node=1"])
    del data["parallel"]
    assert parse_scenario(data, "s.yaml").parallel.devices == 1


def test_exponent_without_dot_is_a_float(tiny_scenario_data):
    s = parse_scenario(tiny_scenario_data, "s.yaml", ["training.learning_rate=1e-4"])
    assert s.training.learning_rate == pytest.approx(1e-4)


def test_hardware_path_relative_to_scenario(tiny_scenario_data, write_file):
    hw = write_file("profiles/mine.yaml", "name: mine\n")
    data = apply_overrides(tiny_scenario_data, ["hardware=profiles/mine.yaml"])
    s = parse_scenario(data, "s.yaml")
    assert resolve_hardware(s, hw.parent.parent) == hw


def test_override_does_not_touch_input(tiny_scenario_data):
    before = repr(tiny_scenario_data)
    parse_scenario(tiny_scenario_data, "s.yaml", ["parallel.data=1", "parallel.tensor=4"])
    assert repr(tiny_scenario_data) == before


@pytest.mark.parametrize("name", ["gpt3-175b-1024-a100", "llama2-70b-64-h100",
                                  "llama2-7b-8-ascend910b", "tiny-cpu"])
def test_bundled_scenario_is_valid(name):
    from simulator.config.resources import bundled_dir

    path = bundled_dir("scenarios") / f"{name}.yaml"
    s = parse_scenario(read_yaml_file(path), str(path))
    assert s.parallel.devices == s.devices
    assert path.read_text(encoding="utf-8").startswith("# ")  # says what it is and cites


@pytest.mark.parametrize("name", list_bundled("scenarios"))
def test_every_bundled_scenario_parses(name):
    path = bundled_dir("scenarios") / f"{name}.yaml"
    s = parse_scenario(read_yaml_file(path), str(path))
    assert resolve_hardware(s, path.parent).is_file()


def test_gpt3_scenario_is_the_contract_example():
    from simulator.config.resources import bundled_dir

    path = bundled_dir("scenarios") / "gpt3-175b-1024-a100.yaml"
    s = parse_scenario(read_yaml_file(path), "gpt3.yaml")
    m, p = s.model, s.parallel
    assert (s.cluster.nodes, s.cluster.devices_per_node, s.hardware) == (128, 8, "a100-80gb")
    assert (m.layers, m.hidden_size, m.num_heads, m.seq_length, m.vocab_size) == (
        96, 12288, 96, 2048, 51200)
    assert (p.data, p.tensor, p.pipeline, p.recompute) == (8, 8, 16, "full")
    assert (s.training.global_batch_size, s.training.micro_batch_size) == (1536, 1)
    assert s.grad_accum_steps == 192


def test_split_overrides_separates_hardware():
    assert split_overrides(["parallel.tensor=2", "hardware.memory_GB=40", "hardware=x"]) == (
        ["parallel.tensor=2", "hardware=x"], ["memory_GB=40"])


def test_messages_fit_a_few_lines():
    for _, _, message in FILE_CASES + DATA_CASES + SET_CASES:
        assert "\n" not in message and "Traceback" not in message


