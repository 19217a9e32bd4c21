"""`shardsim import nemo` (issue 27): the bundled NeMo-Framework-Launcher recipe of the
NeMo 24.07 GPT3-5B FP8 row (conf/training/gpt3/5b_fp8_performance.yaml) imports to the
hand-written validation scenario nemo2407-h100-gpt3-5b-64g on its 64 GPUs exactly (the
recipe's `activations_checkpoint_granularity: selective` included: the validation file
assumed none until this import found it); bad input as one error naming the file, line
and key (exit 2); a fuzz over the keys."""

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
from simulator.config.imports.load import import_file
from simulator.config.imports.nemo_keys import KEYS
from tests.test_import_mindformers import _sections

ROOT = Path(__file__).parent.parent
DATA = ROOT / "scenarios" / "nemo"
RECIPE = DATA / "gpt3-5b-fp8-performance.yml"
HAND = ROOT / "scenarios" / "validation" / "nemo2407-h100-gpt3-5b-64g.yaml"


def test_import_gives_the_hand_written_scenario() -> None:
    """Key for key, the recipe's selective recompute included (the validation file states it
    since this import found it; it had assumed none)."""
    hand = api.load_scenario(str(HAND)).scenario
    _, scenario = import_file("nemo", str(RECIPE), "h100-sxm", 8, 8)
    assert scenario.framework == hand.framework == "nemo"
    want, got = _sections(hand), _sections(scenario)
    assert {k: (want[k], got[k]) for k in want if want[k] != got[k]} == {}
    assert got["parallel.recompute"] == "selective"


def test_world_size_defaults_to_the_trainer() -> None:
    imported, scenario = import_file("nemo", "gpt3-5b-fp8-performance")
    assert (scenario.cluster.nodes, scenario.cluster.devices_per_node) == (16, 8)
    assert scenario.parallel.data == 128
    # ${multiply:4, ${.hidden_size}} resolved; GPT-2's 50257 padded to 128 x TP 1
    assert (scenario.model.ffn_hidden_size, scenario.model.vocab_size) == (16384, 50304)
    kinds = {r.flag: r.kind for r in imported.rows}
    assert kinds["model.fp8"] == "mapped" and kinds["model.optim.lr"] == "ignored"


@functools.cache
def _source() -> dict[str, Any]:
    """The mapping the edits start from, parsed once (each edit changes a copy)."""
    return yaml.safe_load(RECIPE.read_text())


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
    res = CliRunner().invoke(app, ["import", "nemo", str(_text(tmp_path, edits))])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    return res.stderr.split(": ", 1)[1].strip()


@pytest.mark.parametrize(("edits", "message"), [
    ({"model.tensor_model_paralel_size": 2}, "model.tensor_model_paralel_size: not a key of "
     "a NeMo training config this importer knows (did you mean 'model.tensor_model_parallel_"
     "size'?)"),
    ({"model.pipeline_model_parallel_size": 3}, "model.tensor_model_parallel_size: tensor 1 "
     "x pipeline 3 x context 1 = 3 does not divide the 128 devices"),
    ({"model.global_batch_size": 1000}, "model.global_batch_size: 1000 is not a multiple of "
     "micro_batch_size 4 x data parallel 128 = 512"),
    ({"model.optim.name": "sgd"}, "model.optim.name: found 'sgd'; the optimizers simulated: "
     "fused_adam, adam, adamw, distributed_fused_adam, mcore_distributed_optim"),
    ({"model.rampup_batch_size": [256, 128, 1000]}, "model.rampup_batch_size: [256, 128, 1000] "
     "changes what NeMo runs and has no scenario key (a batch that grows during the run); "
     "--lenient imports without it"),
    ({"model.tokenizer.type": "SentencePiece"}, "model.tokenizer.type: found 'SentencePiece'; "
     "the vocabularies known: GPT2BPETokenizer"),
    ({"model.ffn_hidden_size": "${multiply:4, ${.hiden_size}}"}, "model.ffn_hidden_size: "
     "found '${multiply:4, ${.hiden_size}}'; the interpolations read here: a number, "
     "${.key} and ${multiply:A, B}"),
    ({"model.activations_checkpoint_granularity": "full",
      "model.activations_checkpoint_num_layers": 2}, "model.activations_checkpoint_num_layers: "
     "2 with method 'block': part of each stage recomputed, not simulated"),
    ({"model.attention_dropout": 0.0}, "model.attention_dropout: 0 with hidden_dropout 0.1: "
     "the scenario has one dropout probability"),
])
def test_bad_input_is_one_error_naming_the_key(tmp_path: Path, edits: dict[str, Any],
                                               message: str) -> None:
    assert message in _error(tmp_path, edits)


def test_error_names_the_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["import", "nemo", str(RECIPE), "--nodes", "3"])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {RECIPE}:")


_FUZZ = (0, 1, 2, 4, 8, -1, 1.5, "x", True, False, None, "selective", "full", [1, 2])


def test_fuzz_never_ends_in_an_internal_error(tmp_path: Path) -> None:
    """Random keys of the table with random values: exit 0 or 2, never 3."""
    rng = random.Random(27)
    keys = sorted(KEYS)
    codes = []
    for i in range(80):
        edits = {k: rng.choice(_FUZZ) for k in rng.sample(keys, rng.randint(1, 5))}
        res = CliRunner().invoke(app, ["import", "nemo", str(_text(tmp_path, edits)),
                                       *(["--lenient"] if i % 2 else [])])
        assert res.exit_code in (0, 2), (edits, res.stderr)
        assert res.exit_code == 0 or res.stderr.count("\n") == 1, res.stderr
        codes.append(res.exit_code)
    assert 0 in codes and 2 in codes


def test_scenario_key_from_nemo_yaml(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "name: x\nhardware: h100-sxm\ncluster: {nodes: 8, devices_per_node: 8}\n"
        "from: {nemo_yaml: gpt3-5b-fp8-performance}\n")
    s = api.load_scenario(str(tmp_path / "s.yaml")).scenario
    assert _sections(s) == _sections(api.load_scenario(str(HAND)).scenario)
