"""The transformer program against closed forms: Korthikanti et al. 2022 activation memory,
Megatron-LM parameter counts and collectives, Narayanan et al. 2021 FLOPs."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.scenario import parse_scenario
from simulator.cost.specs import CommSpec
from simulator.program.flops import iteration_flops
from simulator.program.model_program import transformer_program
from simulator.program.program import comm_ops, compute_ops, saved_bytes, total_flops

S, B, H, A = 512, 2, 1024, 16


def _scenario(tensor: int = 1, data: int = 1, pipeline: int = 1, **parallel: Any):
    model = {"type": "transformer", "layers": 8, "hidden_size": H, "num_heads": A,
             "seq_length": S, "vocab_size": 4096, "dtype": "bf16"}
    model.update(parallel.pop("model", {}))
    devices = tensor * data * pipeline
    return parse_scenario({
        "name": "prog", "hardware": "a100-80gb",
        "cluster": {"nodes": 1, "devices_per_node": devices}, "model": model,
        "training": {"global_batch_size": B * data * parallel.pop("micro", 1),
                     "micro_batch_size": B},
        "parallel": {"tensor": tensor, "data": data, "pipeline": pipeline, **parallel},
    }, "test")


def _korthikanti(t: int, sp: bool, recompute: str) -> float:
    """Korthikanti et al. 2022, Table 2: activation bytes per layer, 16-bit."""
    sbh, core = S * B * H, 5 * A * S / (H * t)
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    if recompute == "selective":
        core = 0.0
    if t == 1:
        return sbh * (34 + core)
    return sbh * ((34 / t if sp else 10 + 24 / t) + core)


@pytest.mark.parametrize("t,sp", [(1, False), (2, False), (8, False), (2, True), (8, True)])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_activation_bytes_per_layer_match_korthikanti(t: int, sp: bool, recompute: str):
    prog = transformer_program(_scenario(tensor=t, sequence_parallel=sp, recompute=recompute))
    assert prog.block("layer").saved_bytes == pytest.approx(_korthikanti(t, sp, recompute))


def test_saved_bytes_of_layer_forward_are_the_no_recompute_activations():
    prog = transformer_program(_scenario(tensor=4))
    assert saved_bytes(prog.block("layer").fwd) == pytest.approx(_korthikanti(4, False, "none"))
    # without recompute nothing is made again
    assert prog.block("layer").saved_bytes == saved_bytes(prog.block("layer").fwd)
    assert prog.block("layer").working_bytes == 0.0


def test_layer_parameters_are_12h2_plus_13h_without_tensor_parallelism():
    prog = transformer_program(_scenario())
    assert prog.block("layer").params == 12 * H * H + 13 * H
    # q, k and v keep weights and biases of their own in the graph (Megatron fuses each
    # trio into one tensor): 3 + 3 + proj 2 + fc1 2 + fc2 2 + two norms 4
    assert prog.block("layer").param_tensors == 16


def test_tensor_parallelism_shards_every_matrix():
    one, eight = transformer_program(_scenario()), transformer_program(_scenario(tensor=8))
    # the row-parallel biases and the two norms (h + h + 4h) stay replicated
    assert eight.block("layer").params == (one.block("layer").params - 6 * H) // 8 + 6 * H
    assert eight.block("embed").params == 4096 // 8 * H + S * H


def test_backward_gemms_cost_twice_the_forward():
    prog = transformer_program(_scenario(tensor=2))
    assert total_flops(prog.block("layer").bwd, "gemm") == pytest.approx(
        2 * total_flops(prog.block("layer").fwd, "gemm"))
    assert total_flops(prog.block("head").bwd, "gemm") == pytest.approx(
        2 * total_flops(prog.block("head").fwd, "gemm"))


def _collectives(ops: tuple) -> list[str]:
    return [op.collective for op in comm_ops(ops)]


def test_megatron_has_two_tp_all_reduces_forward_and_two_backward():
    prog = transformer_program(_scenario(tensor=4))
    assert _collectives(prog.block("layer").fwd) == ["all_reduce", "all_reduce"]
    assert _collectives(prog.block("layer").bwd) == ["all_reduce", "all_reduce"]
    assert all(op.axis == "tp" and op.bytes == 2 * S * B * H
               for op in comm_ops(prog.block("layer").fwd))


def test_sequence_parallel_uses_all_gather_and_reduce_scatter():
    prog = transformer_program(_scenario(tensor=4, sequence_parallel=True))
    assert _collectives(prog.block("layer").fwd) == ["all_gather", "reduce_scatter"] * 2
    assert _collectives(prog.block("layer").bwd) == ["all_gather", "reduce_scatter"] * 2
    assert prog.block("layer").send_fwd_bytes == 2 * S * B * H / 4


def test_no_collectives_without_tensor_parallelism():
    prog = transformer_program(_scenario())
    layer, embed, head = (prog.block(n) for n in ("layer", "embed", "head"))
    ops = layer.fwd + layer.bwd + embed.fwd + head.fwd + head.bwd
    assert not [op for op in ops if isinstance(op, CommSpec)]


def test_grouped_query_attention_shrinks_the_qkv_projection():
    mha = transformer_program(_scenario())
    gqa = transformer_program(_scenario(model={"num_kv_heads": 4}))
    qkv = {p: next(op for op in compute_ops(p.block("layer").fwd) if op.name == "qkv")
           for p in (mha, gqa)}
    assert qkv[mha].gemm_mnk[1] == 3 * H
    assert qkv[gqa].gemm_mnk[1] == H + 2 * 4 * (H // A)


def test_swiglu_has_three_ffn_matrices():
    prog = transformer_program(_scenario(model={"ffn_activation": "swiglu",
                                                "ffn_hidden_size": 2816}))
    names = [op.name for op in compute_ops(prog.block("layer").fwd) if op.kind == "gemm"]
    assert [n for n in names if n.startswith("fc")] == ["fc_gate", "fc_up", "fc2"]


def test_recompute_reruns_the_forward_or_the_attention_core():
    full = transformer_program(_scenario(recompute="full"))
    layer = full.block("layer")
    assert [op.name for op in layer.recompute] == [op.name for op in layer.fwd]
    assert {op.phase for op in full.block("layer").recompute} == {"recompute"}
    sel = transformer_program(_scenario(recompute="selective"))
    assert [op.name for op in sel.block("layer").recompute] == ["scores", "softmax", "attn_dropout",
                                                        "context"]
    assert transformer_program(_scenario()).block("layer").recompute == ()


@pytest.mark.parametrize("t", [1, 4])
def test_model_flops_match_narayanan(t: int):
    """72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) (Narayanan et al. 2021, Eq. 3 without the
    recompute pass); with full recompute the hardware FLOPs are 96*... (Eq. 3)."""
    sc = _scenario(tensor=t, data=2, micro=3, recompute="full")
    model, hardware = iteration_flops(sc, transformer_program(sc))
    batch, l, v = sc.training.global_batch_size, 8, 4096
    base = batch * S * l * H * H * (1 + S / (6 * H))
    assert model == pytest.approx(72 * base + 6 * batch * S * H * v)
    assert hardware == pytest.approx(96 * base + 6 * batch * S * H * v)
