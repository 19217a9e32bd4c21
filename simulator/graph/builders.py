"""Model builders: a GPT-style decoder, an MLP, a ResNet-like conv net, each as a Graph of
logical operators for ONE micro-batch. Op names carry their role (`l0.q`, `l1.fc2`), which
sharding plans key on.

Attention is written with explicit head dims (einsum), grouped-query style: the weights are
[h, g, r, d] for queries and [h, g, d] for keys and values, g key/value groups of r query
heads each (r = 1 is ordinary multi-head attention), so heads split by splitting g.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.graph.graph import Graph, GraphBuilder

__all__ = ["GptDims", "build_gpt", "build_mlp", "build_resnet"]


@dataclass(frozen=True)
class GptDims:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    seq: int
    vocab: int
    batch: int
    swiglu: bool = False
    dropout: float = 0.1

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _attention(g: GraphBuilder, x: str, p: str, d: GptDims) -> str:
    grp, r, hd = d.kv_heads, d.heads // d.kv_heads, d.head_dim
    a = g.op("LayerNorm", [x, g.tensor(f"{p}.ln1.g", [d.hidden], "parameter"),
                           g.tensor(f"{p}.ln1.b", [d.hidden], "parameter")], f"{p}.ln1")
    wq = g.tensor(f"{p}.wq", [d.hidden, grp, r, hd], "parameter")
    wk = g.tensor(f"{p}.wk", [d.hidden, grp, hd], "parameter")
    wv = g.tensor(f"{p}.wv", [d.hidden, grp, hd], "parameter")
    q = g.op("Einsum", [a, wq], f"{p}.q", equation="bsh,hgrd->bsgrd")
    k = g.op("Einsum", [a, wk], f"{p}.k", equation="bsh,hgd->bsgd")
    v = g.op("Einsum", [a, wv], f"{p}.v", equation="bsh,hgd->bsgd")
    sc = g.op("Einsum", [q, k], f"{p}.scores", equation="bsgrd,btgd->bgrst")
    sc = g.op("Scale", [sc], f"{p}.scale", factor=1.0 / math.sqrt(hd))
    sc = g.op("CausalMask", [sc], f"{p}.mask")
    pr = g.op("Softmax", [sc], f"{p}.softmax", axis=-1)
    pr = g.op("Dropout", [pr], f"{p}.attn_drop", p=d.dropout, seed=hash_seed(p, 1))
    c = g.op("Einsum", [pr, v], f"{p}.context", equation="bgrst,btgd->bsgrd")
    wo = g.tensor(f"{p}.wo", [grp, r, hd, d.hidden], "parameter")
    o = g.op("Einsum", [c, wo], f"{p}.proj", equation="bsgrd,grdh->bsh")
    o = g.op("Dropout", [o], f"{p}.proj_drop", p=d.dropout, seed=hash_seed(p, 2))
    return g.op("Add", [x, o], f"{p}.res1")


def _ffn(g: GraphBuilder, x: str, p: str, d: GptDims) -> str:
    a = g.op("LayerNorm", [x, g.tensor(f"{p}.ln2.g", [d.hidden], "parameter"),
                           g.tensor(f"{p}.ln2.b", [d.hidden], "parameter")], f"{p}.ln2")
    w1 = g.tensor(f"{p}.w1", [d.hidden, d.ffn], "parameter")
    u = g.op("Einsum", [a, w1], f"{p}.fc1", equation="bsh,hf->bsf")
    if d.swiglu:
        w3 = g.tensor(f"{p}.w3", [d.hidden, d.ffn], "parameter")
        gate = g.op("Einsum", [a, w3], f"{p}.fc3", equation="bsh,hf->bsf")
        u = g.op("Mul", [g.op("SiLU", [u], f"{p}.act"), gate], f"{p}.glu")
    else:
        u = g.op("GeLU", [u], f"{p}.act")
    w2 = g.tensor(f"{p}.w2", [d.ffn, d.hidden], "parameter")
    y = g.op("Einsum", [u, w2], f"{p}.fc2", equation="bsf,fh->bsh")
    y = g.op("Dropout", [y], f"{p}.fc2_drop", p=d.dropout, seed=hash_seed(p, 3))
    return g.op("Add", [x, y], f"{p}.res2")


def hash_seed(prefix: str, k: int) -> int:
    """A seed that depends only on the op's name (deterministic across runs and ranks)."""
    return (sum(ord(c) * (i + 1) for i, c in enumerate(prefix)) * 31 + k) % (2**31)


def build_gpt(d: GptDims) -> Graph:
    """Embedding (+ learned positions), `layers` pre-LN blocks, final LN, LM head, mean CE."""
    g = GraphBuilder()
    ids = g.tensor("ids", [d.batch, d.seq], "input")
    labels = g.tensor("labels", [d.batch, d.seq], "label")
    x = g.op("Gather", [g.tensor("wte", [d.vocab, d.hidden], "parameter"), ids], "embed")
    x = g.op("Add", [x, g.tensor("wpe", [d.seq, d.hidden], "parameter")], "embed_pos")
    x = g.op("Dropout", [x], "embed_drop", p=d.dropout, seed=hash_seed("embed", 0))
    for layer in range(d.layers):
        x = _ffn(g, _attention(g, x, f"l{layer}", d), f"l{layer}", d)
    x = g.op("LayerNorm", [x, g.tensor("lnf.g", [d.hidden], "parameter"),
                           g.tensor("lnf.b", [d.hidden], "parameter")], "lnf")
    logits = g.op("Einsum", [x, g.tensor("w_head", [d.hidden, d.vocab], "parameter")],
                  "head", equation="bsh,hv->bsv")
    ce = g.op("SoftmaxCrossEntropy", [logits, labels], "ce")
    g.op("ReduceMean", [ce], "loss", axes=[0, 1])
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
