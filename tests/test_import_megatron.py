"""`shardsim import megatron` (issue 27 items 1-2): what flags become, Megatron-LM's defaults,
the launch-script reader, and bad input as one error naming the file, line and flag (exit 2),
with a fuzz over the flags that never ends in an internal error."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.imports.megatron_flags import FLAGS
from simulator.config.imports.megatron_names import ARGUMENT_NAMES
from simulator.config.imports.megatron_source import read_source

BASE = ("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
        "--max-position-embeddings 512 --vocab-size 1000 --micro-batch-size 1 "
        "--global-batch-size 16 --bf16")


def _run(tmp_path: Path, text: str, *extra: str) -> tuple[int, str, str]:
    src = tmp_path / "args.txt"
    src.write_text(text)
    res = CliRunner().invoke(app, ["import", "megatron", str(src), *extra])
    return res.exit_code, res.stdout, res.stderr


def _scenario(tmp_path: Path, text: str, *extra: str) -> dict:
    code, out, err = _run(tmp_path, text, "--json", *extra)
    assert code == 0, err
    return json.loads(out)["scenario"]


def test_every_flag_of_the_table_is_a_megatron_argument() -> None:
    assert {f[2:] for f in FLAGS} <= ARGUMENT_NAMES


def test_megatron_defaults_where_a_flag_is_absent(tmp_path: Path) -> None:
    s = _scenario(tmp_path, BASE + " --tensor-model-parallel-size 2", "--nodes", "1",
                  "--devices-per-node", "8")
    # vocabulary padded to a multiple of 128 x TP 2 (tokenizer.py _vocab_size_with_padding)
    assert s["model"]["vocab_size"] == 1024 and s["model"]["ffn_hidden_size"] == 1024
    assert s["parallel"]["data"] == 4 and s["parallel"]["schedule"] == "1f1b"
    assert s["parallel"]["overlap"] == {"grad_reduce": False, "tp_comm": False}
    assert s["parallel"]["comm_fusion"] == {"mode": "auto"}
    assert s["training"] == {"global_batch_size": 16, "micro_batch_size": 1,
                             "optimizer": "adam"}
    swiglu = _scenario(tmp_path, BASE + " --swiglu", "--nodes", "1", "--devices-per-node", "1")
    assert swiglu["model"]["ffn_hidden_size"] == 640  # int(4 * 256 * 2 / 3 / 64) * 64


def test_flags_map_to_their_keys(tmp_path: Path) -> None:
    text = (BASE + " --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
            " --group-query-attention --num-query-groups 2 --recompute-activations"
            " --use-distributed-optimizer --overlap-param-gather --ddp-bucket-size 1000000"
            " --attention-backend fused --num-experts 4 --moe-router-topk 2"
            " --expert-model-parallel-size 2 --hidden-dropout 0 --attention-dropout 0")
    s = _scenario(tmp_path, text, "--nodes", "1", "--devices-per-node", "4")
    assert s["model"]["num_kv_heads"] == 2 and s["model"]["attention"] == "cudnn"
    # no --moe-expert-capacity-factor: Megatron-Core's dropless default
    assert s["model"]["moe"] == {"experts": 4, "top_k": 2, "capacity_factor": None}
    assert s["model"]["dropout"] == 0.0
    p = s["parallel"]
    assert (p["schedule"], p["virtual_stages"], p["pipeline"], p["data"]) == (
        "interleaved_1f1b", 2, 2, 2)
    assert p["recompute"] == "selective" and p["optimizer_shard"] == 1
    assert p["overlap"]["param_gather"] is True
    assert p["comm_fusion"] == {"mode": "size", "bucket_mb": 4.0}  # fp32 grads of bf16


def test_launch_script_variables_arrays_and_world_size() -> None:
    script = """#!/bin/bash
TP=2
MODEL=(
    --num-layers 4   # a comment
    --hidden-size 256
)
DIST="--nproc-per-node 8 --nnodes ${NODES:-1}"
torchrun --nnodes 3 --nproc_per_node=8 pretrain_gpt.py ${MODEL[@]} \\
    --tensor-model-parallel-size $TP --data-path "a b"
"""
    src = read_source(script, "run.sh")
    assert src.nnodes == (3, 8) and src.nproc == (8, 8)
    assert [(a.flag, a.values, a.line) for a in src.args] == [
        ("--num-layers", ("4",), 4), ("--hidden-size", ("256",), 5),
        ("--tensor-model-parallel-size", ("2",), 9), ("--data-path", ("a b",), 9)]


@pytest.mark.parametrize(("extra", "message"), [
    (" --tensor-model-paralel-size 2",
     "args.txt:1: --tensor-model-paralel-size: not an argument of Megatron-LM's pretrain_gpt.py"
     " (did you mean '--tensor-model-parallel-size'?) (megatron/training/arguments.py)"),
    ("\n--tensor-model-parallel-size 3",
     "args.txt:2: --tensor-model-parallel-size: TP 3 x PP 1 x CP 1 = 3 does not divide the "
     "world size 8; the data-parallel size would not be whole"),
    ("\n--global-batch-size 12",
     "args.txt:2: --global-batch-size: global batch 12 is not divisible by micro-batch 1 x "
     "data-parallel size 8 = 8 (Megatron-LM refuses it: the micro-batches per step must be "
     "whole)"),
    ("\n--pipeline-model-parallel-size x",
     "args.txt:2: --pipeline-model-parallel-size: found 'x'; expected a whole number from 1 to "
     "1,000,000,000"),
    ("\n--hidden-dropout 1.5",
     "args.txt:2: --hidden-dropout: found '1.5'; expected a number from 0 to 1"),
    ("\n--no-bias-gelu-fusion",
     "args.txt:2: --no-bias-gelu-fusion: changes what Megatron-LM runs and has no scenario key "
     "(the stack's fused kernels are its framework profile's); --lenient imports without it"),
    ("\n--bf16 4", "args.txt:2: --bf16: found 1 value(s) '4'; expected no value (a switch)"),
    ("\n--tensor-model-parallel-size 2 --tp-comm-overlap",
     "args.txt:2: --tp-comm-overlap: needs --sequence-parallel (Megatron-LM: 'Tensor parallel "
     "communication/GEMM overlap can happen only when sequence parallelism is enabled')"),
    ("\n--num-attention-heads 7",
     "args.txt:2: --num-attention-heads: 7 does not divide --hidden-size 256 (Megatron-LM: "
     "kv_channels = hidden / heads)"),
    ("\n--seq-length 0",
     "args.txt:2: --seq-length: found '0'; expected a whole number from 1 to 1,000,000,000"),
])
def test_bad_input_names_the_flag_and_line(tmp_path: Path, extra: str, message: str) -> None:
    text = BASE.replace("--global-batch-size 16", "--global-batch-size 8")
    code, out, err = _run(tmp_path, text + extra, "--nodes", "1", "--devices-per-node", "8")
    assert (code, out) == (2, "")
    assert err.replace(str(tmp_path) + "/", "") == f"error: {message}\n"


def test_lenient_notes_what_it_left_out(tmp_path: Path) -> None:
    code, out, err = _run(tmp_path, BASE + " --no-bias-gelu-fusion --use-torch-fsdp2",
                          "--lenient", "--nodes", "1", "--devices-per-node", "8", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert [n.split(" (line")[0] for n in notes] == ["--no-bias-gelu-fusion",
                                                      "--use-torch-fsdp2"]


def test_a_scenario_value_out_of_range_names_its_flag(tmp_path: Path) -> None:
    code, _, err = _run(tmp_path, BASE + "\n--num-layers 200000", "--nodes", "1",
                        "--devices-per-node", "8")
    assert code == 2 and err.startswith(
        f"error: {tmp_path}/args.txt:2: --num-layers: 200000: ") and "model.layers" in err


def test_no_world_size(tmp_path: Path) -> None:
    code, _, err = _run(tmp_path, BASE)
    assert code == 2 and err.endswith("the world size is not in the file (no torchrun "
                                      "--nnodes/--nproc-per-node); give --nodes and "
                                      "--devices-per-node\n")


_FUZZ_VALUES = ("0", "1", "2", "3", "8", "-1", "1.5", "x", "full", "selective", "uniform",
                "block", "flash", "hybrid", "1e9", "")


def test_fuzz_never_ends_in_an_internal_error(tmp_path: Path) -> None:
    """Random subsets of the table's flags with random values: exit 0 or 2, never 3."""
    rng = random.Random(27)
    flags = sorted(FLAGS)
    codes = []
    for i in range(150):
        words = BASE.split() if rng.random() < 0.7 else []
        for flag in rng.sample(flags, rng.randint(1, 12)):
            words.append(flag)
            if FLAGS[flag].values != 0 or rng.random() < 0.1:
                value = rng.choice(_FUZZ_VALUES)
                if value:
                    words.append(value)
        rng.shuffle(words) if rng.random() < 0.1 else None
        code, out, err = _run(tmp_path, " ".join(words), "--nodes", str(rng.randint(1, 4)),
                              "--devices-per-node", "8", *(["--lenient"] if i % 2 else []))
        assert code in (0, 2), (words, err)
        assert code == 0 or (err.startswith("error: ") and err.count("\n") == 1), err
        codes.append(code)
    assert 0 in codes and 2 in codes


def test_scenario_key_from_megatron_args(tmp_path: Path) -> None:
    """`from: {megatron_args: FILE}` is the import, the keys written beside it winning."""
    from simulator import api

    (tmp_path / "args.txt").write_text(BASE + " --tensor-model-parallel-size 2")
    (tmp_path / "s.yaml").write_text(
        "name: from args\nhardware: a100-80gb\ncluster: {nodes: 1, devices_per_node: 8}\n"
        "from: {megatron_args: args.txt}\nparallel: {recompute: full}\n")
    s = api.load_scenario(str(tmp_path / "s.yaml")).scenario
    imported = api.import_config("megatron", str(tmp_path / "args.txt"), "a100-80gb", 1, 8)
    want = api.load_scenario(imported["scenario"], ["parallel.recompute=full"]).scenario
    assert s.parallel == want.parallel and s.model == want.model
    assert s.framework == "megatron-lm-2021" and s.parallel.recompute == "full"
    (tmp_path / "s.yaml").write_text("name: x\nhardware: a100-80gb\nfrom: {megatron_args: "
                                     "args.txt}\n")
    with pytest.raises(api.InputError, match="the world size is not in the file"):
        api.load_scenario(str(tmp_path / "s.yaml"))


def test_full_recompute_needs_its_method_and_layers(tmp_path: Path) -> None:
    code, _, err = _run(tmp_path, BASE + "\n--recompute-granularity full", "--nodes", "1",
                        "--devices-per-node", "8")
    assert code == 2 and err.endswith(
        "args.txt:2: --recompute-granularity: full needs --recompute-method (uniform or block) "
        "and --recompute-num-layers (Megatron-Core transformer_config.py refuses it without "
        "them)\n")
    s = _scenario(tmp_path, BASE + " --recompute-granularity full --recompute-method block "
                  "--recompute-num-layers 4", "--nodes", "1", "--devices-per-node", "8")
    assert s["parallel"]["recompute"] == "full"
    code, _, err = _run(tmp_path, BASE + " --recompute-granularity full --recompute-method "
                        "block --recompute-num-layers 2", "--nodes", "1", "--devices-per-node",
                        "8")
    assert code == 2 and "2 of the 4 layers of each model chunk recomputed (block)" in err


def test_fp8_recipe_maps_to_the_scaling_key(tmp_path: Path) -> None:
    """--fp8-recipe mxfp8 is training.fp8_scaling mxfp8 (on a Blackwell profile); delayed
    and tensorwise are one scale per tensor (the default); blockwise has no key."""
    fp8 = BASE + " --fp8-format hybrid"
    per_node = ("--nodes", "1", "--devices-per-node", "8", "--hardware", "b200-sxm")
    mx = _scenario(tmp_path, fp8 + " --fp8-recipe mxfp8", *per_node)
    assert mx["training"]["fp8_scaling"] == "mxfp8" and mx["model"]["dtype"] == "fp8"
    tensor = _scenario(tmp_path, fp8 + " --fp8-recipe tensorwise", *per_node)
    assert "fp8_scaling" not in tensor["training"]
    code, out, err = _run(tmp_path, fp8 + "\n--fp8-recipe blockwise", *per_node)
    assert (code, out) == (2, "")
    assert err.replace(str(tmp_path) + "/", "") == (
        "error: args.txt:2: --fp8-recipe: blockwise (1 x 128 / 128 x 128 block scales) has no "
        "scenario key; tensor scaling (delayed, tensorwise) and mxfp8 do\n")
