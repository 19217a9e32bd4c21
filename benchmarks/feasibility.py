"""How fast could each data-parallel-only validation run be, as its case file states it?

For every bundled validation run without pipeline parallelism this prints a lower bound on
its iteration time that no compute model can beat, given the run's stated configuration
(micro-batches, gradient precision, gradient buckets, distributed optimizer) and the
collective model:

    C      every matrix FLOP the device executes (GEMMs, attention at its executed share)
           at the maximum achievable matmul rate (`gemm_peak_fraction` x peak); vector
           kernels, launches and tensor-parallel communication free
    RS, AG the data-parallel gradient reduce-scatter and parameter all-gather, as simulated
           (bucket by bucket), and at NIC line rate ((n-1)/n x bytes / bandwidth, no
           latency, no protocol overhead)
    floor  C + max(0, RS - C*b/m) + max(0, AG - C*f/m): Megatron-Core reduces gradients
           only during the last of the m micro-batches' backward (share b of the compute)
           and gathers parameters during the first forward (share f); the bound rises
           with C, so the fastest compute gives the lowest floor

and the floor's error against the published time. A floor above +20% means no efficiency
model can bring that run within 20% without changing the case's configuration. It measures
and never asserts: the exit status is always 0.

    python -m benchmarks.feasibility        (from the repo root)
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.accuracy import DEFAULT_CSV, DEFAULT_DIR, _simulate, _target, csv_targets
from simulator.cost.collectives import inter_bus_bandwidth


def _matrix_executed(ops: tuple) -> float:
    return sum(op.flops * op.executed_fraction for op in ops
               if getattr(op, "kind", "") in ("gemm", "attention"))


def floor_row(path: Path, table: dict) -> dict | None:
    """The bound's terms for one case file, or None for a pipelined run."""
    scenario, hw, result = _simulate(path)
    par, prog = scenario.parallel, result.program
    if par.pipeline > 1:
        return None
    m = scenario.grad_accum_steps
    # every layer copy (one block or several, as models.layers.layer_plan groups them),
    # then the pinned embedding and head
    blocks = prog.sequence() + prog.pinned("first") + prog.pinned("last")
    fwd = sum(_matrix_executed(b.fwd) for b in blocks)
    bwd = sum(_matrix_executed(b.bwd) for b in blocks)
    c = m * (fwd + bwd) / (hw.peak_flops_per_s(prog.dtype) * hw.efficiency.gemm_peak_fraction)
    f_share, b_share = fwd / (fwd + bwd), bwd / (fwd + bwd)
    dp = [t for t in result.plan.tasks if t.device == 0 and t.stream == "dp"]
    rs = sum(t.duration_s for t in dp if t.name in ("grad_bucket", "grad_reduce"))
    ag = sum(t.duration_s for t in dp if t.name == "param_gather")
    rs_line = ag_line = 0.0
    if scenario.cluster.nodes > 1:  # each member sends (n-1)/n of its buffer over its NIC share
        n, members = par.data, max(1, par.data // scenario.cluster.nodes)
        nic = inter_bus_bandwidth(hw, scenario.cluster.devices_per_node) / \
            hw.efficiency.inter_node_bus_fraction
        moved = {k: sum(b for t in dp for kind, b in t.comm if kind in k)
                 for k in (("reduce_scatter", "all_reduce"), ("all_gather",))}
        rs_line, ag_line = ((n - 1) / n * b / members / nic for b in moved.values())

    def floor(rs_s: float, ag_s: float) -> float:
        return c + max(0.0, rs_s - c * b_share / m) + max(0.0, ag_s - c * f_share / m)

    return {"run": path.stem, "m": m, "compute_s": c, "rs_s": rs, "ag_s": ag,
            "floor_s": floor(rs, ag), "line_floor_s": floor(rs_line, ag_line),
            "target_s": _target(path.read_text(), scenario.devices, table)}


def main() -> int:
    table = csv_targets(DEFAULT_CSV) if DEFAULT_CSV is not None and DEFAULT_CSV.exists() else {}
    print(f"{'run':<44} {'m':>3} {'C s':>7} {'RS s':>7} {'AG s':>7} {'floor s':>8} "
          f"{'vs meas':>8} {'line-rate floor':>16}")
    for path in sorted(DEFAULT_DIR.glob("*.yaml")):
        row = floor_row(path, table)
        if row is None:
            continue
        t = row["target_s"]
        print(f"{row['run']:<44} {row['m']:>3} {row['compute_s']:>7.3f} {row['rs_s']:>7.3f} "
              f"{row['ag_s']:>7.3f} {row['floor_s']:>8.3f} "
              f"{100 * (row['floor_s'] / t - 1):>+7.1f}% "
              f"{row['line_floor_s']:>8.3f} {100 * (row['line_floor_s'] / t - 1):>+6.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
