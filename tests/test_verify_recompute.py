"""`verify` executes activation recompute (issue 10 item 3): the recomputed ops keep nothing
after the forward and run again, block by block, before their backward; the tensors are
those of one device, and full recompute re-runs each layer's forward collectives."""

from __future__ import annotations

import pytest

from simulator.api import load_scenario
from simulator.program.model_program import recomputed_ops
from simulator.simulation.verify import verify_scenario


@pytest.fixture(scope="module")
def results():
    return {mode: verify_scenario(load_scenario("tiny-cpu", [f"parallel.recompute={mode}"])
                                  .scenario) for mode in ("none", "selective", "full")}


def test_recompute_computes_what_one_device_does(results):
    assert all(r.ok for r in results.values())
    assert not any("recompute" in n for n in results["none"].notes)


def test_full_recompute_reruns_every_layer_op_and_its_collectives(results):
    # tiny-cpu: 2 layers, tensor 2, 2 micro-batches in verify; a layer's forward has two
    # tensor-parallel all-reduces (after the attention and the FFN projections)
    extra = results["full"].collectives["all_reduce"] - results["none"].collectives[
        "all_reduce"]
    assert extra == 2 * 2 * 2
    # selective recompute re-runs the attention core, which has no collective
    assert results["selective"].collectives == results["none"].collectives


def test_the_counts_of_recomputed_ops_follow_the_selection(results):
    def count(mode: str) -> int:
        note = next(n for n in results[mode].notes if n.startswith("recompute: "))
        return int(note.split()[1])

    full, selective = recomputed_ops("full"), recomputed_ops("selective")
    assert full("l0.fc1") and not full("lnf") and not full("embed")
    assert selective("l1.softmax") and not selective("l1.fc1")
    assert count("full") > count("selective") > 0


_SAC = ["parallel.recompute=selective", "model.ffn_activation=swiglu", "model.num_kv_heads=2",
        "framework=torchtitan"]


def test_op_level_sac_keeps_the_odd_matmuls_and_the_fused_attention():
    # torchtitan: "Saves output of all compute ops, except every second mm"; a Llama block
    # runs wq, wk, wv, wo, w1, w3, w2, so wk, wo and w3 run again with every non-matmul op
    sac = recomputed_ops("selective", "every_second_mm", gated=True)
    assert sac is not None
    redone = {"k_mm", "proj", "fc3_mm", "ln1", "ln2", "act", "glu", "res1", "res2"}
    kept = {"q_mm", "v_mm", "fc1_mm", "fc2", "attn"}
    assert all(sac(f"l1.{r}") for r in redone) and not any(sac(f"l1.{r}") for r in kept)
    assert not sac("lnf") and not sac("embed")
    # a two-matrix MLP counts wq, wk, wv, wo, w1, w2: wk, wo and w2 run again
    gelu = recomputed_ops("selective", "every_second_mm", gated=False)
    assert gelu is not None and gelu("l0.fc2") and not gelu("l0.fc1_mm")


def test_op_level_sac_is_priced_as_the_matmuls_it_reruns():
    # the fused qkv kernel reruns its key projection's share, kv / (heads + 2 kv) = 2 / 8
    from simulator.config.framework import load_framework
    from simulator.program.model_program import transformer_program

    sc = load_scenario("tiny-cpu", _SAC).scenario
    prog = transformer_program(sc, load_framework("torchtitan").software)
    fwd = {op.name: op for op in prog.block("layer").fwd if hasattr(op, "flops")}
    redo = {op.name: op for op in prog.block("layer").recompute if hasattr(op, "flops")}
    assert redo["qkv.k"].flops == pytest.approx(fwd["qkv"].flops * 2 / 8)
    assert {"proj", "fc_up"} <= set(redo) and not {"qkv", "fc_gate", "fc2"} & set(redo)
    assert not any(op.kind == "attention" for op in redo.values())
    megatron = transformer_program(sc.model_copy(update={"framework": "megatron-core"}),
                                   load_framework("megatron-core").software)
    assert all(op.kind != "gemm" for op in megatron.block("layer").recompute if hasattr(op, "kind"))


def test_verify_executes_the_op_level_sac_set():
    sc = load_scenario("tiny-cpu", _SAC).scenario
    sac = verify_scenario(sc, selective="every_second_mm")
    core = verify_scenario(sc, selective="attention_core")
    assert sac.ok and core.ok

    def count(r) -> int:
        return int(next(n for n in r.notes if n.startswith("recompute: ")).split()[1])

    assert count(sac) > count(core) > 0
