"""Multi-head latent attention (MLA; DeepSeek-V2, Sec. 2.1, Eq. 9-19; DeepSeek-V3 Sec. 2.1,
Eq. 1-11), the 'mla' mixer of `graph.builders.MIXERS`.

For the normed input h_t of a layer (n heads, model width d):
- key/value latent c_KV = RMSNorm(h W_DKV), W_DKV [d, kv_lora_rank] (Eq. 1, the only
  key/value state an inference cache keeps), and from it the per-head keys without position
  k_C = c_KV W_UK [kv_lora_rank, n, qk_nope_head_dim] and values v = c_KV W_UV
  [kv_lora_rank, n, v_head_dim] (Eq. 2, 5);
- one rotary key k_R = RoPE(h W_KR), W_KR [d, qk_rope_head_dim], shared by every head (Eq.
  3), concatenated to each head's k_C (Eq. 4);
- query latent c_Q = RMSNorm(h W_DQ), W_DQ [d, q_lora_rank] (Eq. 6; without q_lora_rank
  the queries project h directly, as DeepSeek-V2-Lite), per-head q_C = c_Q W_UQ and q_R =
  RoPE(c_Q W_QR) (Eq. 7, 8), concatenated (Eq. 9);
- softmax(q k^T / sqrt(qk_nope_head_dim + qk_rope_head_dim)) v per head (Eq. 10), the
  output projection W_O [n, v_head_dim, d] (Eq. 11).

The latent RMSNorms are the paper's "additional RMSNorm layers after the compressed latent
vectors" (DeepSeek-V2 Sec. 3.1.2; Megatron-Core's q_layernorm / kv_layernorm). The softmax
scale leaves out YaRN's mscale^2 (a context-extension factor, DeepSeek-V2 App. B): no cost.

Heads are the `g` dim of the grouped layout of `graph.builders` (r = 1 query head per key
group), so the tensor-parallel plan splits them on the same labels as attention's.
"""

from __future__ import annotations

import math

from simulator.graph.decoder import (
    GptDims,
    LayerKind,
    bias_dropout_add,
    dropout,
    hash_seed,
    norm,
)
from simulator.graph.graph import GraphBuilder

__all__ = ["mla", "mla_core"]


def _param(g: GraphBuilder, name: str, shape: list[int]) -> str:
    return g.tensor(name, shape, "parameter")


def _latent(g: GraphBuilder, a: str, p: str, d: GptDims, role: str, rank: int) -> str:
    """RMSNorm(a W_D): a down-projection to a latent of `rank` and its norm."""
    c = g.op("Einsum", [a, _param(g, f"{p}.w_{role}_down", [d.hidden, rank])],
             f"{p}.{role}_down", equation="bsh,hc->bsc", kernel=f"{role}_down")
    return g.op("RMSNorm", [c, _param(g, f"{p}.{role}_norm.g", [rank])], f"{p}.{role}_norm",
                kernel=f"{role}_norm")


def _queries(g: GraphBuilder, a: str, p: str, d: GptDims) -> str:
    """[b, s, n, 1, nope + rope]: each head's query, its rotary part rotated (Eq. 6-9)."""
    n, dn, dr = d.heads, d.qk_nope_head_dim, d.qk_rope_head_dim
    src, width = a, d.hidden
    if d.q_lora_rank:
        src, width = _latent(g, a, p, d, "q", d.q_lora_rank), d.q_lora_rank
    qc = g.op("Einsum", [src, _param(g, f"{p}.w_q_nope", [width, n, 1, dn])], f"{p}.q_nope",
              equation="bsc,cgrd->bsgrd", kernel="q_up")
    qr = g.op("Einsum", [src, _param(g, f"{p}.w_q_rope", [width, n, 1, dr])],
              f"{p}.q_rope_mm", equation="bsc,cgrd->bsgrd", kernel="q_up")
    qr = g.op("Rotary", [qr], f"{p}.q_rope", kernel="rope")
    return g.op("ConcatLast", [qc, qr], f"{p}.q_cat", kernel="rope")


def _keys_values(g: GraphBuilder, a: str, p: str, d: GptDims) -> tuple[str, str]:
    """([b, t, n, nope + rope] keys, [b, t, n, v_head_dim] values) from the key/value
    latent and the shared rotary key (Eq. 1-5)."""
    n, dn, dr = d.heads, d.qk_nope_head_dim, d.qk_rope_head_dim
    kr = g.op("Einsum", [a, _param(g, f"{p}.w_k_rope", [d.hidden, dr])], f"{p}.k_rope_mm",
              equation="bsh,hd->bsd", kernel="kv_down")
    kr = g.op("Rotary", [kr], f"{p}.k_rope", kernel="rope")
    c = _latent(g, a, p, d, "kv", d.kv_lora_rank)
    kc = g.op("Einsum", [c, _param(g, f"{p}.w_k_nope", [d.kv_lora_rank, n, dn])],
              f"{p}.k_nope", equation="bsc,cgd->bsgd", kernel="kv_up")
    v = g.op("Einsum", [c, _param(g, f"{p}.w_v_up", [d.kv_lora_rank, n, d.v_head_dim])],
             f"{p}.v_up", equation="bsc,cgd->bsgd", kernel="kv_up")
    return g.op("ConcatLast", [kc, kr], f"{p}.k_cat", kernel="rope"), v


def mla_core(g: GraphBuilder, q: str, k: str, v: str, p: str, d: GptDims) -> str:
    """Scores, scaled-masked softmax, dropout, context at MLA's softmax scale (the key
    width nope + rope, not hidden / heads): one FlashAttention kernel with `d.flash` (its
    values narrower than its keys), else Megatron's unfused chain, under the op names and
    kernels of `graph.builders._attention_core`."""
    scale = 1.0 / math.sqrt(d.qk_nope_head_dim + d.qk_rope_head_dim)
    if d.flash:
        return g.op("FusedAttention", [q, k, v], f"{p}.attn", p=d.dropout,
                    seed=hash_seed(p, 1), scale=scale, kernel="flash_attention")
    sc = g.op("Einsum", [q, k], f"{p}.scores", equation="bsgrd,btgd->bgrst", kernel="scores")
    sc = g.op("Scale", [sc], f"{p}.scale", factor=scale, kernel="softmax")
    sc = g.op("CausalMask", [sc], f"{p}.mask", kernel="softmax")
    pr = g.op("Softmax", [sc], f"{p}.softmax", axis=-1, kernel="softmax")
    pr = dropout(g, pr, f"{p}.attn_drop", d, hash_seed(p, 1), "attn_dropout")
    return g.op("Einsum", [pr, v], f"{p}.context", equation="bgrst,btgd->bsgrd",
                kernel="context")


def mla(g: GraphBuilder, x: str, p: str, d: GptDims, k: LayerKind) -> str:
    """The layer's norm, multi-head latent attention, the output projection and the
    residual (the block builder registered as MIXERS['mla'])."""
    a = norm(g, x, f"{p}.ln1", d, "ln1")  # the model's norm (RMSNorm in DeepSeek-V3)
    q = _queries(g, a, p, d)
    key, v = _keys_values(g, a, p, d)
    c = mla_core(g, q, key, v, p, d)
    wo = _param(g, f"{p}.wo", [d.heads, 1, d.v_head_dim, d.hidden])
    o = g.op("Einsum", [c, wo], f"{p}.proj", equation="bsgrd,grdh->bsh", kernel="proj")
    return bias_dropout_add(g, o, x, p, "proj", d, 1)
