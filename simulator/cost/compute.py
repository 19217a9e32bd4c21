"""Time of one kernel on one device: a roofline with physically modelled efficiency.

    t = max(flops / (peak(dtype) * eta_compute), bytes_accessed / (B_hbm * eta_mem)) + t_launch

(Williams, Waterman & Patterson 2009, "Roofline", CACM 52(4), Eq. 1, with the two roofs
derated to what kernels reach.) Every parameter lives in the profile's `efficiency:` block.

GEMMs (`kind='gemm'`, local shape batch x (m x k) @ (k x n)) are tiled: each thread block
(NVIDIA SM, Ascend AI core) computes one `tm x tn` output tile, looping over k. Their
compute efficiency is the product of

- `gemm_peak_fraction`: what the best-shaped large GEMM reaches (the measured maximum
  achievable matmul FLOP/s over the datasheet peak; `gemm_peak_fraction_fp8` for FP8 inputs,
  which reach a lower share of their doubled peak, `gemm_peak_fraction_fp4` for FP4);
- tile padding: m*n over the padded ceil(m/tm)*tm * ceil(n/tn)*tn;
- wave quantization: tiles / (waves * compute_units), waves = ceil(tiles / compute_units)
  (NVIDIA, "Matrix Multiplication Background User's Guide", sections on tile and wave
  quantization);
- the k loop: k / (k + gemm_k_half), the fixed per-tile prologue (pipeline fill) and
  epilogue (writing C) amortised over the k loop, which a small k cannot hide;
- tile reuse: a smaller tile re-reads its operands more often, 2*tm*tn/((tm+tn)*bytes)
  FLOP per byte of on-chip (L2) traffic; below the L2 balance point peak/B_L2 the tile is
  L2-bandwidth bound (only when the profile gives `l2_bandwidth_GBps`).

The kernel library picks the tile: we take the best of tm x tn, halved down to 16 x 16.
Memory-bound GEMMs (small k, skinny m) fall on the memory roof through `bytes_accessed`.

Non-GEMM kinds are memory-bound kernels: their FLOPs run on the vector units
(`vector_flops_per_s * vector_peak_fraction`) and their bytes at `memory_bandwidth_fraction`
of HBM bandwidth, or at the profile's measured fraction for their kind
(`kernel_bandwidth_fractions`: a fused AdamW step or a softmax reaches less than a copy).
`attention` (a fused FlashAttention-style kernel) is compute-bound at
the fraction of the matrix peak its implementation reaches (`attention_fraction`), quoted
at 2048 keys and scaled with the kernel's key length (`attention_seq_factor`; under a
sliding window, with the window and the query length: `window_share`).
"""

from __future__ import annotations

import math
from functools import lru_cache

from simulator.config.hardware.schema import HardwareProfile
from simulator.cost.specs import ComputeSpec

__all__ = ["compute_time_s", "gemm_efficiency", "compute_efficiency", "attention_fraction",
           "attention_seq_factor", "window_share", "attention_head_factor", "bandwidth_fraction",
           "DTYPE_BYTES"]

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1,
                                  "fp4": 0.5}
ATTENTION_QUOTED_SEQ = 2048  # the key length the attention fractions are quoted at
ATTENTION_QUOTED_HEAD_DIM = 128  # the head width they are quoted at
# the query tile of a fused attention kernel, the keys a windowed row's tile runs over beyond
# its window (FlashAttention-3, Dao-AILab/flash-attention hopper/tile_size.h
# `tile_size_fwd_sm90`: 128 x 128 at head dim 128, causal or local; cuDNN's tiles ASSUMED alike)
ATTENTION_TILE = 128
_MIN_TILE = 16  # the smallest MMA tile edge (16x8x16 mma.sync on Ampere/Hopper; 16^3 cube)


def _tile_efficiency(m: int, n: int, k: int, batch: int, tm: int, tn: int,
                     hw: HardwareProfile, dtype: str) -> float:
    """Fraction of `gemm_peak_fraction` one tile shape reaches (see the module docstring)."""
    eff = hw.efficiency
    tiles_m, tiles_n = math.ceil(m / tm), math.ceil(n / tn)
    tiles = batch * tiles_m * tiles_n
    waves = math.ceil(tiles / hw.compute_units)
    wave = tiles / (waves * hw.compute_units)
    padding = (m * n) / (tiles_m * tm * tiles_n * tn)
    k_loop = k / (k + eff.gemm_k_half)
    reuse = 1.0
    if hw.l2_bandwidth_GBps is not None:
        tile_intensity = 2 * tm * tn / ((tm + tn) * DTYPE_BYTES.get(dtype, 2))
        balance = hw.peak_flops_per_s(dtype) / (hw.l2_bandwidth_GBps * 1e9)
        reuse = min(1.0, tile_intensity / balance)
    return wave * padding * k_loop * reuse


@lru_cache(maxsize=65536)
def gemm_efficiency(mnk: tuple[int, int, int], batch: int, dtype: str,
                    hw: HardwareProfile) -> float:
    """Fraction of the `dtype` peak a GEMM of local shape batch x (m,k)@(k,n) reaches, in
    (0, gemm_peak_fraction]: the best over tile shapes tm x tn (halving from the profile's
    `gemm_tile_mn` down to 16)."""
    m, n, k = mnk
    tm_max, tn_max = hw.efficiency.gemm_tile_mn
    best = 0.0
    tm = tm_max
    while True:
        tn = tn_max
        while True:
            best = max(best, _tile_efficiency(m, n, k, batch, tm, tn, hw, dtype))
            if tn <= _MIN_TILE:
                break
            tn = max(_MIN_TILE, tn // 2)
        if tm <= _MIN_TILE:
            break
        tm = max(_MIN_TILE, tm // 2)
    return peak_fraction(dtype, hw) * best


def peak_fraction(dtype: str, hw: HardwareProfile) -> float:
    """`gemm_peak_fraction`, or for FP8 / FP4 `gemm_peak_fraction_fp8` /
    `gemm_peak_fraction_fp4` where the profile gives it."""
    eff = hw.efficiency
    if dtype == "fp8" and eff.gemm_peak_fraction_fp8 is not None:
        return eff.gemm_peak_fraction_fp8
    if dtype == "fp4" and eff.gemm_peak_fraction_fp4 is not None:
        return eff.gemm_peak_fraction_fp4
    return eff.gemm_peak_fraction


def compute_efficiency(spec: ComputeSpec, hw: HardwareProfile) -> tuple[float, float]:
    """(FLOP/s, bytes/s) the kernel reaches on the compute and memory roofs. The compute
    roof is scaled by `sustained_compute_fraction` (clocks under a sustained training load)."""
    eff = hw.efficiency
    mem = hw.memory_bandwidth_bytes_per_s * bandwidth_fraction(spec.kind, hw)
    sustained = eff.sustained_compute_fraction
    if spec.kind == "gemm":
        mnk = spec.gemm_mnk or _square(spec.flops, spec.gemm_batch)
        fraction = gemm_efficiency(tuple(int(x) for x in mnk), max(1, spec.gemm_batch),
                                   spec.dtype, hw)
        if spec.grouped:
            fraction *= eff.grouped_gemm_fraction
        return hw.peak_flops_per_s(spec.dtype) * fraction * sustained, mem
    if spec.kind == "attention":
        return (hw.peak_flops_per_s(spec.dtype) * attention_fraction(spec, hw)
                * attention_seq_factor(spec.seq, eff.attention_seq_half, spec.window)
                * attention_head_factor(spec, hw) * sustained, mem)
    return hw.vector_flops_per_s * eff.vector_peak_fraction * sustained, mem


def bandwidth_fraction(kind: str, hw: HardwareProfile) -> float:
    """Fraction of HBM bandwidth a kernel of `kind` reaches: the profile's measured figure
    for that kind (`kernel_bandwidth_fractions`) or `memory_bandwidth_fraction`."""
    eff = hw.efficiency
    by_kind = eff.kernel_bandwidth_fractions
    measured = getattr(by_kind, kind) if by_kind and kind in type(by_kind).model_fields else None
    return eff.memory_bandwidth_fraction if measured is None else measured


def attention_seq_factor(seq: int, half: float, window: int = 0) -> float:
    """How much faster (> 1) or slower a fused attention kernel runs over `seq` keys (under a
    sliding `window` shorter than them, see `window_share`) than at the 2048 its fraction is
    quoted at: its rate follows s / (s + half) (each query tile's prologue, epilogue and
    causal-diagonal work amortised over more key tiles; FlashAttention-3 paper Figs. 5-6).
    1 where either is unknown (0)."""
    if seq <= 0 or half <= 0:
        return 1.0
    q = ATTENTION_QUOTED_SEQ
    return window_share(seq, half, window) / (q / (q + half))


def window_share(seq: int, half: float, window: int = 0) -> float:
    """The share of its long-sequence rate a causal kernel reaches over `seq` keys, s / (s +
    half), or under a sliding window of w < s keys

        w / (w + tau + (half - tau) / 2 * s / (s - w / 2)),

    tau = ATTENTION_TILE. Read `half` as tiles: a causal kernel's row of query tiles j = 1..T
    runs j key tiles (the diagonal one half masked) plus a fixed cost of c tiles each, so the
    T^2/2 useful tiles cost T(T+1)/2 + cT and half = tau (1 + 2c). A windowed row of query
    tiles runs its w / tau tiles plus one more across the window's two masked edges, and the
    same fixed cost: a window is not a short causal sequence (at w = s the two agree).
    cuDNN 9.19-9.22 measured on GB200, GB300 and H200 (benchmarks/data/kernels/
    cudnn_sdpa_window.csv, docs/techniques/attention-variants.md) follows it."""
    if not 0 < window < seq:
        return seq / (seq + half)
    w, tau = float(window), float(ATTENTION_TILE)
    return w / (w + tau + (half - tau) / 2 * seq / (seq - w / 2))


def attention_head_factor(spec: ComputeSpec, hw: HardwareProfile) -> float:
    """How much slower (< 1) a fused attention kernel runs with heads narrower than the 128
    its fractions are quoted at: its rate follows 1 / (1 + half / d) in the head width d
    (each score's softmax work, the exponential among it, amortised over the d-wide dot
    products; FlashAttention-3 paper Figs. 5-6: cuDNN on H100 at 2048 keys reaches 334 of
    484 TFLOP/s causal forward and 395 of 465 backward at head dim 64), by implementation
    (`efficiency.attention_kernels.<impl>.head_dim_half`); 1 for d >= 128, for an unknown d
    (0) or where the profile has no figure for the kernel."""
    kernels = hw.efficiency.attention_kernels
    kernel = getattr(kernels, spec.impl, None) if spec.impl and kernels else None
    half = kernel.head_dim_half if kernel is not None else None
    d = spec.head_dim
    if half is None or d <= 0 or d >= ATTENTION_QUOTED_HEAD_DIM:
        return 1.0
    h = half.bwd if spec.phase == "bwd" else half.fwd
    return (1 + h / ATTENTION_QUOTED_HEAD_DIM) / (1 + h / d)


def attention_fraction(spec: ComputeSpec, hw: HardwareProfile) -> float:
    """Fraction of the matrix peak a fused attention kernel reaches: its implementation's
    forward or backward figure where the profile has one (`efficiency.attention_kernels`,
    e.g. FlashAttention-2 on Hopper at half of FlashAttention-3's rate), else
    `attention_peak_fraction`. A recomputed forward runs at the forward figure."""
    eff = hw.efficiency
    kernel = getattr(eff.attention_kernels, spec.impl, None) if spec.impl else None
    if kernel is None:
        return eff.attention_peak_fraction
    return kernel.bwd if spec.phase == "bwd" else kernel.fwd


def _square(flops: float, batch: int) -> tuple[int, int, int]:
    """A cube with the same FLOPs, for a GEMM given without its shape."""
    side = max(1, round((flops / (2 * max(1, batch))) ** (1 / 3)))
    return side, side, side


def compute_time_s(spec: ComputeSpec, hw: HardwareProfile) -> float:
    """Seconds for one kernel: max of the compute and memory roofs, plus launch overhead.

    A kernel with no FLOPs and no bytes costs nothing (not even a launch)."""
    if spec.flops <= 0 and spec.bytes_accessed <= 0:
        return 0.0
    flops_per_s, bytes_per_s = compute_efficiency(spec, hw)
    executed = spec.flops * spec.executed_fraction
    t_compute = executed / flops_per_s if executed > 0 else 0.0
    t_memory = spec.bytes_accessed / bytes_per_s if spec.bytes_accessed > 0 else 0.0
    return max(t_compute, t_memory) + hw.kernel_launch_s
