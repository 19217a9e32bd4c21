"""The Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", arXiv:2405.21060, Sec. 7 and
Fig. 6: the "parallel" Mamba-2 block), as a decoder layer's token mixer (`LayerKind.mixer`
'mamba', registered in `graph.builders.MIXERS`): Nemotron-H's 'M' layers
(arXiv:2504.03624, Sec. 2.1; NemotronHMamba2Mixer in transformers, MambaMixer in
megatron/core/ssm/mamba_mixer.py).

    a = norm(x)                                        (the layer's pre-norm, `ln1`)
    z, x', B, C, dt = a W_z, a W_x, a W_B, a W_C, a W_dt   (in_proj, one GEMM: `ssm_in_proj`)
    x', B, C = silu(causal depthwise conv1d(x', B, C))  (`ssm_conv`, kernel d_conv)
    y = SSD(x', dt, A, B, C) + D x'                     (`scan`: ops/ssm.py SsdScan)
    y = rmsnorm_per_group(y * silu(z)) * w              (`ssm_norm`: GatedRMSNorm)
    out = x + dropout(y W_out)                           (out_proj `proj`, the residual)

Shapes follow the grouped layout of the attention (`graph.builders`): the d_inner = H * p
channels are [g, r, p] (g groups of r = H / g heads of head dim p), B and C [g, n], dt and
the per-head A_log, D, dt_bias [g, r]. The in-projection's five outputs are five weights
(Megatron-Core's one in_proj matrix cut along its output dim); the convolution over the
concatenated x, B, C channels is three convolutions of one kernel. Tensor parallel splits
g (heads and groups alike: Megatron-Core asserts nheads and ngroups divisible by the
tensor-parallel size, in_proj column-parallel, conv1d, A_log, D, dt_bias and the norm
split with their heads, out_proj row-parallel and its output all-reduced), so every op
between the two projections is local, as in attention. No biases on the projections
(Megatron-Core's and Nemotron-H's `use_bias: false`); the convolution has one
(`use_conv_bias: true`)."""

from __future__ import annotations

from simulator.graph.decoder import GptDims, LayerKind, dropout, hash_seed, norm
from simulator.graph.graph import GraphBuilder

__all__ = ["mamba_mixer"]


def _in_proj(g: GraphBuilder, a: str, p: str, d: GptDims) -> dict[str, str]:
    """z, x, B, C, dt: the column-parallel in-projection, one fused GEMM kernel."""
    grp, r, hd, n = d.mamba_groups, d.mamba_heads // d.mamba_groups, d.mamba_head_dim, \
        d.mamba_state
    outs = {"z": ([grp, r, hd], "hgrp", "bsgrp"), "x": ([grp, r, hd], "hgrp", "bsgrp"),
            "b": ([grp, n], "hgn", "bsgn"), "c": ([grp, n], "hgn", "bsgn"),
            "dt": ([grp, r], "hgr", "bsgr")}
    made = {}
    for key, (shape, w_sub, out_sub) in outs.items():
        w = g.tensor(f"{p}.ssm.w{key}", [d.hidden, *shape], "parameter")
        made[key] = g.op("Einsum", [a, w], f"{p}.ssm_{key}", equation=f"bsh,{w_sub}->{out_sub}",
                         kernel="ssm_in_proj")
    return made


def _conv(g: GraphBuilder, t: str, key: str, chans: list[int], p: str, d: GptDims) -> str:
    """The causal depthwise convolution of one of x, B, C with its bias, then SiLU."""
    w = g.tensor(f"{p}.conv_{key}.w", [*chans, d.mamba_conv], "parameter")
    b = g.tensor(f"{p}.conv_{key}.b", chans, "parameter")
    y = g.op("CausalConv1d", [t, w, b], f"{p}.conv_{key}", kernel="ssm_conv")
    return g.op("SiLU", [y], f"{p}.conv_{key}_act", kernel="ssm_conv")


def mamba_mixer(g: GraphBuilder, x: str, p: str, d: GptDims, k: LayerKind) -> str:
    """One Mamba-2 mixer with its pre-norm and residual (a `Block`)."""
    grp, r, hd, n = d.mamba_groups, d.mamba_heads // d.mamba_groups, d.mamba_head_dim, \
        d.mamba_state
    a = norm(g, x, f"{p}.ln1", d, "ln1")  # the model's norm
    t = _in_proj(g, a, p, d)
    xs = _conv(g, t["x"], "x", [grp, r, hd], p, d)
    bs = _conv(g, t["b"], "b", [grp, n], p, d)
    cs = _conv(g, t["c"], "c", [grp, n], p, d)
    heads = {name: g.tensor(f"{p}.ssm.{name}", [grp, r], "parameter")
             for name in ("A_log", "D", "dt_bias")}
    y = g.op("SsdScan", [xs, t["dt"], heads["A_log"], bs, cs, heads["D"], heads["dt_bias"]],
             f"{p}.scan", chunk=d.mamba_chunk, kernel="ssm_scan")
    y = g.op("GatedRMSNorm", [y, t["z"], g.tensor(f"{p}.ssm_norm.w", [grp, r, hd],
                                                  "parameter")],
             f"{p}.ssm_norm", kernel="ssm_norm")
    wo = g.tensor(f"{p}.ssm.wo", [grp, r, hd, d.hidden], "parameter")
    o = g.op("Einsum", [y, wo], f"{p}.proj", equation="bsgrp,grph->bsh", kernel="proj")
    o = dropout(g, o, f"{p}.proj_drop", d, hash_seed(p, 2), "dropout_residual1")
    return g.op("Add", [x, o], f"{p}.res1", kernel="dropout_residual1")
