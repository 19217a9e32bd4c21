"""`shardsim import deepspeed` (issue 27): a DeepSpeed config with a Hugging Face model config
as a scenario: DeepSpeed's batch rule, ZeRO stages and offload, the buckets, the keys the
Hugging Face Trainer fills ("auto"), bad input as one error naming the file, line and key
(exit 2), and a fuzz over the keys that never ends in an internal error."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simulator import api
from simulator.cli import app
from simulator.config.imports.deepspeed_keys import KEYS

BASE: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                        "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
WORLD = ["--nodes", "1", "--devices-per-node", "8"]
MODEL = ["--model", "llama-2-7b", "--seq-length", "4096"]


def _run(tmp_path: Path, config: dict[str, Any] | str, *extra: str) -> tuple[int, str, str]:
    text = config if isinstance(config, str) else json.dumps(config, indent=2)
    (tmp_path / "ds.json").write_text(text)
    res = CliRunner().invoke(app, ["import", "deepspeed", str(tmp_path / "ds.json"), *MODEL,
                                   *WORLD, *extra])
    return res.exit_code, res.stdout, res.stderr


def _scenario(tmp_path: Path, config: dict[str, Any], *extra: str) -> dict:
    code, out, err = _run(tmp_path, config, "--json", *extra)
    assert code == 0, err
    return json.loads(out)["scenario"]


def _error(tmp_path: Path, config: dict[str, Any] | str, *extra: str) -> str:
    code, _, err = _run(tmp_path, config, *extra)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    return err[len("error: "):-1]


def test_batch_as_deepspeed_derives_it(tmp_path: Path) -> None:
    s = _scenario(tmp_path, BASE)
    assert s["training"] == {"global_batch_size": 64, "micro_batch_size": 2,
                             "optimizer": "adam"}  # 2 x 4 x 8 GPUs
    s = _scenario(tmp_path, {"train_batch_size": 32, "gradient_accumulation_steps": 2})
    assert (s["training"]["micro_batch_size"], s["model"]["dtype"]) == (2, "fp32")
    s = _scenario(tmp_path, {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 1})
    assert s["training"]["global_batch_size"] == 32  # accumulation 4 derived
    assert _error(tmp_path, {**BASE, "train_batch_size": 60}).endswith(
        "ds.json:10: train_batch_size: 60 is not micro-batch 2 x gradient accumulation 4 x 8 "
        "GPUs = 64 (DeepSpeed refuses it)")


def test_zero_stages_offload_and_buckets(tmp_path: Path) -> None:
    s = _scenario(tmp_path, {**BASE, "zero_optimization": {
        "stage": 2, "reduce_bucket_size": 2e8, "offload_optimizer": {"device": "cpu"}}})
    p = s["parallel"]
    assert (p["optimizer_shard"], p["data"], p["overlap"]) == (2, 8, {"grad_reduce": False})
    assert p["comm_fusion"] == {"mode": "size", "bucket_mb": 400.0}  # 2e8 bf16 elements
    assert p["offload"] == {"optimizer_states": True}
    s = _scenario(tmp_path, {**BASE, "zero_optimization": {"stage": 3}})
    p = s["parallel"]  # overlap_comm: on by default for stage 3 (zero/config.py)
    assert p["overlap"] == {"grad_reduce": True} and p["comm_fusion"] == {"mode": "auto"}
    # parameter offload maps to parallel.offload.parameters, which the scenario rules refuse
    # with ZeRO-3 for now: the error names the DeepSpeed key
    assert _error(tmp_path, {**BASE, "zero_optimization": {
        "stage": 3, "offload_param": {"device": "cpu"}}}).endswith(
        "ds.json:10: zero_optimization.offload_param.device: cpu: true with "
        "parallel.optimizer_shard 3 is not simulated yet (allowed: optimizer_shard 0) "
        "(scenario key parallel.offload.parameters)")


def test_nvme_optimizer_offload_is_zero_infinity(tmp_path: Path) -> None:
    # ZeRO-Infinity: offload_optimizer.device nvme is parallel.offload.optimizer_states nvme
    s = _scenario(tmp_path, {**BASE, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}})
    assert s["parallel"]["offload"] == {"optimizer_states": "nvme"}
    assert s["parallel"]["optimizer_shard"] == 3
    s = _scenario(tmp_path, {**BASE, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "nvme", "pipeline_read": True,
                                          "pipeline_write": False}}})
    assert s["parallel"]["offload"] == {"optimizer_states": "nvme", "nvme_pipeline_read": True}
    assert _error(tmp_path, {**BASE, "zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "nvme"}}}).endswith(
        "ds.json:10: zero_optimization.offload_optimizer.device: 'nvme' with ZeRO stage 2: "
        "DeepSpeed swaps optimizer states to NVMe only with stage 3")
    assert _error(tmp_path, {**BASE, "zero_optimization": {
        "stage": 3, "offload_param": {"device": "nvme"}}}).endswith(
        "ds.json:10: zero_optimization.offload_param.device: 'nvme': parameters on NVMe have "
        "no scenario key yet (allowed here: 'none', 'cpu'; the optimizer's states may go to "
        "'nvme')")


def test_auto_values_take_the_trainers(tmp_path: Path) -> None:
    hf = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "train_batch_size": "auto", "bf16": {"enabled": "auto"},
          "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}
    assert _error(tmp_path, hf).endswith(
        "ds.json:6: bf16.enabled: \"auto\": the Hugging Face Trainer fills it from its --bf16 "
        "/ --fp16; give --dtype")
    s = _scenario(tmp_path, hf, "--dtype", "bf16", "--micro-batch-size", "4",
                  "--gradient-accumulation-steps", "2")
    assert s["training"]["global_batch_size"] == 64 and s["model"]["dtype"] == "bf16"


@pytest.mark.parametrize(("config", "message"), [
    ({**BASE, "zero_optimisation": {"stage": 1}}, "ds.json:11: zero_optimisation.stage: not a "
     "key of DeepSpeed's config this importer knows (did you mean 'zero_optimization.stage'?)"
     " (deepspeed/runtime/constants.py, zero/config.py)"),
    ({**BASE, "zero_optimization": {"stage": 4}}, "ds.json:8: zero_optimization.stage: found "
     "4; expected a whole number from 0 to 3 (or \"auto\")"),
    ({**BASE, "fp16": {"enabled": True}}, "ds.json:5: bf16.enabled: true with fp16.enabled "
     "true; DeepSpeed allows one (runtime/config.py 'bfloat16 and fp16 modes cannot be "
     "simultaneously enabled')"),
    ({**BASE, "zero_optimization": {"stage": 3, "zero_quantized_weights": True}},
     "ds.json:9: zero_optimization.zero_quantized_weights: True changes what DeepSpeed runs "
     "and has no scenario key (ZeRO++ / MiCS: quantized or hierarchical collectives); "
     "--lenient imports without it"),
    ({**BASE, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}},
     "ds.json:10: zero_optimization.offload_param.device: 'cpu' with ZeRO stage 2: DeepSpeed "
     "offloads parameters only with stage 3"),
    ({**BASE, "optimizer": {"type": "Lamb"}}, "ds.json:11: optimizer.type: found 'Lamb'; the "
     "optimizers simulated: Adam, AdamW (and their fused / CPU forms)"),
    ({**BASE, "communication_data_type": "fp32"}, "ds.json:10: communication_data_type: "
     "'fp32' with bf16 training: gradients reduced in another dtype than bf16 have no "
     "scenario key"),
    ("{\"train_batch_size\": 8,}", "ds.json:1: not JSON (Expecting property name enclosed in "
     "double quotes, column 24)"),
])
def test_bad_input_is_one_error_naming_the_line_and_key(tmp_path: Path, config: Any,
                                                         message: str) -> None:
    assert _error(tmp_path, config).endswith(message)


def test_features_left_off_are_not_refused(tmp_path: Path) -> None:
    s = _scenario(tmp_path, {**BASE, "zero_optimization": {
        "stage": 3, "zero_quantized_weights": False, "zero_hpz_partition_size": 1},
        "progressive_layer_drop": {"enabled": False, "theta": 0.5}})
    assert s["parallel"]["optimizer_shard"] == 3
    code, out, err = _run(tmp_path, {**BASE, "sparse_gradients": True}, "--lenient")
    assert code == 0 and "note: sparse_gradients (line 10) left out: sparse embedding" in err


_FUZZ = (0, 1, 2, 3, 8, -1, 1.5, 5e8, "x", "auto", "cpu", "nvme", "none", "Adam", "fp16",
         True, False, None, [1])


def test_fuzz_never_ends_in_an_internal_error(tmp_path: Path) -> None:
    """Random subsets of the table's keys with random values: exit 0 or 2, never 3."""
    rng = random.Random(27)
    keys = sorted(KEYS)
    codes = []
    for i in range(100):
        config: dict[str, Any] = json.loads(json.dumps(BASE)) if rng.random() < 0.7 else {}
        for key in rng.sample(keys, rng.randint(1, 8)):
            node = config
            *parents, leaf = key.split(".")
            for part in parents:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[leaf] = rng.choice(_FUZZ)
        code, _, err = _run(tmp_path, config, *(["--lenient"] if i % 2 else []))
        assert code in (0, 2), (config, err)
        assert code == 0 or (err.startswith("error: ") and err.count("\n") == 1), err
        codes.append(code)
    assert 0 in codes and 2 in codes


def test_scenario_key_from_deepspeed_config(tmp_path: Path) -> None:
    """`from: {deepspeed_config: FILE}` beside a model section and a cluster."""
    (tmp_path / "ds.json").write_text(json.dumps(BASE))
    (tmp_path / "s.yaml").write_text(
        "name: from ds\nhardware: h100-sxm\ncluster: {nodes: 1, devices_per_node: 8}\n"
        "from: {deepspeed_config: ds.json}\nmodel: {from_hf: llama-2-7b, seq_length: 4096}\n")
    s = api.load_scenario(str(tmp_path / "s.yaml")).scenario
    assert s.framework == "deepspeed-zero" and s.parallel.optimizer_shard == 2
    assert s.model.dtype == "bf16" and s.training.global_batch_size == 64
