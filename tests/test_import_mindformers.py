"""`shardsim import mindformers` (issue 27): the bundled MindFormers run configs of the four
published 910B runs (mindspore-ai/docs models.md) import to the hand-written validation
scenarios exactly, so `run` predicts the same time; MindFormers' FFN rule; bad input as one
error naming the file, line and key (exit 2), and a fuzz over the keys. (The round trip
found the mf-910b-* validation files simulating dropout 0.1, which MindFormers' Llama does
not have, and no parallel_optimizer_threshold, which the configs set to 64 KB: they now state
both.)"""

from __future__ import annotations

import copy
import functools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from simulator import api
from simulator.cli import app
from simulator.config.imports.load import import_file
from simulator.config.imports.megatron_emit import resolved
from simulator.config.imports.mindformers import ffn_width
from simulator.config.imports.mindformers_keys import KEYS

ROOT = Path(__file__).parent.parent
DATA = ROOT / "scenarios" / "mindformers"
# bundled config -> (validation run, nodes of 8, what --lenient lets through)
CASES = {"llama2-7b-pretrain-bf16": ("mf-910b-llama2-7b-8p", 1, False),
         "llama2-13b-finetune-bf16": ("mf-910b-llama2-13b-8p", 1, False),
         "llama2-70b-finetune-bf16-32p": ("mf-910b-llama2-70b-32p", 4, True),
         "llama3-8b-finetune-8k": ("mf-910b-llama3-8b-8p", 1, False)}


def _leaves(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out.update(_leaves(sub, f"{prefix}.{key}"))
        return out
    return {prefix: value}


def _sections(scenario: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("model", "training", "parallel", "cluster"):
        out.update(_leaves(resolved(getattr(scenario, name)), name))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_gives_the_hand_written_scenario(case: str) -> None:
    run, nodes, lenient = CASES[case]
    hand = api.load_scenario(str(ROOT / "scenarios" / "validation" / f"{run}.yaml"))
    _, scenario = import_file("mindformers", str(DATA / f"{case}.yml"), "ascend-910b", nodes,
                              8, lenient)
    assert scenario.framework == hand.scenario.framework == "mindspore"
    want, got = _sections(hand.scenario), _sections(scenario)
    differ = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
    assert not differ, differ
    assert api.simulate(hand).iteration_time_s == api.simulate(scenario).iteration_time_s


def test_the_70b_per_stage_recompute_is_named() -> None:
    with pytest.raises(api.InputError, match=r"llama2-70b-finetune-bf16-32p.yml:106: "
                       r"recompute_config.select_recompute: \[8, 4, 4, 1, 1, 1, 1, 1\]: the "
                       "layers of each stage recomputed, part of a stage: not simulated"):
        import_file("mindformers", str(DATA / "llama2-70b-finetune-bf16-32p.yml"),
                    "ascend-910b", 4, 8)


def test_ffn_rule_is_mindformers() -> None:
    # llama_layer.py: 4h x (multiplier + 0.01) x 2/3, up to multiple_of
    assert ffn_width(4096, 256, None) == 11008 and ffn_width(5120, 256, None) == 13824
    assert ffn_width(8192, 256, 1.3) == 28672


@functools.cache
def _source() -> dict[str, Any]:
    """The mapping the edits start from, parsed once (each edit changes a copy)."""
    return yaml.safe_load((DATA / "llama2-7b-pretrain-bf16.yml").read_text())


def _text(tmp_path: Path, edits: dict[str, Any]) -> Path:
    data = copy.deepcopy(_source())
    for key, value in edits.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _error(tmp_path: Path, edits: dict[str, Any]) -> str:
    res = CliRunner().invoke(app, ["import", "mindformers", str(_text(tmp_path, edits)),
                                   "--nodes", "1", "--devices-per-node", "8"])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    return res.stderr.split(": ", 1)[1].strip()


@pytest.mark.parametrize(("edits", "message"), [
    ({"parallel_config.data_paralel": 8}, "parallel_config.data_paralel: not a key of a "
     "MindFormers run config this importer knows (did you mean 'parallel_config."
     "data_parallel'?)"),
    ({"parallel_config.model_parallel": 2}, "parallel_config.data_parallel: data 8 x model 2 "
     "x pipeline 1 x context 1 = 16, not the 8 devices (MindFormers refuses it)"),
    ({"model.model_config.type": "GLMConfig"}, "model.model_config.type: found 'GLMConfig'; "
     "the model read here: LlamaConfig"),
    ({"context.mode": 1}, "context.mode: 1 (PyNative): the mindspore profile is graph mode"),
    ({"model.model_config.qkv_has_bias": True}, "model.model_config.qkv_has_bias: True "
     "changes what MindFormers runs and has no scenario key (Q, K, V biases); --lenient "
     "imports without it"),
])
def test_bad_input_is_one_error_naming_the_key(tmp_path: Path, edits: dict[str, Any],
                                               message: str) -> None:
    assert message in _error(tmp_path, edits)


_FUZZ = (0, 1, 2, 4, 8, -1, 1.5, "x", True, False, None, "bfloat16", "float16", [1, 2])


def test_fuzz_never_ends_in_an_internal_error(tmp_path: Path) -> None:
    """Random keys of the table with random values: exit 0 or 2, never 3."""
    rng = random.Random(27)
    keys = sorted(KEYS)
    codes = []
    for i in range(80):
        edits = {k: rng.choice(_FUZZ) for k in rng.sample(keys, rng.randint(1, 5))}
        path = _text(tmp_path, edits)
        res = CliRunner().invoke(app, ["import", "mindformers", str(path), "--nodes", "1",
                                       "--devices-per-node", "8",
                                       *(["--lenient"] if i % 2 else [])])
        assert res.exit_code in (0, 2), (edits, res.stderr)
        assert res.exit_code == 0 or res.stderr.count("\n") == 1, res.stderr
        codes.append(res.exit_code)
    assert 0 in codes and 2 in codes


def test_scenario_key_from_mindformers_yaml(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "name: x\nhardware: ascend-910b\ncluster: {nodes: 1, devices_per_node: 8}\n"
        "from: {mindformers_yaml: llama2-7b-pretrain-bf16}\n")
    s = api.load_scenario(str(tmp_path / "s.yaml")).scenario
    hand = api.load_scenario(str(ROOT / "scenarios/validation/mf-910b-llama2-7b-8p.yaml"))
    assert _sections(s) == _sections(hand.scenario)
    out = CliRunner().invoke(app, ["import", "mindformers", "llama2-7b-pretrain-bf16",
                                   "--nodes", "1", "--devices-per-node", "8", "--json"])
    assert json.loads(out.stdout)["scenario"]["framework"] == "mindspore"


MF7B = str(ROOT / "scenarios/validation/mf-910b-llama2-7b-8p.yaml")


@pytest.mark.parametrize("overrides", [
    [], ["parallel.recompute=selective", "training.global_batch_size=128"],
    ["parallel.tensor=4", "parallel.data=2", "parallel.sequence_parallel=true"],
    ["parallel.pipeline=2", "parallel.data=4", "parallel.optimizer_shard=0",
     "parallel.optimizer_threshold_kb=0"],
    ["parallel.recompute=full", "parallel.tensor=2", "parallel.data=4",
     "parallel.recompute_slice_activation=true"],
])
def test_emitted_run_config_imports_back_to_the_plan(tmp_path: Path,
                                                     overrides: list[str]) -> None:
    loaded = api.load_scenario(MF7B)
    text = api.emit_config("mindformers", loaded, overrides)
    (tmp_path / "run.yaml").write_text(text)
    plan = api.load_scenario(MF7B, overrides)
    back = api.import_config("mindformers", str(tmp_path / "run.yaml"), "ascend-910b", 1, 8)
    got = api.load_scenario(back["scenario"]).scenario
    assert _sections(got) == _sections(plan.scenario)


@pytest.mark.parametrize(("overrides", "key"), [
    (["model.dropout=0.1"], "model.dropout"),
    (["parallel.optimizer_shard=1"], "parallel.optimizer_shard"),
])
def test_emit_refuses_what_mindformers_cannot_say(overrides: list[str], key: str) -> None:
    with pytest.raises(api.InputError) as err:
        api.emit_config("mindformers", api.load_scenario(MF7B), overrides)
    assert err.value.key == key


SLICE = "recompute_config.recompute_slice_activation"


def _imported(tmp_path: Path, edits: dict[str, Any]) -> dict[str, Any]:
    return api.import_config("mindformers", str(_text(tmp_path, edits)), "ascend-910b", 1, 8)


def test_recompute_slice_activation_maps_to_the_distributed_saved_input(
        tmp_path: Path) -> None:
    """MindFormers' recompute_config.recompute_slice_activation (TransformerRecomputeConfig)
    with recompute True on 2 tensor ranks: each layer keeps half its input,
    parallel.recompute_slice_activation (Megatron's --distribute-saved-activations)."""
    edits = {"recompute_config.recompute": True, SLICE: True,
             "parallel_config.model_parallel": 2, "parallel_config.data_parallel": 4}
    out = _imported(tmp_path, edits)
    assert out["scenario"]["parallel"]["recompute_slice_activation"] is True
    row = next(r for r in out["rows"] if r["flag"] == SLICE)
    assert (row["kind"], row["detail"]) == ("mapped", "parallel.recompute_slice_activation")
    off = _imported(tmp_path, {**edits, SLICE: False})
    assert "recompute_slice_activation" not in off["scenario"]["parallel"]
    on = api.simulate(api.load_scenario(out["scenario"]))
    plain = api.simulate(api.load_scenario(off["scenario"]))
    assert dict(on.memory.by_category)["activations"] < dict(
        plain.memory.by_category)["activations"]


@pytest.mark.parametrize(("edits", "why"), [
    ({}, "MindFormers applies it only with recompute_config.recompute: True (every layer "
         "recomputed)"),
    ({"recompute_config.recompute": True}, "model_parallel 1: no tensor-parallel ranks to "
     "slice the kept output over"),
    ({"recompute_config.recompute": True, "parallel_config.model_parallel": 2,
      "parallel_config.data_parallel": 4, "parallel_config.use_seq_parallel": True},
     "use_seq_parallel: the kept output is already split over the tensor ranks"),
])
def test_recompute_slice_activation_where_it_changes_nothing_is_noted(
        tmp_path: Path, edits: dict[str, Any], why: str) -> None:
    """The published configs all say True (llama2-7b with recompute False, llama2-13b and
    llama3-8b on model_parallel 1): imported as false with the reason."""
    out = _imported(tmp_path, {SLICE: True, **edits})
    assert "recompute_slice_activation" not in out["scenario"]["parallel"]
    assert f"{SLICE} True imported as false: {why}" in out["notes"]


def test_recompute_slice_activation_must_be_a_flag(tmp_path: Path) -> None:
    assert f"{SLICE}: found 'yes'; expected True or False" in _error(
        tmp_path, {SLICE: "yes"})


def test_the_emitter_writes_recompute_slice_activation() -> None:
    text = api.emit_config("mindformers", api.load_scenario(MF7B), [
        "parallel.recompute=full", "parallel.tensor=2", "parallel.data=4",
        "parallel.recompute_slice_activation=true"])
    assert yaml.safe_load(text)["recompute_config"]["recompute_slice_activation"] is True
