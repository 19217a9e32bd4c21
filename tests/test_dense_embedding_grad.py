"""The embedding's weight gradient as Megatron-Core makes it each micro-batch
(`fused_grad_accumulation.dense_embedding_grad`, program.stack_ops.dense_embedding_grad):
the lookup's backward zero-fills a table-sized bf16 gradient, a tied output layer on the
same stage adds a zero-filled dummy that autograd sums with it, and the reduction hook adds
the sum into the fp32 main gradient."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.framework import load_framework
from simulator.config.scenario import parse_scenario
from simulator.cost.specs import ComputeSpec
from simulator.program.model_program import transformer_program

V, H = 8192, 1024


def _program(framework: str = "megatron-core", **parallel: Any):
    sc = parse_scenario({
        "name": "eg", "hardware": "h100-sxm", "framework": framework,
        "cluster": {"nodes": 1, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 2, "hidden_size": H, "num_heads": 16,
                  "seq_length": 1024, "vocab_size": V, "dtype": "bf16",
                  "tie_embeddings": parallel.pop("tied", True)},
        "training": {"global_batch_size": 16, "micro_batch_size": 1},
        "parallel": {"data": 4 // parallel.get("pipeline", 1), "tensor": 2, **parallel}},
        "eg.yaml")
    fw = load_framework(framework)
    return transformer_program(sc, fw.software), sc


def _ops(prog) -> dict[str, ComputeSpec]:
    return {op.name: op for op in prog.block("embed").bwd if isinstance(op, ComputeSpec)}


def test_a_tied_table_on_one_stage_moves_6e_plus_8_bytes_per_element():
    prog, _ = _program()
    table = prog.block("embed").params  # the device's word (V / t rows) + position tables
    assert table == V // 2 * H + 1024 * H
    ops = _ops(prog)
    assert ops["embed_grad_zeros"].bytes_accessed == 2 * table
    tied = V // 2 * H
    assert ops["tied_wgrad_zeros"].bytes_accessed == 2 * tied
    assert ops["tied_grad_sum"].bytes_accessed == 6 * tied
    assert ops["main_grad_add_embed"].bytes_accessed == 10 * table
    assert all(ops[n].weight_grad for n in ("embed_grad_zeros", "tied_wgrad_zeros",
                                             "tied_grad_sum", "main_grad_add_embed"))


@pytest.mark.parametrize("parallel", [{"tied": False}, {"pipeline": 2}])
def test_untied_or_on_another_stage_no_dummy_is_summed(parallel):
    ops = _ops(_program(**parallel)[0])
    assert "tied_wgrad_zeros" not in ops and "tied_grad_sum" not in ops
    assert {"embed_grad_zeros", "main_grad_add_embed"} <= set(ops)


def test_a_stack_without_the_figure_prices_the_gathered_rows_only():
    ops = _ops(_program("megatron-lm-2021")[0])
    assert not {"embed_grad_zeros", "tied_wgrad_zeros", "tied_grad_sum"} & set(ops)
