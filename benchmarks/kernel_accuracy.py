"""Measured vs modelled time of single kernels on one H200 (issue 24 item 2).

The measurements are benchmarks/data/measured/h200-gpu-kernels-2026-11-28.json, written by
`benchmarks/device/gpu_kernels.py` on one NVIDIA H200 SXM (132 SMs, driver 580.159.04,
PyTorch 2.11.0+cu130, CUDA 13.0; every kernel timed alone with CUDA events, the L2 flushed
before each repetition, median of 5-30 repetitions). The model is `compute_time_s`, the
function every simulated kernel is priced with, on the `h200-sxm` profile, with the profile's
`sustained_compute_fraction` set to 1 (the measurements are short bursts at full clocks,
which that fraction exists to take away in a sustained training run).

Printed per class (bf16 GEMMs by shape, FP8 GEMMs, memory-bound kernels, fused attention
forward and backward, the optimizer step): rows, the median and worst absolute error, the
median signed error (negative: the model is too fast), and the rows worst predicted.

    python -m benchmarks.kernel_accuracy [--rows]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from simulator.config.hardware import load_profile
from simulator.config.hardware.schema import HardwareProfile
from simulator.cost.compute import compute_time_s
from simulator.cost.specs import ComputeSpec

DATA = Path(__file__).resolve().parent / "data" / "measured" / "h200-gpu-kernels-2026-11-28.json"
_KIND = {"copy": "copy", "rms_norm": "norm", "layer_norm": "norm", "softmax": "softmax",
         "adamw_fused": "optimizer", "adamw_foreach": "optimizer"}  # else elementwise
_IMPL = {"cudnn": "cudnn", "flash": "fa2"}  # torch SDPA backends -> profile attention kernels


def _burst(hw: HardwareProfile) -> HardwareProfile:
    eff = hw.efficiency.model_copy(update={"sustained_compute_fraction": 1.0})
    return hw.model_copy(update={"efficiency": eff})


def gemm_rows(rows: list[dict], dtype: str, hw: HardwareProfile) -> list[tuple[str, float, float]]:
    a_bytes = 1 if dtype == "fp8" else 2
    out = []
    for r in rows:
        m, n, k = r["m"], r["n"], r["k"]
        spec = ComputeSpec("gemm", "gemm", 2.0 * m * n * k, a_bytes * (m * k + k * n) + 2 * m * n,
                           dtype, gemm_mnk=(m, n, k))
        out.append((f"{r['label']} {m}x{n}x{k}", r["s"], compute_time_s(spec, hw)))
    return out


def memory_rows(rows: list[dict], hw: HardwareProfile) -> list[tuple[str, float, float]]:
    out = []
    for r in rows:
        kind = _KIND.get(r["op"], "elementwise")
        kernels = r.get("kernels") or 1
        spec = ComputeSpec(r["op"], kind, 0.0, float(r["bytes"]), "bf16")
        # an unfused op (eager SwiGLU: silu, then mul) is that many kernels of its bytes
        t = compute_time_s(spec, hw) + (kernels - 1) * hw.kernel_launch_s
        out.append((f"{r['op']} {r['numel']}", r["s"], t))
    return out


def attention_rows(rows: list[dict], phase: str, hw: HardwareProfile
                   ) -> list[tuple[str, float, float]]:
    out = []
    for r in rows:
        if "error" in r:
            continue
        flops = 4.0 * r["batch"] * r["heads"] * r["seq"] ** 2 * r["d"]
        done = 0.5 if r["causal"] else 1.0
        if phase == "bwd":
            flops, done = 2 * flops, done * 1.25
        spec = ComputeSpec("attn", "attention", flops, 0.0, "bf16", phase,  # type: ignore[arg-type]
                           executed_fraction=done, impl=_IMPL[r["backend"]], seq=r["seq"],
                           head_dim=r["d"])
        label = f"{r['backend']} d{r['d']} {'causal' if r['causal'] else 'full'} s{r['seq']}"
        out.append((label, r[f"{phase}_s"], compute_time_s(spec, hw)))
    return out


def report(name: str, rows: list[tuple[str, float, float]], show: bool) -> list[float]:
    errs = [(pred / meas - 1.0) for _, meas, pred in rows]
    if not rows:
        return []
    absolute = [abs(e) for e in errs]
    worst = max(range(len(rows)), key=lambda i: absolute[i])
    print(f"{name:<22} {len(rows):>4} rows  median |err| {100 * statistics.median(absolute):5.1f}%"
          f"  worst {100 * errs[worst]:+7.1f}% ({rows[worst][0]})"
          f"  median signed {100 * statistics.median(errs):+6.1f}%")
    if show:
        for (label, meas, pred), e in zip(rows, errs):
            print(f"    {label:<34} measured {meas * 1e6:10.1f} us  model {pred * 1e6:10.1f} us"
                  f"  {100 * e:+7.1f}%")
    return absolute


def main(argv: list[str]) -> int:
    show = "--rows" in argv
    data = json.loads(DATA.read_text())["sections"]
    hw = _burst(load_profile("h200-sxm"))
    env = data["environment"]
    print(f"kernels measured on {env['name']} (torch {env['torch']})"
          f" vs compute_time_s on h200-sxm (sustained_compute_fraction 1)")
    big = [r for r in data["gemm_bf16"] if 2 * r["m"] * r["n"] * r["k"] >= 1e11]
    small = [r for r in data["gemm_bf16"] if 2 * r["m"] * r["n"] * r["k"] < 1e11]
    allerr: list[float] = []
    allerr += report("GEMM bf16 >=0.1 TFLOP", gemm_rows(big, "bf16", hw), show)
    allerr += report("GEMM bf16 <0.1 TFLOP", gemm_rows(small, "bf16", hw), show)
    allerr += report("GEMM fp8", gemm_rows(data["gemm_fp8"], "fp8", hw), show)
    mem = [r for r in data["memory_bound"] if not r["op"].startswith(("adamw", "cross"))]
    allerr += report("memory-bound <1 MiB", memory_rows(
        [r for r in mem if r["bytes"] < 2**20], hw), show)
    allerr += report("memory-bound >=1 MiB", memory_rows(
        [r for r in mem if r["bytes"] >= 2**20], hw), show)
    allerr += report("optimizer (AdamW)", memory_rows(
        [r for r in data["memory_bound"] if r["op"] == "adamw_fused"], hw), show)
    allerr += report("attention fwd", attention_rows(data["attention"], "fwd", hw), show)
    allerr += report("attention bwd", attention_rows(data["attention"], "bwd", hw), show)
    print(f"{'all':<22} {len(allerr):>4} rows  median |err| "
          f"{100 * statistics.median(allerr):5.1f}%  worst {100 * max(allerr):5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
