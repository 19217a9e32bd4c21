"""Multi-token prediction (MTP; DeepSeek-V3 Sec. 2.2, Fig. 3, Eq. 21-25): `d.mtp_depth`
sequential modules after the main model's last layer, each predicting one token further.

Module k (1..D), for the hidden states h^(k-1) of the previous depth and the tokens k ahead
t_(i+k) (h^0: the main model's output after its final norm, as Megatron-Core's GPTModel
hands the decoder's output, final layernorm included, to its MTP block; each module's
output is its own final norm's, megatron/core/transformer/multi_token_prediction.py):
- h' = [RMSNorm(h^(k-1)); RMSNorm(Emb(t_(i+k)))] M_k, M_k [2h, h] (Eq. 21; Megatron-Core
  `MultiTokenPredictionLayer`: hnorm, enorm, eh_proj, megatron/core/transformer/
  multi_token_prediction.py; the concatenation's order does not change the cost);
- h^k = TRM_k(h'): one transformer layer of the model's last layer's kind (Eq. 22);
- P^k = OutHead(h^k): the LM head SHARED with the main model (Eq. 23), as is the
  embedding table, on the module's final norm;
- L^k: the cross-entropy against the tokens k + 1 ahead (Eq. 24).
The loss is the main model's plus lambda / D * sum_k L^k (Eq. 25; Megatron-Core
`--mtp-loss-scaling-factor`, divided by `--mtp-num-layers`).

The shifted tokens and labels are inputs of their own (`mtp{k}.ids`, `mtp{k}.labels`):
Megatron-Core rolls the micro-batch's tokens on the device (`roll_tensor`), which costs no
kernel of note; the last k positions, which have no token k ahead, are masked there and
counted here (k of seq tokens). Every op is named `mtp{k}.*`: a transformer's head ops,
which the pipeline places on the last stage, as Megatron-Core does (`mtp_on_this_rank`:
without a custom layout, every MTP layer on the last pipeline stage).
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.graph.decoder import GptDims, norm
from simulator.graph.graph import GraphBuilder

__all__ = ["mtp_loss"]

# one transformer layer: (graph, input, name prefix) -> output
Layer = Callable[[GraphBuilder, str, str], str]


def _module(g: GraphBuilder, h: str, k: int, d: GptDims, wte: str, w_head: str,
            layer: Layer) -> tuple[str, str]:
    """(h^k after the module's final norm, L^k) of module k."""
    p = f"mtp{k}"
    ids = g.tensor(f"{p}.ids", [d.batch, d.seq], "input")
    labels = g.tensor(f"{p}.labels", [d.batch, d.seq], "label")
    e = g.op("Gather", [wte, ids], f"{p}.embed", kernel="embed_lookup")
    en = g.op("RMSNorm", [e, g.tensor(f"{p}.enorm.g", [d.hidden], "parameter")],
              f"{p}.enorm", kernel="mtp_norm")
    hn = g.op("RMSNorm", [h, g.tensor(f"{p}.hnorm.g", [d.hidden], "parameter")],
              f"{p}.hnorm", kernel="mtp_norm")
    c = g.op("ConcatLast", [en, hn], f"{p}.eh_cat", kernel="mtp_norm")
    w = g.tensor(f"{p}.eh_proj.w", [2 * d.hidden, d.hidden], "parameter")
    x = g.op("Einsum", [c, w], f"{p}.eh_proj", equation="bsc,ch->bsh", kernel="mtp_proj")
    x = layer(g, x, p)
    y = norm(g, x, f"{p}.lnf", d, "ln_final")  # the model's norm
    logits = g.op("Einsum", [y, w_head], f"{p}.head", equation="bsh,vh->bsv",
                  kernel="lm_head")
    ce = g.op("SoftmaxCrossEntropy", [logits, labels], f"{p}.ce", kernel="cross_entropy")
    return y, g.op("ReduceMean", [ce], f"{p}.loss", axes=[0, 1], kernel="loss")


def mtp_loss(g: GraphBuilder, h: str, loss: str, d: GptDims, wte: str, w_head: str,
             layer: Layer) -> str:
    """The D modules after the main model's final-norm output `h`, and the total loss:
    `loss` + mtp_weight / D * the sum of theirs."""
    total = ""
    for k in range(1, d.mtp_depth + 1):
        h, lk = _module(g, h, k, d, wte, w_head, layer)
        total = lk if k == 1 else g.op("Add", [total, lk], f"mtp{k}.mtp_sum", kernel="loss")
    scaled = g.op("Scale", [total], "mtp_scale", factor=d.mtp_weight / d.mtp_depth,
                  kernel="loss")
    return g.op("Add", [loss, scaled], "loss_mtp", kernel="loss")
