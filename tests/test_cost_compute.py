"""The compute roofline against its closed forms, and the GEMM efficiency model's shape."""

from __future__ import annotations

import pytest

from simulator.config.hardware import load_profile
from simulator.cost.compute import compute_time_s, gemm_efficiency
from simulator.cost.specs import ComputeSpec


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-80gb")


def test_memory_bound_kernel_equals_closed_form(a100):
    spec = ComputeSpec("gelu", "elementwise", flops=1e6, bytes_accessed=4e9, dtype="bf16")
    eff = a100.efficiency
    expected = 4e9 / (2039e9 * eff.memory_bandwidth_fraction) + a100.kernel_launch_us * 1e-6
    assert compute_time_s(spec, a100) == pytest.approx(expected, rel=1e-12)


def test_compute_bound_gemm_equals_closed_form(a100):
    m = n = k = 8192
    flops = 2 * m * n * k
    spec = ComputeSpec("mm", "gemm", flops=flops, bytes_accessed=3 * m * n * 2, dtype="bf16",
                       gemm_mnk=(m, n, k))
    # 8192/128 x 8192/256 = 2048 tiles on 108 SMs: 19 waves -> 2048/2052 of the last wave
    # used; no padding; k loop 8192/(8192+k_half); tile 128x256 is above the L2 balance;
    # all of it at the clock the A100 sustains under load.
    eff = a100.efficiency
    fraction = (eff.gemm_peak_fraction * (2048 / (19 * 108)) * (k / (k + eff.gemm_k_half))
                * eff.sustained_compute_fraction)
    expected = flops / (312e12 * fraction) + a100.kernel_launch_us * 1e-6
    assert compute_time_s(spec, a100) == pytest.approx(expected, rel=1e-12)


def test_attention_runs_at_its_own_fraction(a100):
    spec = ComputeSpec("fa", "attention", flops=1e12, bytes_accessed=1e6, dtype="bf16")
    eff = a100.efficiency
    expected = (1e12 / (312e12 * eff.attention_peak_fraction * eff.sustained_compute_fraction)
                + a100.kernel_launch_s)
    assert compute_time_s(spec, a100) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("impl, phase, fraction", [
    ("fa1", "fwd", 0.1505), ("fa1", "bwd", 0.147),
    ("fa2", "fwd", 0.301), ("fa2", "bwd", 0.294), ("fa2", "recompute", 0.301),
    ("fa3", "fwd", 0.527), ("cudnn", "bwd", 0.470), ("te", "fwd", 0.489)])
def test_attention_is_priced_by_its_implementation_on_hopper(impl, phase, fraction):
    # FlashAttention-3 paper (Shah et al. 2024) Figs. 5-6: FA2 reaches ~30% of H100's peak,
    # FA3 and cuDNN ~50%; FlashAttention v1 half of FA2 (FA2 paper abstract, "around 2x"); the
    # sustained-clock factor applies on top, as for every kernel
    h100 = load_profile("h100-sxm")
    spec = ComputeSpec("fa", "attention", flops=1e12, bytes_accessed=1e6, dtype="bf16",
                       phase=phase, executed_fraction=0.5, impl=impl)
    rate = 989.4e12 * fraction * h100.efficiency.sustained_compute_fraction
    assert compute_time_s(spec, h100) == pytest.approx(0.5e12 / rate + h100.kernel_launch_s,
                                                       rel=1e-12)


def test_an_implementation_the_profile_lacks_runs_at_the_generic_fraction(a100):
    plain = ComputeSpec("fa", "attention", flops=1e12, bytes_accessed=1e6, dtype="bf16")
    marked = ComputeSpec("fa", "attention", flops=1e12, bytes_accessed=1e6, dtype="bf16",
                         impl="fa3")
    assert a100.efficiency.attention_kernels.fa3 is None
    assert compute_time_s(marked, a100) == compute_time_s(plain, a100)


def test_flashattention_v1_is_priced_at_half_of_flashattention_2(a100):
    # Dao 2023 (FlashAttention-2, abstract): "around 2x speedup compared to FlashAttention";
    # on A100 FA2 is the generic fused-attention rate, on H100 its own entry
    h100 = load_profile("h100-sxm").efficiency.attention_kernels
    fa1 = a100.efficiency.attention_kernels.fa1
    assert fa1.fwd == fa1.bwd == pytest.approx(a100.efficiency.attention_peak_fraction / 2)
    assert h100.fa1.fwd == pytest.approx(h100.fa2.fwd / 2, abs=5e-4)
    assert h100.fa1.bwd == pytest.approx(h100.fa2.bwd / 2, abs=5e-4)


def test_empty_kernel_costs_nothing(a100):
    assert compute_time_s(ComputeSpec("noop", "copy", 0, 0, "bf16"), a100) == 0.0


def test_gemm_efficiency_never_exceeds_the_measured_ceiling(a100):
    for mnk in [(8192, 8192, 8192), (1024, 10240, 5120), (2048, 4608, 12288), (1, 1, 1)]:
        assert 0 < gemm_efficiency(mnk, 1, "bf16", a100) <= a100.efficiency.gemm_peak_fraction


def test_small_and_skinny_gemms_run_further_from_peak(a100):
    big = gemm_efficiency((8192, 8192, 8192), 1, "bf16", a100)
    small = gemm_efficiency((256, 256, 256), 1, "bf16", a100)
    short_k = gemm_efficiency((8192, 8192, 64), 1, "bf16", a100)
    skinny = gemm_efficiency((16, 8192, 8192), 1, "bf16", a100)
    assert small < 0.5 * big and short_k < 0.5 * big and skinny < 0.5 * big


def test_wave_quantization_one_tile_too_many(a100):
    """108 tiles fill the A100's 108 SMs; 109 take two waves (tile choice may soften it)."""
    full = gemm_efficiency((128 * 108, 256, 4096), 1, "bf16", a100)
    over = gemm_efficiency((128 * 109, 256, 4096), 1, "bf16", a100)
    assert over < full


def test_gemm_time_grows_with_size(a100):
    times = [compute_time_s(ComputeSpec("mm", "gemm", 2 * s**3, 6 * s * s, "bf16",
                                        gemm_mnk=(s, s, s)), a100)
             for s in (128, 512, 2048, 8192)]
    assert times == sorted(times)


def test_fp32_gemm_uses_fp32_peak(a100):
    s = 4096
    bf16 = ComputeSpec("mm", "gemm", 2 * s**3, 6 * s * s, "bf16", gemm_mnk=(s, s, s))
    fp32 = ComputeSpec("mm", "gemm", 2 * s**3, 12 * s * s, "fp32", gemm_mnk=(s, s, s))
    assert compute_time_s(fp32, a100) > 10 * compute_time_s(bf16, a100)


# (batch, m, n, k, measured bf16 TFLOP/s) on H100 SXM: a sample of XLA's measured GEMM table
# (tensorflow/tensorflow third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h,
# kDefaultMatmulPTable key sm_90), the data the h100-sxm efficiency parameters were fitted to.
XLA_H100 = [(1, 4096, 4096, 4096, 783.3), (1, 2048, 2048, 2048, 632.0),
            (1, 4096, 4096, 256, 392.2), (2, 1024, 2048, 1024, 493.4),
            (1, 256, 2048, 256, 41.8), (1, 512, 256, 256, 11.5), (4, 256, 256, 4096, 171.6),
            (1, 256, 4096, 2048, 324.6), (2, 4096, 512, 256, 211.0), (4, 1024, 512, 2048, 514.2)]


@pytest.mark.parametrize("b,m,n,k,tflops", XLA_H100)
def test_h100_gemm_time_matches_xla_measurement_within_15pct(b, m, n, k, tflops):
    """XLA's table is a short microbenchmark, so it is compared with the profile's burst
    figures: the sustained-load derate (`sustained_compute_fraction`) set to 1."""
    hw = load_profile("h100-sxm", ["efficiency.sustained_compute_fraction=1.0"])
    flops = 2 * b * m * n * k
    spec = ComputeSpec("mm", "gemm", flops, 2 * b * (m * k + k * n + m * n), "bf16",
                       gemm_mnk=(m, n, k), gemm_batch=b)
    measured_s = flops / (tflops * 1e12)
    assert compute_time_s(spec, hw) == pytest.approx(measured_s, rel=0.15)


def test_fp8_gemms_reach_their_own_measured_share_of_the_fp8_peak():
    # MAMF with FP8 inputs on H100 SXM is 1402.6 of 1979 TFLOP/s (0.709) against bf16's 794.5
    # of 989 (0.803): the same large GEMM in FP8 takes 0.803/0.709 of the bf16 time at the
    # FP8 peak
    hw = load_profile("h100-sxm")
    shape, eff = (8192, 8192, 8192), hw.efficiency
    bf16, fp8 = gemm_efficiency(shape, 1, "bf16", hw), gemm_efficiency(shape, 1, "fp8", hw)
    assert eff.gemm_peak_fraction_fp8 == 0.709
    assert fp8 / bf16 == pytest.approx(eff.gemm_peak_fraction_fp8 / eff.gemm_peak_fraction)
    spec = lambda d: ComputeSpec("g", "gemm", 2.0 * 8192**3, 0.0, d,  # noqa: E731
                                 gemm_mnk=shape)
    t16 = compute_time_s(spec("bf16"), hw) - hw.kernel_launch_s
    t8 = compute_time_s(spec("fp8"), hw) - hw.kernel_launch_s
    peaks = hw.peak_flops_per_s("bf16") / hw.peak_flops_per_s("fp8")  # 989.4 / 1978.9
    assert t8 / t16 == pytest.approx(peaks * 0.803 / 0.709)
    # a profile without an FP8 figure keeps one fraction for every dtype
    a100 = load_profile("a100-80gb")
    assert a100.efficiency.gemm_peak_fraction_fp8 is None


def test_attention_rate_follows_the_key_length():
    # fractions are quoted at 2048 keys; the rate follows s / (s + half) (FlashAttention-3
    # paper Fig. 5, FlashAttention-2 on H100: 191 at 512 keys, 298 at 2k, 335 at 16k TFLOP/s)
    from simulator.cost.compute import attention_seq_factor

    half = load_profile("h100-sxm").efficiency.attention_seq_half
    assert attention_seq_factor(2048, half) == 1.0
    assert attention_seq_factor(8192, half) == pytest.approx(
        (8192 / (8192 + half)) / (2048 / (2048 + half)), rel=1e-12)
    assert attention_seq_factor(512, half) < 1.0 < attention_seq_factor(16384, half)
    assert attention_seq_factor(512, half) == pytest.approx(191 / 298, rel=0.05)
    assert attention_seq_factor(16384, half) == pytest.approx(335 / 298, rel=0.05)
    assert attention_seq_factor(0, half) == attention_seq_factor(4096, 0.0) == 1.0
    h100 = load_profile("h100-sxm")
    at = {s: compute_time_s(ComputeSpec("fa", "attention", 1e12, 1e6, "bf16", seq=s), h100)
          for s in (2048, 8192)}
    assert (at[2048] - h100.kernel_launch_s) / (at[8192] - h100.kernel_launch_s) == \
        pytest.approx(attention_seq_factor(8192, half), rel=1e-9)


def test_lowering_gives_attention_kernels_their_local_key_length():
    from simulator.config.scenario import parse_scenario
    from simulator.program.model_program import transformer_program

    data = {"name": "s", "hardware": "h100-sxm",
            "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": 2, "hidden_size": 512, "num_heads": 8,
                      "seq_length": 4096, "vocab_size": 1024, "attention": "flash"},
            "training": {"global_batch_size": 8, "micro_batch_size": 1},
            "parallel": {"data": 4, "tensor": 2}}
    sc = parse_scenario(data, "s.yaml")
    hw = load_profile("h100-sxm")
    prog = transformer_program(sc, hw.software, hw.compute_units)
    seqs = {op.name: op.seq for op in prog.block("layer").fwd + prog.block("layer").bwd
            if isinstance(op, ComputeSpec)}
    assert seqs["flash_attention"] == seqs["flash_attention.bwd"] == 4096
    assert seqs["qkv"] == 0


def test_a_windowed_attention_kernel_runs_over_its_window_of_keys():
    """GPT-OSS's alternating layers: the 128-token windowed layer's kernel runs its 4096 query
    rows over their window of 128 keys (priced by `window_share`), the global layer's over
    all 4096 keys with no window."""
    from simulator.config.scenario import parse_scenario
    from simulator.program.model_program import transformer_program

    data = {"name": "s", "hardware": "h100-sxm",
            "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": 2, "hidden_size": 512, "num_heads": 8,
                      "seq_length": 4096, "vocab_size": 1024, "attention": "flash",
                      "sliding_window": 128, "global_every": 2},
            "training": {"global_batch_size": 8, "micro_batch_size": 1},
            "parallel": {"data": 4, "tensor": 2}}
    hw = load_profile("h100-sxm")
    prog = transformer_program(parse_scenario(data, "s.yaml"), hw.software, hw.compute_units)
    seqs = [[(op.seq, op.window) for op in prog.block(name).fwd + prog.block(name).bwd
             if isinstance(op, ComputeSpec) and op.kind == "attention"]
            for name in ("layer0", "layer1")]
    assert seqs == [[(4096, 128)] * 2, [(4096, 0)] * 2]


@pytest.mark.parametrize("phase,measured", [("fwd", 334 / 484), ("bwd", 395 / 465)])
def test_attention_rate_follows_the_head_width_below_128(phase, measured):
    """cuDNN on H100 (FlashAttention-3 paper Figs. 5-6, 2048 keys): head dim 64 runs at
    334/484 of head dim 128's rate forward and 395/465 backward; heads of 128 or wider, an
    unknown width, and an implementation without the figure (fa1 here) keep the rate."""
    h100 = load_profile("h100-sxm")

    def t(d: int, impl: str = "cudnn") -> float:
        spec = ComputeSpec("fa", "attention", 1e12, 1e6, "bf16", phase,  # type: ignore[arg-type]
                           impl=impl, seq=2048, head_dim=d)
        return compute_time_s(spec, h100) - h100.kernel_launch_s

    assert t(128) / t(64) == pytest.approx(measured, rel=2e-3)
    assert t(128) == t(192) == t(0)
    assert t(64, "fa1") == t(128, "fa1")


def test_lowering_gives_attention_kernels_their_head_width():
    from simulator.config.scenario import parse_scenario
    from simulator.program.model_program import transformer_program

    data = {"name": "s", "hardware": "h100-sxm",
            "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": 2, "hidden_size": 512, "num_heads": 8,
                      "head_dim": 32, "seq_length": 4096, "vocab_size": 1024,
                      "attention": "flash"},
            "training": {"global_batch_size": 8, "micro_batch_size": 1},
            "parallel": {"data": 4, "tensor": 2}}
    hw = load_profile("h100-sxm")
    prog = transformer_program(parse_scenario(data, "s.yaml"), hw.software, hw.compute_units)
    dims = {op.name: op.head_dim for op in prog.block("layer").fwd + prog.block("layer").bwd
            if isinstance(op, ComputeSpec)}
    assert dims["flash_attention"] == dims["flash_attention.bwd"] == 32
    assert dims["qkv"] == 0
