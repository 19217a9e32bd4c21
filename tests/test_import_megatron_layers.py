"""`shardsim import megatron` with MoE layer patterns (`--moe-layer-freq`) and uneven pipeline
stages (`--decoder-first/last-pipeline-num-layers`), issue 27: the scenario keys they become
(`moe.first_dense` / `moe.every`, `parallel.pipeline_layers`), Megatron-Core's own checks as
errors naming the flag, and `plan --emit megatron` writing them back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator import api
from simulator.config.imports.megatron_emit import emit_megatron, resolved
from simulator.config.imports.megatron_pattern import (
    PatternError,
    as_first_dense_every,
    parse_pattern,
    pattern_text,
)

BASE = ("--num-layers 14 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
        "--max-position-embeddings 512 --vocab-size 1000 --micro-batch-size 1 "
        "--global-batch-size 16 --bf16\n")


def _import(tmp_path: Path, text: str, lenient: bool = False) -> dict:
    (tmp_path / "args.txt").write_text(BASE + text)
    return api.import_config("megatron", str(tmp_path / "args.txt"), "h100-sxm", 1, 8,
                             lenient)


def test_patterns_read_as_megatron_evaluates_them() -> None:
    assert parse_pattern("([0]*3+[1]*58)", 61) == [0] * 3 + [1] * 58
    assert parse_pattern("([1]*3+[0]*1)*3", 12) == [1, 1, 1, 0] * 3  # arguments.py's example
    assert parse_pattern("2", 5) == [1, 0, 1, 0, 1]  # i % N == 0 (gpt_layer_specs.py)
    for text, why in (("[__import__('os')]", "only list literals"), ("[0, 2]", "0 (dense) and 1"),
                      ("[0]*3", "3 entries for --num-layers 4"), ("x", "a whole number")):
        with pytest.raises(PatternError, match=re.escape(why)):
            parse_pattern(text, 4)


def test_first_dense_and_every_say_exactly_the_pattern() -> None:
    assert as_first_dense_every([0] * 3 + [1] * 58) == (3, 1)
    assert as_first_dense_every([0, 1] * 4) == (0, 2)
    assert as_first_dense_every([0, 0, 0, 1, 0, 1]) == (2, 2)
    for pattern in ([1, 0, 1, 0], [1, 1, 1, 0] * 3, [0, 0, 0, 0], [0, 1, 0, 0]):
        assert as_first_dense_every(pattern) is None
    for layers, first, every in ((61, 3, 1), (14, 2, 3), (8, 0, 2), (9, 1, 4)):
        got = parse_pattern(pattern_text(layers, first, every), layers)
        assert as_first_dense_every(got) == (first, every)


def test_moe_layer_freq_becomes_first_dense_and_every(tmp_path: Path) -> None:
    s = _import(tmp_path, "--num-experts 8 --moe-layer-freq ([0]*2+[1]*12)")["scenario"]
    assert s["model"]["moe"]["first_dense"] == 2 and "every" not in s["model"]["moe"]
    s = _import(tmp_path, "--num-experts 8 --moe-layer-freq ([0,1])*7")["scenario"]
    assert s["model"]["moe"]["every"] == 2 and "first_dense" not in s["model"]["moe"]


def test_a_pattern_no_key_says_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(api.InputError) as err:
        _import(tmp_path, "--num-experts 8 --moe-layer-freq 2")
    assert str(err.value).endswith(
        "args.txt:2: --moe-layer-freq: '2': its MoE layers are not the first_dense dense "
        "layers then one in every N (Megatron's integer N puts experts in layer 0, N, 2N, ...)"
        ": no scenario key says it; --lenient imports every layer as MoE")
    out = _import(tmp_path, "--num-experts 8 --moe-layer-freq 2", lenient=True)
    assert out["notes"][0].startswith("--moe-layer-freq 2 left out (every layer MoE)")
    with pytest.raises(api.InputError, match=r"args.txt:2: --moe-layer-freq: '\[0\]\*3': 3 "
                       "entries for --num-layers 14"):
        _import(tmp_path, "--num-experts 8 --moe-layer-freq [0]*3")


def test_uneven_stages_become_pipeline_layers(tmp_path: Path) -> None:
    # first rank 2, last 4, the middle two 4 each; two chunks a rank: chunk c of rank r is
    # virtual stage c x 4 + r
    s = _import(tmp_path, "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-"
                "layers 2 --decoder-last-pipeline-num-layers 4 "
                "--num-virtual-stages-per-pipeline-rank 2")["scenario"]["parallel"]
    assert s["pipeline_layers"] == [1, 2, 2, 2, 1, 2, 2, 2] and s["virtual_stages"] == 2
    s = _import(tmp_path, "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-"
                "layers 6")["scenario"]["parallel"]
    assert s["pipeline_layers"] == [6, 8] and s["schedule"] == "1f1b"


@pytest.mark.parametrize(("flags", "message"), [
    ("--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 3",
     "--decoder-first-pipeline-num-layers: leaves 11 of --num-layers 14 for 3 middle pipeline "
     "stage(s): not a whole number each (Megatron-Core refuses it)"),
    ("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3 "
     "--num-virtual-stages-per-pipeline-rank 2", "--decoder-first-pipeline-num-layers: 3 "
     "layers on pipeline rank 0 are not divisible by the 2 virtual stages a rank "
     "(Megatron-Core refuses it)"),
    ("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 6 "
     "--num-layers-per-virtual-pipeline-stage 1", "--num-layers-per-virtual-pipeline-stage: "
     "given with --decoder-first-pipeline-num-layers; Megatron-LM takes the virtual pipeline "
     "size from --num-virtual-stages-per-pipeline-rank with an uneven split (arguments.py)"),
])
def test_uneven_stages_megatron_refuses(tmp_path: Path, flags: str, message: str) -> None:
    with pytest.raises(api.InputError) as err:
        _import(tmp_path, flags)
    assert str(err.value).endswith(message)


def test_emit_writes_patterns_and_uneven_stages_back(tmp_path: Path) -> None:
    out = _import(tmp_path, "--num-experts 8 --moe-layer-freq ([0]*2+[1]*12) "
                  "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 2 "
                  "--decoder-last-pipeline-num-layers 4 --num-virtual-stages-per-pipeline-"
                  "rank 2")
    scenario = api.load_scenario(out["scenario"]).scenario
    text = emit_megatron(scenario, "megatron-core", False)
    assert "--moe-layer-freq '([0]*2+[1]*12)'" in text
    assert "--decoder-first-pipeline-num-layers 2" in text
    (tmp_path / "launch.sh").write_text(text)
    back = api.import_config("megatron", str(tmp_path / "launch.sh"), "h100-sxm")
    got = api.load_scenario(back["scenario"]).scenario
    for section in ("model", "parallel"):
        assert resolved(getattr(got, section)) == resolved(getattr(scenario, section))
    odd = scenario.model_copy(update={"parallel": scenario.parallel.model_copy(update={
        "pipeline_layers": [1, 2, 1, 2, 1, 2, 3, 2]})})
    with pytest.raises(api.InputError) as err:
        emit_megatron(odd, "megatron-core", False)
    assert err.value.key == "parallel.pipeline_layers"
