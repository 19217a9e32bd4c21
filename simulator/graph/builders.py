"""Model builders: a GPT-style decoder, an MLP, a ResNet-like conv net, each as a Graph of
logical operators for ONE micro-batch. Op names carry their role (`l0.q`, `l1.fc2`), which
sharding plans key on.

Attention is written with explicit head dims (einsum), grouped-query style: the weights are
[h, g, r, d] for queries and [h, g, d] for keys and values, g key/value groups of r query
heads each (r = 1 is ordinary multi-head attention), so heads split by splitting g.
"""

from __future__ import annotations

import math
from typing import Any

from simulator.graph.decoder import (
    Block,
    GptDims,
    LayerKind,
    bias_dropout_add,
    dropout,
    hash_seed,
    linear,
    norm,
)
from simulator.graph.graph import Graph, GraphBuilder
from simulator.graph.mamba import mamba_mixer
from simulator.graph.mla import mla
from simulator.graph.mtp import mtp_loss

__all__ = ["MIXERS", "FFNS", "build_gpt", "build_mlp", "build_resnet"]


def _attention_core(g: GraphBuilder, q: str, k: str, v: str, p: str, d: GptDims,
                    kind: LayerKind | None = None) -> str:
    """Scores, scaled-masked softmax, dropout, context: Megatron's unfused core attention
    (its scale-mask-softmax is one fused kernel), or one FlashAttention kernel; with context
    parallelism one ring-attention kernel (simulator/graph/ops/ring_attention.py). A
    sliding window (`kind.window`) or sink logits (`d.sinks`, a parameter [g, r]) run in the
    fused kernel (FlashAttention's `window_size`; unfused stacks do not window)."""
    window = kind.window if kind is not None else 0
    extra: dict[str, Any] = {"window": window} if window else {}
    if d.context > 1:
        return g.op("RingAttention", [q, k, v], f"{p}.attn", p=d.dropout,
                    seed=hash_seed(p, 1), ring=d.context, kernel="flash_attention", **extra)
    if d.flash or window or d.sinks:
        if not d.causal:
            extra["causal"] = False
        ins = [q, k, v]
        if d.sinks:
            ins.append(g.tensor(f"{p}.sinks", [d.kv_heads, d.heads // d.kv_heads],
                                "parameter"))
        return g.op("FusedAttention", ins, f"{p}.attn", p=d.dropout,
                    seed=hash_seed(p, 1), kernel="flash_attention", **extra)
    sc = g.op("Einsum", [q, k], f"{p}.scores", equation="bsgrd,btgd->bgrst", kernel="scores")
    sc = g.op("Scale", [sc], f"{p}.scale", factor=1.0 / math.sqrt(d.head_dim),
              kernel="softmax")
    if d.causal:
        sc = g.op("CausalMask", [sc], f"{p}.mask", kernel="softmax")
    pr = g.op("Softmax", [sc], f"{p}.softmax", axis=-1, kernel="softmax")
    pr = dropout(g, pr, f"{p}.attn_drop", d, hash_seed(p, 1), "attn_dropout")
    return g.op("Einsum", [pr, v], f"{p}.context", equation="bgrst,btgd->bsgrd",
                kernel="context")


def _positions(g: GraphBuilder, q: str, k: str, p: str, d: GptDims) -> tuple[str, str]:
    """Queries and keys with their heads normalised (`d.qk_norm`: RMSNorm over the head
    dim, Qwen3's q_norm / k_norm) and rotated (`d.position` 'rope'), in that order as in
    Hugging Face's Qwen3Attention."""
    if d.qk_norm:
        q = norm(g, q, f"{p}.q_head_norm", d, "qk_norm", d.head_dim)
        k = norm(g, k, f"{p}.k_head_norm", d, "qk_norm", d.head_dim)
    if d.position == "rope":
        q = g.op("Rotary", [q], f"{p}.rope_q", base=d.rope_base, kernel="rope")
        k = g.op("Rotary", [k], f"{p}.rope_k", base=d.rope_base, kernel="rope")
    return q, k


def _attention(g: GraphBuilder, x: str, p: str, d: GptDims, kind: LayerKind) -> str:
    grp, r, hd = d.kv_heads, d.heads // d.kv_heads, d.head_dim
    a = norm(g, x, f"{p}.ln1", d, "ln1")
    wq = g.tensor(f"{p}.wq", [d.hidden, grp, r, hd], "parameter")
    wk = g.tensor(f"{p}.wk", [d.hidden, grp, hd], "parameter")
    wv = g.tensor(f"{p}.wv", [d.hidden, grp, hd], "parameter")
    qkv_bias = d.bias or d.qkv_bias
    q = linear(g, a, wq, f"{p}.q", "bsh,hgrd->bsgrd", d, "qkv", [grp, r, hd], qkv_bias)
    k = linear(g, a, wk, f"{p}.k", "bsh,hgd->bsgd", d, "qkv", [grp, hd], qkv_bias)
    v = linear(g, a, wv, f"{p}.v", "bsh,hgd->bsgd", d, "qkv", [grp, hd], qkv_bias)
    q, k = _positions(g, q, k, p, d)
    c = _attention_core(g, q, k, v, p, d, kind)
    wo = g.tensor(f"{p}.wo", [grp, r, hd, d.hidden], "parameter")
    o = g.op("Einsum", [c, wo], f"{p}.proj", equation="bsgrd,grdh->bsh", kernel="proj")
    return bias_dropout_add(g, o, x, p, "proj", d, 1)


def _ffn(g: GraphBuilder, x: str, p: str, d: GptDims, k: LayerKind) -> str:
    a = norm(g, x, f"{p}.ln2", d, "ln2")
    w1 = g.tensor(f"{p}.w1", [d.hidden, d.ffn], "parameter")
    if d.swiglu:
        u = linear(g, a, w1, f"{p}.fc1", "bsh,hf->bsf", d, "fc_gate", [d.ffn])
        w3 = g.tensor(f"{p}.w3", [d.hidden, d.ffn], "parameter")
        gate = linear(g, a, w3, f"{p}.fc3", "bsh,hf->bsf", d, "fc_up", [d.ffn])
        u = g.op("Mul", [g.op("SiLU", [u], f"{p}.act", kernel="swiglu"), gate], f"{p}.glu",
                 kernel="swiglu")
    else:
        u = linear(g, a, w1, f"{p}.fc1", "bsh,hf->bsf", d, "fc1", [d.ffn])
        u = _activation(g, u, f"{p}.act", "gelu", d)
    w2 = g.tensor(f"{p}.w2", [d.ffn, d.hidden], "parameter")
    y = g.op("Einsum", [u, w2], f"{p}.fc2", equation="bsf,fh->bsh", kernel="fc2")
    return bias_dropout_add(g, y, x, p, "fc2", d, 2)


def _activation(g: GraphBuilder, u: str, name: str, kernel: str, d: GptDims) -> str:
    """A non-gated FFN's activation: GeLU, or squared ReLU for a relu2 model."""
    return g.op("SquaredReLU" if d.relu2 else "GeLU", [u], name, kernel=kernel)


def _gate_attrs(d: GptDims) -> dict[str, Any]:
    """MoeGateWeights' attributes where they differ from its defaults (softmax scores,
    renormalised when top_k > 1, unscaled), so that today's graphs keep their attributes."""
    attrs: dict[str, Any] = {}
    if d.score != "softmax":
        attrs["score"] = d.score
    if d.normalize is not None and d.normalize != (d.top_k > 1):
        attrs["normalize"] = d.normalize
    if d.route_scale != 1.0:
        attrs["scale"] = d.route_scale
    return attrs


def _shared_experts(g: GraphBuilder, a: str, p: str, d: GptDims) -> str:
    """The shared experts (DeepSeekMoE, Dai et al. 2024, arXiv:2401.06066, Sec. 3.2; DeepSeek-
    V3 Sec. 2.1.2 eq. 12): every token through one FFN of their total width `d.shared_ffn`
    (Megatron-Core's SharedExpertMLP), tensor parallel as the dense FFN is."""
    w1 = g.tensor(f"{p}.shared.w1", [d.hidden, d.shared_ffn], "parameter")
    u = g.op("Einsum", [a, w1], f"{p}.sfc1", equation="bsh,hf->bsf", kernel="shared_fc1")
    if d.swiglu:
        w3 = g.tensor(f"{p}.shared.w3", [d.hidden, d.shared_ffn], "parameter")
        up = g.op("Einsum", [a, w3], f"{p}.sfc3", equation="bsh,hf->bsf", kernel="shared_fc1")
        u = g.op("Mul", [g.op("SiLU", [u], f"{p}.sact", kernel="shared_act"), up],
                 f"{p}.sglu", kernel="shared_act")
    else:
        u = _activation(g, u, f"{p}.sact", "shared_act", d)
    w2 = g.tensor(f"{p}.shared.w2", [d.shared_ffn, d.hidden], "parameter")
    return g.op("Einsum", [u, w2], f"{p}.sfc2", equation="bsf,fh->bsh", kernel="shared_fc2")


def _moe_ffn(g: GraphBuilder, x: str, p: str, d: GptDims, k: LayerKind) -> str:
    """The FFN as a mixture of experts (GShard Sec. 2.2, Switch Sec. 2.1; the routing ops are
    simulator/graph/ops/moe.py): a router GEMM to one logit per expert, top-k routing with
    capacity, dispatch of each token to its experts' slots [b, E, C, h], the expert FFNs
    (each `d.expert_ffn` wide) as GEMMs batched over the expert dim (no biases, as in Switch
    and Mixtral), and the combine weighted by the gates (softmax or sigmoid scores,
    `_gate_attrs`), plus the shared experts' output, then the residual."""
    a = norm(g, x, f"{p}.ln2", d, "ln2")
    fe = d.expert_ffn or d.ffn
    wg = g.tensor(f"{p}.router.w", [d.hidden, d.experts], "parameter")
    logits = g.op("Einsum", [a, wg], f"{p}.router", equation="bsh,he->bse", kernel="router")
    groups: dict[str, Any] = {} if d.route_groups <= 1 else {
        "groups": d.route_groups, "top_groups": d.route_top_groups, "score": d.score}
    route = g.op("MoeRoute", [logits], f"{p}.route", top_k=d.top_k, capacity=d.capacity,
                 kernel="moe_route", **groups)
    gates = g.op("MoeGateWeights", [logits, route], f"{p}.gate", kernel="moe_route",
                 **_gate_attrs(d))
    xe = g.op("MoeDispatch", [route, a], f"{p}.dispatch", experts=d.experts,
              capacity=d.capacity, kernel="moe_dispatch")
    w1 = g.tensor(f"{p}.experts.w1", [d.experts, d.hidden, fe], "parameter")
    u = g.op("Einsum", [xe, w1], f"{p}.efc1", equation="bech,ehf->becf", kernel="expert_fc1")
    if d.swiglu:
        w3 = g.tensor(f"{p}.experts.w3", [d.experts, d.hidden, fe], "parameter")
        up = g.op("Einsum", [xe, w3], f"{p}.efc3", equation="bech,ehf->becf",
                  kernel="expert_fc1")
        u = g.op("Mul", [g.op("SiLU", [u], f"{p}.eact", kernel="expert_act"), up],
                 f"{p}.eglu", kernel="expert_act")
    else:
        u = _activation(g, u, f"{p}.eact", "expert_act", d)
    w2 = g.tensor(f"{p}.experts.w2", [d.experts, fe, d.hidden], "parameter")
    y = g.op("Einsum", [u, w2], f"{p}.efc2", equation="becf,efh->bech", kernel="expert_fc2")
    y = g.op("MoeCombine", [route, gates, y], f"{p}.combine", kernel="moe_combine")
    if d.shared_ffn:
        y = g.op("Add", [y, _shared_experts(g, a, p, d)], f"{p}.sadd", kernel="moe_combine")
    y = dropout(g, y, f"{p}.fc2_drop", d, hash_seed(p, 3), "dropout_residual2")
    return g.op("Add", [x, y], f"{p}.res2", kernel="dropout_residual2")


def _identity(g: GraphBuilder, x: str, p: str, d: GptDims, k: LayerKind) -> str:
    """No block: the layer has no mixer (or no FFN)."""
    return x


# the block builders of a layer's kinds (`LayerKind.mixer`, `LayerKind.ffn`)
MIXERS: dict[str, Block] = {
    "attention": _attention, "none": _identity, "mamba": mamba_mixer, "mla": mla}
FFNS: dict[str, Block] = {
    "dense": _ffn, "moe": _moe_ffn, "none": _identity}


def _patch_stem(g: GraphBuilder, d: GptDims) -> str:
    """A vision transformer's embedding (Dosovitskiy et al. 2021, Eq. 1): the patch
    embedding as a stride-p convolution (with its bias, timm's PatchEmbed), the learned
    class token put first; the caller adds the learned positions."""
    if d.seq != (d.image // d.patch) ** 2 + 1:
        raise ValueError(f"a {d.image}-pixel image of {d.patch}-pixel patches makes "
                         f"{(d.image // d.patch) ** 2} + 1 tokens, not seq={d.seq}")
    pixels = g.tensor("pixels", [d.batch, d.channels, d.image, d.image], "input")
    w = g.tensor("w_patch", [d.hidden, d.channels, d.patch, d.patch], "parameter")
    x = g.op("PatchEmbed", [pixels, w], "embed_patch", kernel="patch_embed")
    if d.bias:
        b = g.tensor("embed_patch.bias", [d.hidden], "parameter")
        x = g.op("Add", [x, b], "embed_patch_bias", kernel="patch_embed")
    return g.op("ClassToken", [x, g.tensor("cls", [d.hidden], "parameter")], "embed_cls",
                kernel="class_token")


def build_gpt(d: GptDims) -> Graph:
    """Embedding (+ learned positions, `d.position`), `layers` pre-norm blocks (rotary
    positions on queries and keys with `d.position` 'rope'), final norm (LayerNorm, or
    RMSNorm with `d.rms`), LM head (tied to the embedding unless `d.tied` is false), mean
    cross-entropy. Op names carry their role
    (`l0.q`); `kernel` attrs name the fused kernels a Megatron-style stack runs.

    With `d.patch` a vision transformer (ViT, Dosovitskiy et al. 2021, Eq. 1-4): the patch
    stem (`_patch_stem`) in place of the token lookup, encoder blocks (bidirectional
    attention without `d.causal`), and the class-token head: the final LN (on every token,
    as timm's VisionTransformer), the class token selected, a linear layer to `d.vocab`
    classes (no bias: d.vocab parameters fewer than timm's) and the cross-entropy over one
    label per image."""
    g = GraphBuilder()
    vision = d.patch > 0
    if vision:
        labels = g.tensor("labels", [d.batch], "label")
        x = _patch_stem(g, d)
    else:
        ids = g.tensor("ids", [d.batch, d.seq], "input")
        labels = g.tensor("labels", [d.batch, d.seq], "label")
        wte = g.tensor("wte", [d.vocab, d.hidden], "parameter")
        x = g.op("Gather", [wte, ids], "embed", kernel="embed_lookup")
    if vision or d.position == "learned":
        x = g.op("Add", [x, g.tensor("wpe", [d.seq, d.hidden], "parameter")], "embed_pos",
                 kernel="embed_dropout")
    elif d.dropout == 0.0:
        # no position table and no dropout: the embedding's output as Megatron's embedding
        # module returns it, its tensor-parallel reduction (a reduce-scatter to the sequence
        # under sequence parallel) inside the embedding (VocabParallelEmbedding), not in the
        # first layer
        x = g.op("Scale", [x], "embed_out", factor=1.0, kernel="embed_dropout")
    x = dropout(g, x, "embed_drop", d, hash_seed("embed", 0), "embed_dropout")
    for layer in range(d.layers):
        k = d.kind(layer)
        x = MIXERS[k.mixer](g, x, f"l{layer}", d, k)
        x = FFNS[k.ffn](g, x, f"l{layer}", d, k)
    x = norm(g, x, "lnf", d, "ln_final")
    if vision:
        x = g.op("SelectToken", [x], "head_cls", index=0, kernel="class_select")
        w = g.tensor("w_head", [d.vocab, d.hidden], "parameter")
        logits = g.op("Einsum", [x, w], "head", equation="bh,vh->bv", kernel="lm_head")
        ce = g.op("SoftmaxCrossEntropy", [logits, labels], "ce", kernel="cross_entropy")
        g.op("ReduceMean", [ce], "loss", axes=[0], kernel="loss")
        return g.build()
    w = wte if d.tied else g.tensor("w_head", [d.vocab, d.hidden], "parameter")
    logits = g.op("Einsum", [x, w], "head", equation="bsh,vh->bsv", kernel="lm_head")
    ce = g.op("SoftmaxCrossEntropy", [logits, labels], "ce", kernel="cross_entropy")
    loss = g.op("ReduceMean", [ce], "loss", axes=[0, 1], kernel="loss")
    if d.mtp_depth:
        last = d.kind(d.layers - 1)
        mtp_loss(g, x, loss, d, wte, w, lambda g, x, p: FFNS[last.ffn](
            g, MIXERS[last.mixer](g, x, p, d, last), p, d, last))
    return g.build()


def build_mlp(batch: int, layers: int, hidden: int, inputs: int, classes: int,
              activation: str = "relu") -> Graph:
    """x [batch, inputs] -> (MatMul, act) x layers -> MatMul to classes -> mean CE."""
    g = GraphBuilder()
    x = g.tensor("x", [batch, inputs], "input")
    labels = g.tensor("labels", [batch], "label")
    width = inputs
    for i in range(layers):
        w = g.tensor(f"fc{i}.w", [width, hidden], "parameter")
        x = g.op("MatMul", [x, w], f"fc{i}")
        x = g.op("ReLU" if activation == "relu" else "GeLU", [x], f"act{i}")
        width = hidden
    logits = g.op("MatMul", [x, g.tensor("out.w", [width, classes], "parameter")], "out")
    g.op("ReduceMean", [g.op("SoftmaxCrossEntropy", [logits, labels], "ce")], "loss")
    return g.build()


def build_resnet(batch: int, in_ch: int, channels: int, size: int, kernel: int,
                 conv_layers: int, fc_layers: int, hidden: int, classes: int) -> Graph:
    """Conv2D+ReLU blocks with residual adds (after the first), flatten, FC layers, CE."""
    g = GraphBuilder()
    x = g.tensor("x", [batch, in_ch, size, size], "input")
    labels = g.tensor("labels", [batch], "label")
    ch = in_ch
    for i in range(conv_layers):
        w = g.tensor(f"conv{i}.w", [channels, ch, kernel, kernel], "parameter")
        y = g.op("ReLU", [g.op("Conv2D", [x, w], f"conv{i}")], f"relu{i}")
        x = g.op("Add", [x, y], f"res{i}") if ch == channels else y
        ch = channels
    x = g.op("Reshape", [x], "flatten", shape=[batch, ch * size * size])
    width = ch * size * size
    for i in range(fc_layers):
        out = classes if i == fc_layers - 1 else hidden
        x = g.op("MatMul", [x, g.tensor(f"fc{i}.w", [width, out], "parameter")], f"fc{i}")
        if i < fc_layers - 1:
            x = g.op("ReLU", [x], f"fc_relu{i}")
        width = out
    g.op("ReduceMean", [g.op("SoftmaxCrossEntropy", [x, labels], "ce")], "loss")
    return g.build()
