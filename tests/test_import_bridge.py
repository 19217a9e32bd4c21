"""`shardsim import bridge` (issue 27): the Megatron-Bridge 25.11 performance configs of
Llama-3 8B (B200, as dotted overrides) and 70B (H100, as a ConfigContainer YAML), written out
from NVIDIA-NeMo/Megatron-Bridge @00b7660be025 (scenarios/bridge/), import to the hand-written
validation scenarios bridge2511-b200-llama3-8b-8g and bridge2511-h100-llama3-70b-64g exactly;
NeMo 2's names read as Bridge's; bad input as one error naming the file, line and key (exit
2); `plan --emit bridge` (alias nemo) read back to the same scenario; a fuzz over the keys."""

from __future__ import annotations

import copy
import functools
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from simulator import api
from simulator.cli import app
from simulator.config.imports.bridge_keys import KEYS
from simulator.config.imports.load import import_file
from tests.test_import_mindformers import _sections

ROOT = Path(__file__).parent.parent
DATA = ROOT / "scenarios" / "bridge"
VALIDATION = ROOT / "scenarios" / "validation"
YAML = DATA / "llama3-70b-h100-fp8cs.yml"
# bundled config: (validation run, hardware, nodes)
CASES = {"llama3-70b-h100-fp8cs": ("bridge2511-h100-llama3-70b-64g", "h100-sxm", 8),
         "llama3-8b-b200-fp8cs": ("bridge2511-b200-llama3-8b-8g", "b200-sxm", 1)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_gives_the_hand_written_scenario(case: str) -> None:
    run, hardware, nodes = CASES[case]
    hand = api.load_scenario(str(VALIDATION / f"{run}.yaml"))
    _, scenario = import_file("bridge", case, hardware, nodes, 8)
    assert scenario.framework == hand.scenario.framework == "megatron-bridge"
    want, got = _sections(hand.scenario), _sections(scenario)
    assert {k: (want[k], got[k]) for k in want if want[k] != got[k]} == {}


def test_nemo2_names_read_as_bridge_names(tmp_path: Path) -> None:
    """The same run under NeMo 2's names (trainer.strategy.*, model.config.*, data.*,
    trainer.num_nodes/devices) imports to the same scenario, the world size its trainer's."""
    text = (DATA / "llama3-8b-b200-fp8cs.yml").read_text()
    renamed = (text.replace("model.tensor_model", "trainer.strategy.tensor_model")
               .replace("model.num_layers", "model.config.num_layers")
               .replace("train.global_batch_size", "data.global_batch_size")
               .replace("train.micro_batch_size", "data.micro_batch_size")
               + "trainer.num_nodes=1 trainer.devices=8\n")
    (tmp_path / "nemo2.txt").write_text(renamed)
    imported, scenario = import_file("bridge", str(tmp_path / "nemo2.txt"), "b200-sxm")
    _, bridge = import_file("bridge", "llama3-8b-b200-fp8cs", "b200-sxm", 1, 8)
    assert _sections(scenario) == _sections(bridge)
    assert "data.global_batch_size read as train.global_batch_size (NeMo 2's name)" in \
        imported.notes


@functools.cache
def _source() -> dict[str, Any]:
    """The mapping the edits start from, parsed once (each edit changes a copy)."""
    return yaml.safe_load(YAML.read_text())


def _text(tmp_path: Path, edits: dict[str, Any]) -> Path:
    data = copy.deepcopy(_source())
    for key, value in edits.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[leaf] = value
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _error(tmp_path: Path, edits: dict[str, Any], *extra: str) -> str:
    res = CliRunner().invoke(app, ["import", "bridge", str(_text(tmp_path, edits)),
                                   "--nodes", "8", "--devices-per-node", "8", *extra])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    return res.stderr.split(": ", 1)[1].strip()


@pytest.mark.parametrize(("edits", "message"), [
    ({"model.tensor_model_paralel_size": 2}, "model.tensor_model_paralel_size: not a key of a "
     "Megatron-Bridge config this importer knows (did you mean 'model.tensor_model_parallel_"
     "size'?)"),
    ({"model.pipeline_model_parallel_size": 3}, "model.tensor_model_parallel_size: tensor 4 x "
     "pipeline 3 x context 1 = 12 does not divide the 64 devices"),
    ({"train.global_batch_size": 129}, "train.global_batch_size: 129 is not a multiple of "
     "micro_batch_size 1 x data parallel 2 = 2"),
    ({"ddp.use_megatron_fsdp": True}, "ddp.use_megatron_fsdp: True changes what Megatron-"
     "Bridge runs and has no scenario key (Megatron FSDP (parameters sharded too)); "
     "--lenient imports without it"),
    ({"mixed_precision.first_last_layers_bf16": True}, "mixed_precision.first_last_layers_"
     "bf16: True changes what Megatron-Bridge runs"),
    ({"mixed_precision.fp8_recipe": "blockwise"}, "mixed_precision.fp8_recipe: found "
     "'blockwise'; the fp8 recipes simulated: tensorwise, delayed, mxfp8"),
    ({"model.gated_linear_unit": False}, "model.gated_linear_unit: False with silu: the FFNs "
     "simulated are SwiGLU (gated silu), GELU and squared ReLU (not gated)"),
    ({"model.recompute_granularity": "full", "model.recompute_method": "block",
      "model.recompute_num_layers": 2}, "model.recompute_num_layers: 2 with method 'block': "
     "part of each stage recomputed, not simulated"),
    ({"model.kv_channels": 64}, "model.kv_channels: 64 with hidden_size / heads 128"),
    ({"optimizer.use_distributed_optimizer": False}, "optimizer.use_distributed_optimizer: "
     "differs from ddp.use_distributed_optimizer: one optimizer"),
    ({"model.num_moe_experts": 8}, "model.num_moe_experts: 8 changes what Megatron-Bridge "
     "runs and has no scenario key (mixture-of-experts layers"),
    ({"mixed_precision.fp8_param_gather": "yes"}, "mixed_precision.fp8_param_gather: found "
     "'yes'; expected true or false"),
])
def test_bad_input_is_one_error_naming_the_key(tmp_path: Path, edits: dict[str, Any],
                                               message: str) -> None:
    assert message in _error(tmp_path, edits)


@pytest.mark.parametrize(("edits", "fp8_params"), [
    ({}, True),  # the bundled config's fp8_param_gather: true
    ({"mixed_precision.fp8_param_gather": False}, False),
    ({"mixed_precision.fp8_param_gather": None, "mixed_precision.fp8_param": False}, False),
])
def test_fp8_param_gather_is_fp8_params(tmp_path: Path, edits: dict[str, Any],
                                        fp8_params: bool) -> None:
    """Bridge keeps fp8_param and fp8_param_gather equal (mixed_precision.py): either gives
    the FP8 weights of `training.fp8_params`."""
    _, scenario = import_file("bridge", str(_text(tmp_path, edits)), "h100-sxm", 8, 8)
    assert scenario.training.fp8_params is fp8_params


@pytest.mark.parametrize(("edits", "scaling"), [
    ({}, "tensor"),
    ({"mixed_precision.fp8_recipe": "delayed"}, "tensor"),
    ({"mixed_precision.fp8_recipe": "mxfp8"}, "mxfp8"),
])
def test_fp8_recipe_is_fp8_scaling(tmp_path: Path, edits: dict[str, Any], scaling: str) -> None:
    """Current and delayed scaling are one scale per tensor; MXFP8 Blackwell's blocks."""
    _, scenario = import_file("bridge", str(_text(tmp_path, edits)), "b200-sxm", 8, 8)
    assert scenario.training.fp8_scaling == scaling


def test_lenient_leaves_out_unknown_and_refused_keys_with_a_note(tmp_path: Path) -> None:
    path = _text(tmp_path, {"model.cpu_offloading": True, "model.made_up_key": 1})
    imported, scenario = import_file("bridge", str(path), "h100-sxm", 8, 8, lenient=True)
    kinds = {r.flag: r.kind for r in imported.rows}
    assert kinds["model.cpu_offloading"] == kinds["model.made_up_key"] == "lenient"
    assert any(n.startswith("model.made_up_key (line") for n in imported.notes)
    hand = api.load_scenario(str(VALIDATION / "bridge2511-h100-llama3-70b-64g.yaml"))
    assert _sections(scenario) == _sections(hand.scenario)


def test_world_size_and_override_syntax_are_named(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["import", "bridge", str(YAML)])
    assert res.exit_code == 2 and "--nodes: a Megatron-Bridge config does not hold the " \
        "world size" in res.stderr
    (tmp_path / "o.txt").write_text("model.num_layers=2 model.hidden_size\n")
    res = CliRunner().invoke(app, ["import", "bridge", str(tmp_path / "o.txt"), "--nodes", "1",
                                   "--devices-per-node", "1"])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {tmp_path / 'o.txt'}:1: model.hidden_size: expected "
                                 "a dotted override KEY=VALUE")


_FUZZ = (0, 1, 2, 4, 8, -1, 1.5, "x", True, False, None, "selective", "full", "block",
         [1, 2], ["core_attn", "layernorm"], "RMSNorm", "rope", "hybrid", "bf16_mixed")


def test_fuzz_never_ends_in_an_internal_error(tmp_path: Path) -> None:
    """Random keys of the table with random values: exit 0 or 2, never 3."""
    rng = random.Random(27)
    keys = sorted(KEYS)
    codes = []
    for i in range(80):
        edits = {k: rng.choice(_FUZZ) for k in rng.sample(keys, rng.randint(1, 5))}
        res = CliRunner().invoke(app, ["import", "bridge", str(_text(tmp_path, edits)),
                                       "--nodes", "8", "--devices-per-node", "8",
                                       *(["--lenient"] if i % 2 else [])])
        assert res.exit_code in (0, 2), (edits, res.stderr)
        assert res.exit_code == 0 or res.stderr.count("\n") == 1, res.stderr
        codes.append(res.exit_code)
    assert 0 in codes and 2 in codes


@pytest.mark.parametrize("run", ["bridge2511-h100-llama3-70b-64g",
                                 "bridge2511-b200-llama3-8b-8g", "bridge2511-b200-llama3-8b-mx-8g",
                                 "nemo2407-h100-gpt3-5b-64g",
                                 "nemo2407-h100-llama2-70b-64g"])
def test_emit_imports_back_to_the_same_scenario(tmp_path: Path, run: str) -> None:
    loaded = api.load_scenario(str(VALIDATION / f"{run}.yaml"))
    text = api.emit_config("nemo", loaded, [])
    (tmp_path / "emitted.txt").write_text(text)
    c = loaded.scenario.cluster
    _, back = import_file("bridge", str(tmp_path / "emitted.txt"), loaded.scenario.hardware,
                          c.nodes, c.devices_per_node)
    assert _sections(back) == _sections(loaded.scenario)


def test_emit_names_what_bridge_cannot_say() -> None:
    loaded = api.load_scenario(str(VALIDATION / "bridge2511-h100-llama3-70b-64g.yaml"),
                               ["parallel.comm_fusion.mode=size",
                                "parallel.comm_fusion.bucket_mb=25"])
    with pytest.raises(api.InputError, match="keys Bridge cannot express: parallel.comm_fusion"):
        api.emit_config("bridge", loaded, [])


def test_scenario_key_from_bridge_config(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "name: x\nhardware: b200-sxm\ncluster: {nodes: 1, devices_per_node: 8}\n"
        "from: {bridge_config: llama3-8b-b200-fp8cs}\n")
    s = api.load_scenario(str(tmp_path / "s.yaml")).scenario
    hand = api.load_scenario(str(VALIDATION / "bridge2511-b200-llama3-8b-8g.yaml")).scenario
    assert _sections(s) == _sections(hand)
