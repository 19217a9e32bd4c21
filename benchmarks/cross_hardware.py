"""H100 against A100 in one training stack: measured vs modelled throughput ratio.

Measurement: MosaicML llm-foundry, scripts/train/benchmarking/README.md, tables "H100 80GB
BF16" and "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": MPT models on 8 GPUs of
one node, PyTorch FSDP (FULL_SHARD), bf16, flash attention, the same code on both GPUs. Only
rows without activation checkpointing on both GPUs and with the same micro-batch are used.

The attention kernel is llm-foundry's default of the time, Triton FlashAttention v1
(framework_profiles/llm-foundry.yaml `attention.implementation: fa1`); its H100 rate is carried
over from A100 (half of FlashAttention-2's), so the clock factor is read off the rows at
sequence 2048, where attention is a small share of the step; the longer rows show how far
that carried-over rate is off.

Both GPUs run the same software, so the ratio of their MFUs (each against its own bf16
peak) isolates what differs in the hardware. The script simulates each row on the h100-sxm
and a100-80gb profiles (data parallel 8, ZeRO-3, flash attention) and prints the measured
and modelled H100/A100 MFU ratios and, per row, `measured / modelled`: the factor by which
the model's H100 is too fast (or slow) relative to its A100. It measures and never
asserts; the exit status is always 0.

    python -m benchmarks.cross_hardware        (from the repo root)

MPT shapes (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml): d_model / n_heads /
n_layers, vocabulary 50368, FFN 4 x d_model. The absolute MFUs are not comparable with
ours (llm-foundry counts 6N + attention FLOPs; FSDP overheads are its own): only the ratio is.
"""

from __future__ import annotations

import statistics

from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.simulation.simulate import simulate

MPT = {"760m": (1536, 12, 24), "1b": (2048, 16, 24), "3b": (2560, 20, 32),
       "7b": (4096, 32, 32), "13b": (5120, 40, 40)}
# model, seq, H100 (micro-batch, grad-accum, MFU %), A100 (micro-batch, grad-accum, MFU %)
ROWS = (
    ("760m", 2048, (24, 2, 34.90), (24, 2, 56.85)),
    ("1b", 2048, (14, 1, 41.82), (14, 4, 59.86)),
    ("1b", 4096, (7, 4, 40.26), (7, 4, 59.00)),
    ("1b", 8192, (3, 4, 37.73), (3, 4, 56.69)),
    ("3b", 4096, (5, 6, 42.31), (5, 6, 60.53)),
    ("3b", 8192, (3, 6, 40.31), (3, 6, 59.34)),
    ("7b", 2048, (6, 1, 46.44), (6, 2, 64.23)),
    ("13b", 2048, (2, 1, 39.79), (2, 3, 59.57)),
)


# rows at this sequence length or shorter derive the clock factor: the attention kernel the
# tables ran (Triton FlashAttention v1) has no measured H100 rate, only one carried over from
# A100 (half of FlashAttention-2's), and its share of the step grows with the sequence
SHORT_SEQ = 2048


def model_mfu(hardware: str, model: str, seq: int, micro: int, accum: int) -> float:
    """Our MFU (percent) for one llm-foundry row on `hardware`."""
    h, a, layers = MPT[model]
    data = {"name": f"mpt-{model}-{seq}", "hardware": hardware, "framework": "llm-foundry",
            "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": layers, "hidden_size": h,
                      "num_heads": a, "seq_length": seq, "vocab_size": 50368,
                      "dtype": "bf16", "attention": "flash"},
            "training": {"global_batch_size": micro * accum * 8, "micro_batch_size": micro,
                         "optimizer": "adam"},
            "parallel": {"data": 8, "optimizer_shard": 3}}
    r = simulate(parse_scenario(data, "llm-foundry row"), load_profile(hardware))
    return 100.0 * r.model_flops / r.iteration_time_s / 8 / r.peak_flops_per_s


def main() -> int:
    print(f"{'model':>5} {'seq':>5}  {'H100 meas':>9} {'model':>6}  {'A100 meas':>9} {'model':>6}"
          f"  {'ratio meas':>10} {'model':>6}  {'meas/model':>10}")
    factors = []
    for model, seq, (mh, gh, fh), (ma, ga, fa) in ROWS:
        ph, pa = model_mfu("h100-sxm", model, seq, mh, gh), model_mfu("a100-80gb", model, seq,
                                                                     ma, ga)
        factors.append((fh / fa) / (ph / pa))
        print(f"{model:>5} {seq:>5}  {fh:9.1f} {ph:6.1f}  {fa:9.1f} {pa:6.1f}"
              f"  {fh / fa:10.3f} {ph / pa:6.3f}  {factors[-1]:10.3f}")
    print(f"\nmedian measured/modelled H100:A100 ratio {statistics.median(factors):.3f} "
          f"(min {min(factors):.3f}, max {max(factors):.3f}) over {len(factors)} rows")
    short = [f for (model, seq, *_), f in zip(ROWS, factors) if seq <= SHORT_SEQ]
    print(f"median over the {len(short)} rows at sequence {SHORT_SEQ} (attention a small share, "
          f"its kernel's rate a small confounder): {statistics.median(short):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
