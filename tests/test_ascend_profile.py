"""The ascend-910b figures that are derived rather than read: the cube peak from CANN's
platform file, and the best-matmul fraction on the A100 profile's MAMF footing."""

from __future__ import annotations

from simulator.config.hardware.load import load_profile


def test_cube_peak_is_cores_times_cube_times_clock() -> None:
    hw = load_profile("ascend-910b")
    # Ascend910B2.ini: ai_core_cnt=24, cube_m/n/k_size=16, cube_freq=1800 (MHz); 2 FLOP per MAC
    assert hw.compute_units == 24
    derived = 24 * 16**3 * 2 * 1.8e9 / 1e12                 # 353.89; the bin table truncates
    assert hw.peak_tflops.bf16 == hw.peak_tflops.fp16 == 353.8 and 0 < derived - 353.8 < 0.1


def test_matmul_fraction_maps_the_same_tool_onto_the_a100_mamf() -> None:
    npu, a100 = load_profile("ascend-910b"), load_profile("a100-80gb")
    # limulidae bench_flops.py: 910B 328, A800 286 bf16 TFLOPS; A100 MAMF 271.2 = 0.869 x 312
    assert round(271.2 / a100.peak_tflops.bf16, 3) == a100.efficiency.gemm_peak_fraction
    mamf_equivalent = 328 * (271.2 / 286)
    assert round(mamf_equivalent / npu.peak_tflops.bf16, 3) == npu.efficiency.gemm_peak_fraction
