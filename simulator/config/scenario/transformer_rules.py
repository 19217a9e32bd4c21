"""The rules a transformer answers for itself (`TransformerModel`'s hooks in `schema_models`):
heads, vocabulary and layers against the tensor and pipeline degrees, its mixture of
experts, context parallelism and 2-D / 3-D tensor parallelism (each yields (dotted key,
message) problems; `scenario.rules.check_rules` raises the first)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from simulator.config.scenario.rule_helpers import (
    Problem,
    divisors,
    must_divide,
    no_experts,
    stage_count_problem,
)

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario
    from simulator.config.scenario.schema_models import TransformerModel
    from simulator.config.scenario.schema_parallel import ParallelSpec

__all__ = ["shape", "experts", "context", "tensor_nd"]


def shape(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """Weights cast from `param_dtype`; heads, key/value heads, FFN width, vocabulary and
    (sequence parallel) sequence split over the tensor-parallel ranks; layers over the
    pipeline stages."""
    p = s.parallel
    if m.param_dtype is not None and m.dtype not in ("fp16", "bf16"):
        yield "model.param_dtype", (
            f"{m.param_dtype} weights cast to a {m.dtype} computation are not simulated "
            "(allowed: a 16-bit model.dtype, fp16 or bf16, whose weights take the same bytes)")
    yield from must_divide("model.num_heads", m.num_heads, "model.hidden_size", m.hidden_size)
    if m.num_kv_heads is not None:
        yield from must_divide("model.num_kv_heads", m.kv_heads, "model.num_heads", m.num_heads)
    if m.moe is None or (m.layers - m.moe.first_dense) % m.moe.every == 0:  # else `experts`
        unit = repeat_unit(m)
        block = ("model.moe.every", "dense layers and one MoE layer") \
            if m.moe is not None and unit == m.moe.every else \
            ("model.global_every", "windowed layers and one global layer") \
            if m.sliding_window and unit == m.global_every else ("a period", "layers")
        yield from _stage_layers(m.layers, p, unit, block)
    if p.tensor_nd is not None and len(p.tensor_nd) == 3:
        return  # 3-D splits these dims x*y ways (`tensor_nd` checks them)
    yield from must_divide("parallel.tensor", p.tensor, "model.num_heads", m.num_heads)
    if m.num_kv_heads is not None:
        yield from must_divide("parallel.tensor", p.tensor, "model.num_kv_heads", m.kv_heads)
    yield from must_divide("parallel.tensor", p.tensor, "model.ffn_hidden_size", m.ffn)
    if m.vocab_size % p.tensor:
        # the embedding and LM head split the vocabulary across tensor-parallel ranks;
        # Megatron-LM pads it (--make-vocab-size-divisible-by, megatron/training/tokenizer)
        padded = -(-m.vocab_size // (128 * p.tensor)) * 128 * p.tensor
        yield "model.vocab_size", (
            f"{m.vocab_size} must be a multiple of parallel.tensor={p.tensor} (the "
            f"embedding is split across tensor-parallel ranks; Megatron-LM pads it to "
            f"{padded})")
    if p.sequence_parallel:
        yield from must_divide("parallel.tensor", p.tensor, "model.seq_length", m.seq_length)


def repeat_unit(m: TransformerModel) -> int:
    """Layers in the block a pipeline cuts between, as `models.layers.layer_plan` groups
    them: the period of the layers' kinds (a hybrid pattern's characters; else each layer's
    attention window and whether its FFN has experts) when they repeat, so a mixture of
    experts every k-th layer repeats in blocks of k; 1 when they do not (leading dense
    layers, a hybrid pattern: one block per layer) or differ in their window alone (GPT-OSS,
    Gemma-3: `models.layers.windows_only`)."""
    n, moe = m.layers, m.moe
    if m.hybrid_pattern is not None and len(m.hybrid_pattern) != n:
        return 1  # schema_mamba's rules refuse the pattern

    def kind(i: int) -> object:
        if m.hybrid_pattern is not None:
            return m.hybrid_pattern[i]
        return m.layer_window(i), moe is not None and moe.is_moe(i)

    kinds = [kind(i) for i in range(n)]
    unit = next(q for q in range(1, n + 1)
                if n % q == 0 and all(kinds[i] == kinds[i % q] for i in range(n)))
    if m.hybrid_pattern is None and len({moe is not None and moe.is_moe(i)
                                         for i in range(unit)}) == 1:
        return 1  # layers that differ in their window alone: cut one by one (layer_plan)
    return unit if unit < n else 1


def _stage_layers(layers: int, p: ParallelSpec, unit: int = 1,
                  block: tuple[str, str] = ("", "")) -> Iterator[Problem]:
    """Explicit per-stage layer counts: one per virtual stage, adding up to the model's
    layers; only the first and last stage (which hold the embedding and the head) may have
    none. Without them every stage needs at least one layer (one block of `unit` layers:
    `repeat_unit`; `block`: the key that makes the block and what it holds)."""
    chunks = p.chunks
    given = p.pipeline_layers
    if given is None:
        if layers < chunks * unit:
            blocks = f" (blocks of {unit} repeating layers)" if unit > 1 else ""
            yield "parallel.pipeline", (
                f"{p.pipeline} stages x {chunks // p.pipeline} chunks need at least "
                f"{chunks * unit} layers{blocks}; model.layers is {layers}")
        return
    if unit > 1 and any(n % unit for n in given):
        yield "parallel.pipeline_layers", (
            f"{given}: each stage's layers must be a multiple of {block[0]}={unit} (the "
            f"block of {block[1]} that repeats)")
    problem = stage_count_problem(given, chunks, layers, "layers", "model.layers")
    if problem is not None:
        yield problem
    elif any(n == 0 for n in given[1:-1]):
        yield "parallel.pipeline_layers", (
            f"{given}: only the first and last stage may have 0 layers")


def experts(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """Mixture of experts and expert parallelism. Expert-parallel ranks are data-parallel
    ranks that hold different experts: Megatron-Core's initialize_model_parallel
    (megatron/core/parallel_state.py) raises "data_parallel_size ... is not divisible by
    expert_model_parallel_size" (--expert-model-parallel-size), the dense layers staying
    data parallel over all of them and each expert over data/expert ranks; DeepSpeed-MoE's
    ep_size likewise splits the data-parallel world. So `expert` divides `data` and the
    experts, and the device count stays data*tensor*pipeline."""
    moe, p = m.moe, s.parallel
    if moe is None:
        yield from no_experts(s)
        return
    if moe.top_k > moe.experts:
        yield "model.moe.top_k", (f"{moe.top_k} must be at most model.moe.experts="
                                  f"{moe.experts}")
    if moe.first_dense >= m.layers:
        yield "model.moe.first_dense", (f"{moe.first_dense} must be less than model.layers="
                                        f"{m.layers} (the layers after it hold the experts)")
    elif moe.first_dense:
        if (m.layers - moe.first_dense) % moe.every:
            yield "model.moe.every", (
                f"{moe.every} must divide the {m.layers - moe.first_dense} layers after "
                f"model.moe.first_dense={moe.first_dense} (valid: "
                f"{divisors(m.layers - moe.first_dense)})")
    elif m.layers % moe.every:
        yield "model.moe.every", (f"{moe.every} must divide model.layers={m.layers} "
                                  f"(valid: {divisors(m.layers)})")
    yield from _moe_widths(m, s)
    yield from _expert_degrees(p)
    yield from must_divide("parallel.expert", p.expert, "model.moe.experts", moe.experts)
    if moe.imbalance != 1.0 and p.expert == 1:
        yield "model.moe.imbalance", (
            f"{moe.imbalance:g} needs parallel.expert > 1: on one expert-parallel rank every "
            f"device runs all experts on its own tokens, so no rank is busier than another "
            f"(allowed: 1.0)")


def _expert_degrees(p: ParallelSpec) -> Iterator[Problem]:
    """Expert parallel over data-parallel ranks; with expert tensor parallel 1 over the
    tensor x data ranks, tensor-parallel ranks first (Megatron-Core's expert groups
    etp-ep-edp fold tp x dp: initialize_model_parallel requires expert_tensor x expert to
    divide tensor x data)."""
    if p.expert_tensor is not None and p.expert_tensor not in (1, p.tensor):
        yield "parallel.expert_tensor", (
            f"{p.expert_tensor} is not simulated (allowed: 1, whole experts on the "
            f"tensor-parallel ranks, or parallel.tensor={p.tensor}, each expert split as the "
            f"dense FFN is)")
    elif p.experts_tensor_split:
        yield from must_divide("parallel.expert", p.expert, "parallel.data", p.data)
    elif p.expert % p.tensor:
        yield "parallel.expert", (
            f"{p.expert} with parallel.expert_tensor=1 must be a multiple of parallel.tensor="
            f"{p.tensor} (the tensor-parallel ranks are part of the expert-parallel group)")
    else:
        yield from must_divide("parallel.expert / parallel.tensor", p.expert // p.tensor,
                               "parallel.data", p.data)


def _moe_widths(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """The routed and shared experts' widths split over the tensor-parallel ranks as the
    dense FFN's does; shared experts' width needs shared experts."""
    moe, t = m.moe, s.parallel.tensor
    assert moe is not None
    if s.parallel.tensor_nd is None:
        if moe.ffn_hidden_size:
            yield from must_divide("parallel.tensor", t, "model.moe.ffn_hidden_size",
                                   moe.ffn_hidden_size)
        if moe.shared_experts:
            yield from must_divide("parallel.tensor", t, "model.moe.shared_experts * "
                                   "shared_ffn_hidden_size", moe.shared_ffn(m.ffn))
    if moe.groups > 1:
        per = moe.experts // moe.groups
        if moe.experts % moe.groups or per < 2:
            yield "model.moe.groups", (
                f"{moe.groups} must split model.moe.experts={moe.experts} into groups of at "
                f"least 2 (a group scores by its two best experts; valid: divisors of "
                f"{moe.experts} up to {moe.experts // 2})")
        elif not moe.group_top_k <= moe.groups or moe.group_top_k * per < moe.top_k:
            yield "model.moe.group_top_k", (
                f"{moe.group_top_k} must be at most model.moe.groups={moe.groups} and its "
                f"groups must hold model.moe.top_k={moe.top_k} experts ({per} each)")
    elif moe.group_top_k != 1:
        yield "model.moe.group_top_k", (f"{moe.group_top_k} needs model.moe.groups > 1 "
                                        f"(allowed without groups: 1)")
    if moe.shared_ffn_hidden_size and not moe.shared_experts:
        yield "model.moe.shared_ffn_hidden_size", (
            f"{moe.shared_ffn_hidden_size} needs model.moe.shared_experts >= 1 (there are no "
            f"shared experts to size)")


def context(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """Context parallelism (parallel.context > 1) runs ring attention, a fused attention
    kernel (Megatron-Core implements it only in Transformer Engine's DotProductAttention,
    `attn_forward_func_with_cp`). The sequence splits into 2 * context chunks, two per
    rank, for causal load balancing (Megatron-Core `get_batch_on_this_cp_rank`:
    seq_length % (2 * context_parallel_size) == 0)."""
    p = s.parallel
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


def tensor_nd(m: TransformerModel, s: Scenario, nd: list[int]) -> Iterator[Problem]:
    """2-D tensor parallel (simulator/models/transformer_plan.py) lays the `tensor` devices
    out as an x * y grid and splits the GEMM weights on both axes (the hidden dim on y, the
    head / FFN dim on x) and the heads and FFN activations x * y ways: the divisibility of
    1-D's tensor, which `shape` checks (x * y divides the heads, so the hidden dim too).
    3-D ([x, y, z], Bian et al. 2021) adds z, which splits the batch (z must divide
    training.micro_batch_size) and keeps every parameter split. Each size above 1 (a size
    of 1 is a lower dimension); the combinations whose plans are not written are refused."""
    p = s.parallel
    grid = "*".join(str(n) for n in nd)
    if math.prod(nd) != p.tensor:
        yield "parallel.tensor_nd", (f"{nd}: {grid} = {math.prod(nd)} must equal "
                                     f"parallel.tensor={p.tensor}")
    elif min(nd) == 1:
        fix = "remove the key" if len(nd) == 2 else "give the other two sizes"
        yield "parallel.tensor_nd", (f"{nd}: a size of 1 is {len(nd) - 1}-D tensor parallel "
                                     f"({fix}; allowed: sizes of at least 2)")
    else:
        if len(nd) == 3:
            yield from _cube_divides(m, s, nd)
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


def _cube_divides(m: TransformerModel, s: Scenario, nd: list[int]) -> Iterator[Problem]:
    """3-D tensor parallel's splits: x * y of the heads, key/value heads, FFN dim,
    vocabulary and (sequence parallel) sequence, as 2-D's grid splits them; z of each
    micro-batch's samples. A parameter's further split on z takes the first of its dims that
    z divides after the grid's split (`sharding.plan.split_on`; the bundled shapes split
    every weight x*y*z ways) or, where none does, leaves it whole on z: no shape is refused
    for it."""
    p = s.parallel
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
