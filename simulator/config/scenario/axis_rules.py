"""Rules of the mesh axes beyond data x tensor x pipeline: mixture of experts and expert
parallelism, the parameter server, context parallelism and 2-D tensor parallelism (each rule
yields (dotted key, message) problems; `scenario.rules.check_rules` runs them all)."""

from __future__ import annotations

import math
from collections.abc import Iterator

from simulator.config.scenario.rule_helpers import Problem, divisors, must_divide
from simulator.config.scenario.schema import (
    GraphModel,
    ParameterServerSpec,
    Scenario,
    TransformerModel,
)

__all__ = ["expert", "parameter_server", "context", "tensor_nd"]


def expert(s: Scenario) -> Iterator[Problem]:
    """Mixture of experts and expert parallelism. Expert-parallel ranks are data-parallel
    ranks that hold different experts: Megatron-Core's initialize_model_parallel
    (megatron/core/parallel_state.py) raises "data_parallel_size ... is not divisible by
    expert_model_parallel_size" (--expert-model-parallel-size), the dense layers staying
    data parallel over all of them and each expert over data/expert ranks; DeepSpeed-MoE's
    ep_size likewise splits the data-parallel world. So `expert` divides `data` and the
    experts, and the device count stays data*tensor*pipeline."""
    m, p = s.model, s.parallel
    moe = m.moe if isinstance(m, TransformerModel) else None
    if moe is None:
        if p.expert != 1:
            yield "parallel.expert", (
                f"{p.expert} needs a mixture-of-experts transformer (model.moe: {{experts, "
                f"top_k, capacity_factor, every}}); a model of type '{m.type}' without "
                f"model.moe has no experts to split (allowed: 1)")
        return
    assert isinstance(m, TransformerModel)
    if moe.top_k > moe.experts:
        yield "model.moe.top_k", (f"{moe.top_k} must be at most model.moe.experts="
                                  f"{moe.experts}")
    if m.layers % moe.every:
        yield "model.moe.every", (f"{moe.every} must divide model.layers={m.layers} "
                                  f"(valid: {divisors(m.layers)})")
    yield from must_divide("parallel.expert", p.expert, "parallel.data", p.data)
    yield from must_divide("parallel.expert", p.expert, "model.moe.experts", moe.experts)
    if moe.imbalance != 1.0 and p.expert == 1:
        yield "model.moe.imbalance", (
            f"{moe.imbalance:g} needs parallel.expert > 1: on one expert-parallel rank every "
            f"device runs all experts on its own tokens, so no rank is busier than another "
            f"(allowed: 1.0)")


def parameter_server(s: Scenario) -> Iterator[Problem]:
    """Parameter server training is data parallel (MindSpore: workers run the whole model
    and push gradients; the servers own the optimizer): no other split, no sharded or
    offloaded optimizer, and the `parameter_server` block only in that mode."""
    p = s.parallel
    if p.mode != "parameter_server":
        if p.parameter_server != ParameterServerSpec():
            yield "parallel.parameter_server", (
                f"applies only with parallel.mode: parameter_server (found mode {p.mode})")
        return
    if isinstance(s.model, GraphModel):
        yield "parallel.mode", ("parameter_server needs a model the workers replicate "
                                "(transformer, mlp, resnet); a graph model's split is its "
                                "model.mesh and strategies (allowed: semi_auto, auto)")
    for key, value, allowed in (("parallel.tensor", p.tensor, 1),
                                ("parallel.pipeline", p.pipeline, 1),
                                ("parallel.expert", p.expert, 1),
                                ("parallel.context", p.context, 1),
                                ("parallel.optimizer_shard", p.optimizer_shard, 0)):
        if value != allowed:
            yield key, (f"{value} does not apply with parallel.mode: parameter_server, whose "
                        f"workers are data parallel and whose servers hold the optimizer "
                        f"(allowed: {allowed})")
    if p.offload.optimizer_states:
        yield "parallel.offload.optimizer_states", (
            "true does not apply with parallel.mode: parameter_server (the servers hold the "
            "optimizer states; allowed: false)")


def context(s: Scenario) -> Iterator[Problem]:
    """Context parallelism splits a transformer's sequence and runs ring attention, a fused
    attention kernel (Megatron-Core implements it only in Transformer Engine's
    DotProductAttention, `attn_forward_func_with_cp`). The sequence splits into 2 * context
    chunks, two per rank, for causal load balancing (Megatron-Core
    `get_batch_on_this_cp_rank`: seq_length % (2 * context_parallel_size) == 0)."""
    p, m = s.parallel, s.model
    if p.context == 1:
        return
    if not isinstance(m, TransformerModel):
        yield "parallel.context", (
            f"{p.context} needs a transformer: context parallelism splits the sequence of "
            f"attention layers, which a {m.type} model has none of (allowed: 1)")
        return
    if m.moe is not None:
        yield "parallel.context", (f"{p.context} with model.moe is not simulated yet "
                                   f"(allowed with experts: 1)")
    if m.attention == "standard":
        yield "model.attention", (
            f"standard cannot run with parallel.context={p.context}: ring attention is a "
            f"fused kernel (allowed: flash, auto)")
    if m.seq_length % (2 * p.context):
        yield "parallel.context", (
            f"{p.context}: 2*context = {2 * p.context} must divide model.seq_length="
            f"{m.seq_length} (two chunks per rank for causal load balancing)")
    elif p.sequence_parallel and (m.seq_length // p.context) % p.tensor:
        yield "parallel.context", (
            f"{p.context}: each rank's {m.seq_length // p.context} tokens must split over "
            f"parallel.tensor={p.tensor} for sequence parallel")


def tensor_nd(s: Scenario) -> Iterator[Problem]:
    """2-D tensor parallel (simulator/models/transformer_plan.py) lays a transformer's
    `tensor` devices out as an x * y grid and splits its GEMM weights on both axes (the
    hidden dim on y, the head / FFN dim on x) and the heads and FFN activations x * y ways:
    the divisibility of 1-D's tensor, which _transformer checks (x * y divides the heads,
    so the hidden dim too). 3-D ([x, y, z], Bian et al. 2021) adds z, which splits the
    batch (z must divide training.micro_batch_size) and keeps every parameter split.
    Each size above 1 (a size of 1 is a lower dimension); the combinations whose plans are
    not written are refused."""
    p, m, nd = s.parallel, s.model, s.parallel.tensor_nd
    if nd is None:
        return
    shape = "*".join(str(n) for n in nd)
    if not isinstance(m, TransformerModel):
        yield "parallel.tensor_nd", (
            f"{nd}: {len(nd)}-D tensor parallel splits a transformer's attention and FFN "
            f"weights; a model of type '{m.type}' has none (remove the key)")
    elif math.prod(nd) != p.tensor:
        yield "parallel.tensor_nd", (f"{nd}: {shape} = {math.prod(nd)} must equal "
                                     f"parallel.tensor={p.tensor}")
    elif min(nd) == 1:
        fix = "remove the key" if len(nd) == 2 else "give the other two sizes"
        yield "parallel.tensor_nd", (f"{nd}: a size of 1 is {len(nd) - 1}-D tensor parallel "
                                     f"({fix}; allowed: sizes of at least 2)")
    else:
        if len(nd) == 3:
            yield from _cube_divides(s, nd)
        for key, on in (("model.moe", m.moe is not None), ("parallel.context",
                                                            p.context > 1)):
            if on:
                yield "parallel.tensor_nd", (
                    f"{nd} with {key} is not simulated yet (allowed with {len(nd)}-D "
                    f"tensor parallel: no {key})")
        if p.overlap.tp_comm is True:
            yield "parallel.overlap.tp_comm", (
                f"true: chunked overlap of the {len(nd)}-D tensor-parallel collectives "
                f"(parallel.tensor_nd) is not simulated yet (allowed: auto, false)")


def _cube_divides(s: Scenario, nd: list[int]) -> Iterator[Problem]:
    """3-D tensor parallel's splits: x * y of the heads, key/value heads, FFN dim,
    vocabulary and (sequence parallel) sequence, as 2-D's grid splits them; z of each
    micro-batch's samples. A parameter's further split on z takes the first of its dims that
    z divides after the grid's split (`sharding.plan.split_on`; the bundled shapes split
    every weight x*y*z ways) or, where none does, leaves it whole on z: no shape is refused
    for it."""
    m, p = s.model, s.parallel
    assert isinstance(m, TransformerModel)
    x, y, z = nd
    dims = [("model.num_heads", m.num_heads), ("model.ffn_hidden_size", m.ffn),
            ("model.vocab_size", m.vocab_size)]
    if m.num_kv_heads is not None:
        dims.insert(1, ("model.num_kv_heads", m.kv_heads))
    if p.sequence_parallel:
        dims.append(("model.seq_length", m.seq_length))
    for key, n in dims:
        if n % (x * y):
            yield "parallel.tensor_nd", (
                f"{nd}: x*y = {x * y} must divide {key}={n} (3-D tensor parallel splits it "
                f"on x and y; valid x*y: {divisors(n)})")
    if s.training.micro_batch_size % z:
        yield "parallel.tensor_nd", (
            f"{nd}: z={z} must divide training.micro_batch_size="
            f"{s.training.micro_batch_size} (3-D tensor parallel splits each micro-batch's "
            f"samples on z; valid z: {divisors(s.training.micro_batch_size)})")
