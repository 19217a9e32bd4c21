"""Transformer parallel plans written in the sharding algebra, keyed on op roles, and the
planned transformer graph that both `run` (timing) and `verify` (numeric proof) use.

- data parallel: the batch label split on `dp`; weights broadcast, so their gradients come
  out Partial on `dp` and need a reduction;
- Megatron tensor parallel (Shoeybi et al. 2019, Sec. 3): heads (g) and the FFN dim (f)
  split on `tp`, the vocabulary split in the embedding, the LM head and the cross-entropy
  (vocabulary-parallel: its row statistics are all-reduced inside the op); the row-parallel
  outputs are Partial and all-reduced before the bias-dropout-add (Megatron's `g`); the
  replicated norms take their gradient whole, so it is all-reduced where it leaves the
  column-parallel GEMMs (Megatron's `f`);
- sequence parallel (Korthikanti et al. 2022, Sec. 4.2.2): norms, dropouts and residual adds
  split on the sequence on `tp`, so the planner inserts all-gathers before the column-
  parallel GEMMs and reduce-scatters after the row-parallel ones in place of the all-reduces;
- expert parallel (a mixture-of-experts model): the data-parallel ranks are the mesh axes
  (`dp`, `ep`), `ep` inner, as Megatron-Core orders its groups (tp-cp-ep-dp-pp,
  megatron/core/parallel_state.py); every op but the experts splits the batch on both, so
  the dense weights' gradients are reduced over all data-parallel ranks; the expert GEMMs
  split the expert dim on `ep` (each rank holds experts/ep experts, their gradients reduced
  over `dp` alone: Megatron's expert-data-parallel group). Dispatch leaves the token slots
  split on the batch and the expert GEMMs want them split on the experts: the planner's
  S(batch) -> S(expert) on `ep` is GShard's dispatch all-to-all, and the way back before the
  combine its combine all-to-all (Lepikhin et al. 2021, Sec. 3.2). On `tp` the routing is
  replicated and the expert FFN dim is split (Megatron's expert tensor parallel, by default
  the tensor-parallel size), the combine taking the Partial expert outputs.
- context parallel (Megatron-Core --context-parallel-size; Liu et al. 2023, Ring
  Attention): a `cp` axis between `dp` and `tp` (Megatron-Core's order tp-cp-ep-dp-pp)
  on which every op splits the sequence: token-wise ops and GEMMs their `s` dim, the
  attention its sequence with the ring's key/value exchange inside the op
  (simulator/graph/ops/ring_attention.py), the cross-entropy and the loss mean their token
  dim (a Partial mean, summed with the weight gradients). Weights are broadcast on `cp`, so
  their gradients come out Partial on `cp` as on `dp` and are reduced over both (Megatron
  reduces over its combined data-and-context-parallel group).
- 2-D tensor parallel (`parallel.tensor_nd: [x, y]`, tensor = x * y; MindSpore's high
  dimension tensor parallel, `MatMul.add_prim_attr("enable_nd_tp", True)` with a 2-D
  Layout, mindspore-ai/docs tutorials/source_en/parallel/high_dimension_tensor_parallel.md;
  Xu et al. 2021, "An Efficient 2D Method for Training Super-Large Deep Learning Models",
  arXiv:2104.05343): `tp` becomes two mesh axes (`tpx` outer of x devices,
  `tpy` inner of y). Every GEMM weight is split on both: its head / FFN dim on `tpx`, its
  hidden dim on `tpy` (Megatron's column-parallel QKV/FC1 contract `tpy`, its row-parallel
  projections `tpx`); the heads and FFN activations are split x*y ways (`tpx` outer, as
  the weights split them); the norm regions split the sequence on both axes under sequence
  parallel (whole without it). The planner then derives, in place of 1-D's all-reduces, a
  GEMM input all-gathered on `tpx`, a column GEMM's Partial output reduce-scattered on
  `tpy` into its x*y split, a row GEMM's input all-gathered on `tpy` and its Partial
  output reduce-scattered on `tpx` (the AllGather / ReduceScatter pairs of MindSpore's
  tutorial, with its two axes exchanged: a row-major nested layout splits a dim on its
  outer axis first), plus the all-to-alls that keep the norms' hidden dim whole.
- 3-D tensor parallel (`parallel.tensor_nd: [x, y, z]`, tensor = x * y * z; Bian et al.
  2021, "Maximizing Parallelism in Distributed Training for Huge Neural Networks",
  arXiv:2105.14450, Sec. 3, after Agarwal et al. 1995's 3-D matrix multiply; Colossal-AI's
  `_Linear3D`, colossalai/legacy/nn/layer/parallel_3d/_operation.py; MindSpore's 3-D
  Layout of the same tutorial): the (x, y) grid as in 2-D plus a third axis `tpz`
  (innermost) on which every op splits the batch and every parameter is KEPT split
  (`TensorDef.gathered`). Each GEMM then runs Bian's three collectives, which the planner
  derives: its input all-gathered on `tpx` (column GEMMs; `tpy` for row GEMMs: Colossal-
  AI's input mode), its weight all-gathered on `tpz` (the weight mode), its Partial output
  reduce-scattered on `tpy` (`tpx`: the output mode; input and output modes exchange
  from one GEMM to the next as Colossal-AI's do); the backward's duals are the output
  gradient all-gathered, the input gradient and the weight gradient reduce-scattered.
  Weights are 1/(x*y*z) per device, activations split on all three axes.
"""

from __future__ import annotations

import dataclasses

from simulator.config.scenario.schema import MoeSpec, Scenario, TransformerModel
from simulator.config.scenario.schema_mla import MlaSpec, MtpSpec
from simulator.graph.builders import build_gpt
from simulator.graph.decoder import GptDims, LayerKind
from simulator.graph.graph import Graph, OpNode
from simulator.graph.ops.moe import expert_capacity
from simulator.models.layers import layer_kinds
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import Strategy

__all__ = ["transformer_choices", "apply_transformer_plan", "planned_transformer",
           "TP_ROLES", "EP_ROLES", "ETP1_ROLES", "TP2D_ROLES", "TP2D_AXES",
           "TP3D_WEIGHT_AXIS", "gpt_dims", "model_dims", "uses_flash", "with_moe", "with_mla",
           "with_mtp"]

TP_ROLES: dict[str, tuple[str, str]] = {
    # role: (tp choice without SP, with SP); a bias add splits the dim its GEMM splits
    "embed": ("v", "v"), "q": ("d2", "d2"), "k": ("d2", "d2"), "v": ("d2", "d2"),
    "q_mm": ("g", "g"), "k_mm": ("g", "g"), "v_mm": ("g", "g"), "attn": ("g", "g"),
    "scores": ("g", "g"), "scale": ("d1", "d1"), "mask": ("d1", "d1"),
    "softmax": ("d1", "d1"), "attn_drop": ("d1", "d1"), "context": ("g", "g"),
    "proj": ("g", "g"), "fc1_mm": ("f", "f"), "fc3_mm": ("f", "f"), "fc1": ("d2", "d2"),
    "fc3": ("d2", "d2"), "act": ("d2", "d2"), "glu": ("d2", "d2"), "fc2": ("f", "f"),
    "head": ("v", "v"), "ce": ("c", "c"), "loss": ("B", "B"),
    # rotary positions and query/key head norms: on the heads, as the q/k they follow
    "rope_q": ("d2", "d2"), "rope_k": ("d2", "d2"), "q_head_norm": ("d2", "d2"),
    "k_head_norm": ("d2", "d2"),
    # mixture of experts: routing replicated, expert FFN dim split, Partial into the combine
    "router": ("B", "B"), "route": ("B", "B"), "gate": ("B", "B"), "dispatch": ("B", "B"),
    "efc1": ("f", "f"), "efc3": ("f", "f"), "eact": ("d3", "d3"), "eglu": ("d3", "d3"),
    "efc2": ("f", "f"), "combine": ("P2", "P2"),
    # shared experts: column- then row-parallel as the dense FFN, Partial into their sum
    # with the (Partial) combine
    "sfc1": ("f", "f"), "sfc3": ("f", "f"), "sact": ("d2", "d2"), "sglu": ("d2", "d2"),
    "sfc2": ("f", "f"), "sadd": ("PP", "PP"),
    # Mamba-2 (graph/mamba.py): heads split by their groups g, as Megatron-Core's MambaMixer
    # splits nheads and ngroups (in_proj column-parallel, out_proj `proj` row-parallel)
    "ssm_z": ("g", "g"), "ssm_x": ("g", "g"), "ssm_b": ("g", "g"), "ssm_c": ("g", "g"),
    "ssm_dt": ("g", "g"), "conv_x": ("c0", "c0"), "conv_b": ("c0", "c0"),
    "conv_c": ("c0", "c0"), "conv_x_act": ("d2", "d2"), "conv_b_act": ("d2", "d2"),
    "conv_c_act": ("d2", "d2"), "scan": ("g", "g"), "ssm_norm": ("g", "g"),
    # multi-head latent attention (graph.mla), as Megatron-Core's MLASelfAttention with its
    # TE layer spec (megatron/core/models/gpt/gpt_layer_specs.py: linear_q_down_proj and
    # linear_kv_down_proj `backend.linear()`, a TELinear of parallel_mode 'duplicated'):
    # the down-projections and latent norms replicated, on each rank's sequence block under
    # SP (their weight gradients Partial, all-reduced), the rotary key gathered whole
    # (`gather_from_sequence_parallel_region(k_pos_emb)`), the up-projections column-
    # parallel over heads
    "q_down": ("B", "s"), "kv_down": ("B", "s"), "k_rope_mm": ("B", "s"),
    "q_norm": ("B", "d1"), "kv_norm": ("B", "d1"), "k_rope": ("B", "B"),
    "q_nope": ("g", "g"), "q_rope_mm": ("g", "g"), "q_rope": ("d2", "d2"),
    "k_nope": ("g", "g"), "v_up": ("g", "g"), "q_cat": ("d2", "d2"), "k_cat": ("d2", "d2"),
    # multi-token prediction (graph.mtp), as Megatron-Core's MultiTokenPredictionLayer: its
    # embedding vocabulary-parallel, eh_proj column-parallel (TEColumnParallelLinear), its
    # output gathered whole (`gather_from_tensor_model_parallel_region`, then scattered to
    # the sequence under SP); the losses' sums replicated
    "eh_proj": ("h", "h"),
}
# 2-D tensor parallel: role -> (choice on `tpx`, choice on `tpy`); the norm regions
# (_SEQ_REGION) split the sequence on both under sequence parallel, else neither
TP2D_AXES = ("tpx", "tpy")
TP2D_ROLES: dict[str, tuple[str, str]] = {
    "embed": ("v", "v"), "q_mm": ("g", "h"), "k_mm": ("g", "h"), "v_mm": ("g", "h"),
    "q": ("d2", "d2"), "k": ("d2", "d2"), "v": ("d2", "d2"), "attn": ("g", "g"),
    "scores": ("g", "g"), "scale": ("d1", "d1"), "mask": ("d1", "d1"),
    "softmax": ("d1", "d1"), "attn_drop": ("d1", "d1"), "context": ("g", "g"),
    "proj": ("g", "h"), "fc1_mm": ("f", "h"), "fc3_mm": ("f", "h"), "fc1": ("d2", "d2"),
    "fc3": ("d2", "d2"), "act": ("d2", "d2"), "glu": ("d2", "d2"), "fc2": ("f", "h"),
    "head": ("v", "v"), "ce": ("c", "c"), "loss": ("B", "B"),
    "rope_q": ("d2", "d2"), "rope_k": ("d2", "d2"), "q_head_norm": ("d2", "d2"),
    "k_head_norm": ("d2", "d2"),
}
# 3-D tensor parallel's third axis: the batch split, every parameter kept split and
# all-gathered before use (Bian et al. 2021's weight mode); innermost, so that the split
# it adds to a weight dim that tpx or tpy already splits nests inside theirs (layout.py)
TP3D_WEIGHT_AXIS = "tpz"
# on `ep` the experts split the expert dim; every other op splits the batch as on `dp`
EP_ROLES: dict[str, str] = {"efc1": "e", "efc3": "e", "eact": "d1", "eglu": "d1",
                            "efc2": "e"}
# expert tensor parallel 1 (Megatron-Core --expert-tensor-parallel-size 1): on `tp` the
# expert GEMMs split the expert dim, nested inside the split `ep` makes (tp inner, as
# Megatron-Core orders its expert groups etp-ep-edp); the dispatched slots stay whole on
# `tp` (each rank takes its experts' block locally) and the combine takes the expert
# outputs as a Partial sum (zeros outside a rank's experts), so the `ep` all-to-alls carry
# the whole tensor group's tokens, as with expert tensor parallel = tensor. (Splitting
# the slots on `tp` too makes the planner move them with three all-to-alls, tp-ep-tp,
# 1.5x the bytes.) Megatron-Core runs one all-to-all over the tp x ep ranks instead,
# each rank sending its sequence-parallel share: 1/tp of these bytes.
ETP1_ROLES: dict[str, str] = {"efc1": "e", "efc3": "e", "eact": "d1", "eglu": "d1",
                              "efc2": "e"}
_SEQ_REGION = ("embed_pos", "embed_out", "embed_drop", "ln1", "ln2", "lnf", "res1", "res2",
               "proj_bias", "proj_drop", "fc2_bias", "fc2_drop",
               "enorm", "hnorm", "eh_cat")
_DP_LABEL = {"embed": "i0", "q_mm": "b", "k_mm": "b", "v_mm": "b", "attn": "b",
             "scores": "b", "context": "b", "proj": "b", "fc1_mm": "b", "fc3_mm": "b",
             "fc2": "b", "head": "b", "router": "b", "route": "b", "gate": "b",
             "dispatch": "b", "efc1": "b", "efc3": "b", "eact": "d0", "eglu": "d0",
             "efc2": "b", "combine": "b", "sfc1": "b", "sfc3": "b", "sfc2": "b",
             "ssm_z": "b", "ssm_x": "b", "ssm_b": "b", "ssm_c": "b", "ssm_dt": "b",
             "conv_x": "b", "conv_b": "b", "conv_c": "b", "scan": "b", "ssm_norm": "b",
             "q_down": "b", "kv_down": "b", "k_rope_mm": "b",
             "q_nope": "b", "q_rope_mm": "b", "k_nope": "b", "v_up": "b",
             "eh_proj": "b", "mtp_sum": "PP", "mtp_scale": "PP", "loss_mtp": "PP"}

# An op whose role none of these tables names (a model's own stem or head op, such as a
# vision transformer's patch embedding) runs replicated on the tensor-parallel axes, as
# Megatron-LM runs a module it does not parallelise, and splits its first dim (label `d0`,
# the batch) on the data-parallel ones: `_REPLICATED`.
_REPLICATED = "B"

# on `cp` the sequence: an einsum's `s`, the embedding lookup's token index, else dim 1
_CP_LABEL = {"embed": "i1", "q_mm": "s", "k_mm": "s", "v_mm": "s", "attn": "s",
             "proj": "s", "fc1_mm": "s", "fc3_mm": "s", "fc2": "s", "head": "s"}


def transformer_choices(role: str, sequence_parallel: bool, expert: bool = False,
                        context: bool = False, two_d: bool = False, three_d: bool = False,
                        expert_tp: bool = True) -> dict[str, str]:
    """The per-mesh-axis choice for an op of this role (with `expert`: on (dp, ep, tp);
    with `context`: on (dp, cp, tp); with `two_d`: on (dp, tpx, tpy); with `three_d`: on
    (dp, tpx, tpy, tpz), tpz splitting the batch as dp does)."""
    if two_d or three_d:
        dp = _DP_LABEL.get(role, "d0")
        third = {TP3D_WEIGHT_AXIS: dp} if three_d else {}
        return {"dp": dp, **_choices_2d(role, sequence_parallel), **third}
    if role in TP_ROLES:
        tp = TP_ROLES[role][1 if sequence_parallel else 0]
    elif role in _SEQ_REGION:
        tp = "d1" if sequence_parallel else "B"
    else:
        tp = _REPLICATED  # a role of its own
    dp = _DP_LABEL.get(role, "d0")
    if context:
        return {"dp": dp, "cp": _CP_LABEL.get(role, "d1"), "tp": tp}
    if not expert:
        return {"dp": dp, "tp": tp}
    if not expert_tp:
        tp = ETP1_ROLES.get(role, tp)
    return {"dp": dp, "ep": EP_ROLES.get(role, dp), "tp": tp}


def _choices_2d(role: str, sequence_parallel: bool) -> dict[str, str]:
    if role in TP2D_ROLES:
        x, y = TP2D_ROLES[role]
    elif role in _SEQ_REGION:
        x = y = "d1" if sequence_parallel else "B"
    else:
        x = y = _REPLICATED  # a role of its own
    return dict(zip(TP2D_AXES, (x, y)))


def apply_transformer_plan(graph: Graph, sequence_parallel: bool, expert: bool = False,
                           context: bool = False, two_d: bool = False, three_d: bool = False,
                           expert_tp: bool = True) -> Graph:
    """The graph with every op's strategy set for a (dp, tp) mesh, (dp, ep, tp),
    (dp, cp, tp), (dp, tpx, tpy) or (dp, tpx, tpy, tpz); under 3-D every parameter is kept
    split on tpz (gathered before use)."""
    ops: list[OpNode] = []
    for op in graph.ops:
        role = op.name.split(".")[-1]
        choices = transformer_choices(role, sequence_parallel, expert, context, two_d,
                                      three_d, expert_tp)
        ops.append(dataclasses.replace(op, strategy=Strategy(axes=choices)))
    tensors = graph.tensors
    if three_d:
        tensors = {n: dataclasses.replace(t, gathered=(TP3D_WEIGHT_AXIS,))
                   if t.kind == "parameter" else t for n, t in tensors.items()}
    return Graph(tensors, tuple(ops))


def planned_transformer(dims: GptDims, data: int, tensor: int, sequence_parallel: bool,
                        expert: int = 1, tensor_nd: tuple[int, ...] | None = None
                        ) -> tuple[Graph, Mesh]:
    """The Megatron plan of a GPT graph (one micro-batch of every data-parallel replica:
    `dims.batch` is the global micro-batch) on the (dp, tp) mesh; a mixture of experts on
    (dp, ep, tp) with data = dp * ep; context parallel (dims.context > 1) on (dp, cp, tp);
    2-D tensor parallel (`tensor_nd` = (x, y), x * y = tensor) on (dp, tpx, tpy), 3-D
    (`tensor_nd` = (x, y, z), x * y * z = tensor) on (dp, tpx, tpy, tpz)."""
    if tensor_nd is not None and len(tensor_nd) == 3:
        x, y, z = tensor_nd
        graph = apply_transformer_plan(build_gpt(dims), sequence_parallel, three_d=True)
        return graph, Mesh.of(dp=data, tpx=x, tpy=y, tpz=z)
    if tensor_nd is not None:
        x, y = tensor_nd
        graph = apply_transformer_plan(build_gpt(dims), sequence_parallel, two_d=True)
        return graph, Mesh.of(dp=data, tpx=x, tpy=y)
    moe = dims.experts > 0
    cp = dims.context > 1
    graph = apply_transformer_plan(build_gpt(dims), sequence_parallel and tensor > 1, moe, cp,
                                   expert_tp=dims.expert_tp or tensor == 1)
    if cp:
        return graph, Mesh.of(dp=data, cp=dims.context, tp=tensor)
    if not moe:
        return graph, Mesh.of(dp=data, tp=tensor)
    return graph, Mesh.of(dp=data // expert, ep=expert, tp=tensor)


def uses_flash(scenario: Scenario, fused_default: bool = False) -> bool:
    """Whether attention runs fused: `model.attention`, with `auto` taking the hardware
    profile's `software.fused_attention`."""
    mode = getattr(scenario.model, "attention", "standard")
    return fused_default if mode == "auto" else mode != "standard"


def gpt_dims(scenario: Scenario, flash: bool,
             kinds: tuple[LayerKind, ...] | None = None) -> GptDims:
    """The GPT graph dimensions of a transformer scenario: one micro-batch of every
    data-parallel replica, of layers `kinds` (None: the model's own, `layer_kinds`; a
    program's representative graph passes `models.layers.LayerPlan.graph`). GPT-style
    (gelu) models carry biases, Llama-style (swiglu) none; `parallel.expert_tensor: 1`
    keeps experts whole on the tensor-parallel ranks."""
    m, p = scenario.model, scenario.parallel
    assert isinstance(m, TransformerModel), "gpt_dims needs a transformer model"
    dims = model_dims(m, layer_kinds(m) if kinds is None else kinds,
                      scenario.training.micro_batch_size * p.data, flash, p.context)
    return dims if p.experts_tensor_split else dataclasses.replace(dims, expert_tp=False)


def model_dims(m: TransformerModel, kinds: tuple[LayerKind, ...], batch: int,
               flash: bool = False, context: int = 1) -> GptDims:
    """The graph dimensions of transformer `m` with layers of `kinds` for `batch` samples:
    its fields, its mixture of experts, and what its schema class adds
    (`TransformerModel.graph_dims`). GPT-style (gelu) models carry biases, Llama-style
    (swiglu) and squared-ReLU (relu2: Nemotron-H, use_bias false) ones none."""
    swiglu = m.ffn_activation == "swiglu"
    fields: dict = dict(layers=len(kinds), hidden=m.hidden_size, heads=m.num_heads,
                        kv_heads=m.kv_heads, ffn=m.ffn, seq=m.seq_length, vocab=m.vocab_size,
                        batch=batch, swiglu=swiglu, relu2=m.ffn_activation == "relu2",
                        bias=m.ffn_activation == "gelu", flash=flash,
                        context=context, dropout=m.dropout, kinds=kinds, **dense_dims(m))
    fields.update(m.graph_dims())
    return with_mtp(with_mla(with_moe(GptDims(**fields), m.moe), m.mla), m.mtp)


def dense_dims(m: TransformerModel) -> dict:
    """The dense-fidelity fields of `GptDims` from transformer `m`'s keys (their defaults
    by architecture resolved by the schema): head size, tied head, positions, norm, q/k/v
    biases, q/k head norms, attention sinks (each layer's window is its LayerKind's)."""
    return {"head_size": m.head_dim or 0, "tied": m.tied, "position": m.positions,
            "rope_base": m.rope_theta, "rms": m.norm_kind == "rmsnorm",
            "qkv_bias": m.qkv_bias, "qk_norm": m.qk_norm, "sinks": m.attention_sinks}


def with_mla(dims: GptDims, mla: MlaSpec | None) -> GptDims:
    """`dims` with the scenario's multi-head latent attention (graph.mla)."""
    if mla is None:
        return dims
    return dataclasses.replace(dims, q_lora_rank=mla.q_lora_rank or 0,
                               kv_lora_rank=mla.kv_lora_rank,
                               qk_nope_head_dim=mla.qk_nope_head_dim,
                               qk_rope_head_dim=mla.qk_rope_head_dim,
                               v_head_dim=mla.v_head_dim)


def with_mtp(dims: GptDims, mtp: MtpSpec | None) -> GptDims:
    """`dims` with the scenario's multi-token prediction modules (graph.mtp)."""
    if mtp is None:
        return dims
    return dataclasses.replace(dims, mtp_depth=mtp.depth, mtp_weight=mtp.loss_weight)


def with_moe(dims: GptDims, moe: MoeSpec | None, exact: bool = False) -> GptDims:
    """`dims` with the scenario's mixture of experts (capacity per sample of dims.seq
    tokens, simulator/graph/ops/moe.py; `exact`: a dropless router's verification case)."""
    if moe is None:
        return dims
    if moe.capacity_factor is not None:
        capacity = expert_capacity(moe.experts, moe.top_k, moe.capacity_factor, dims.seq)
    else:
        # dropless: in run each expert's mean load (a dropless grouped GEMM runs the tokens
        # routed, no padding; `imbalance` prices the busiest rank); in verify (`exact`) a
        # slot for every token of the sample, so that no token is dropped
        capacity = dims.seq if exact else expert_capacity(moe.experts, moe.top_k, 1.0,
                                                          dims.seq)
    return dataclasses.replace(
        dims, experts=moe.experts, top_k=moe.top_k, capacity=capacity, moe_every=moe.every,
        expert_ffn=moe.expert_ffn(dims.ffn), shared_ffn=moe.shared_ffn(dims.ffn),
        score=moe.score, normalize=moe.normalized(), route_scale=moe.scaling_factor,
        route_groups=moe.groups, route_top_groups=moe.group_top_k)
