"""Predicted vs measured allocator peaks of FSDP2 steps (issue 24 item 1): what the
caching-allocator replay (`simulator.report.alloc_sequence`, `report.allocator_replay`)
and the closed form (`report.allocator`) predict for `max_memory_allocated` and
`max_memory_reserved`.

Two sources:

- one-rank FSDP2 steps on an H200 (benchmarks/device/fsdp_memory.py; measured in
  benchmarks/data/measured/h200-fsdp-memory-2026-11-28.json without and
  h200-fsdp-memory-expandable-2026-11-28.json with expandable segments), each run as the
  base case benchmarks/data/memory/h200-eager-llama3-8b-8l.yaml with the row's shape,
  `parallel.optimizer_shard=3` and, for a checkpointed row, `parallel.recompute=full`;
- the torchtitan 2024-12 rows of benchmarks/data/memory/memory_runs.csv that run eager
  (no torch.compile), whose counter is max_memory_reserved.

Columns: measured allocated / reserved GiB; `sim alloc` the simulator's
allocated_peak_bytes (the engine's peak under FSDP2's state layout: fp32 shards, the
moments, each unit's sharded gradient from its reduce-scatter to the step, lower.state);
`replay alloc` / `replay resv` the replay's peaks (the step's allocations in FSDP2's
order, two steps); `closed` the closed form of the tensors alive at the peak; signed errors
in percent. Per stream, the segments each stream reserves at the replay's end. It
measures and never asserts: the exit status is always 0.

    python -m benchmarks.allocator_accuracy      (repo root)
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
MEASURED = ROOT / "data" / "measured"
BASE = ROOT / "data" / "memory" / "h200-eager-llama3-8b-8l.yaml"
RUNS = ROOT / "data" / "memory" / "memory_runs.csv"
FILES = (("plain", "h200-fsdp-memory-2026-11-28.json", False),
         ("expandable", "h200-fsdp-memory-expandable-2026-11-28.json", True))
GIB = 2**30


def _sets(row: dict[str, Any]) -> list[str]:
    mb = row["micro_batch"]
    return [f"model.layers={row['layers']}", f"model.hidden_size={row['hidden']}",
            f"model.num_heads={row['heads']}", f"model.num_kv_heads={row['kv_heads']}",
            f"model.ffn_hidden_size={row['ffn']}", f"model.vocab_size={row['vocab']}",
            f"model.tie_embeddings={str(row['tied']).lower()}",
            f"model.seq_length={row['seq']}", f"training.micro_batch_size={mb}",
            f"training.global_batch_size={mb}", "parallel.optimizer_shard=3",
            f"parallel.recompute={'full' if row['checkpoint'] else 'none'}"]


def predict(path: str, sets: list[str], expandable: bool | None,
            keep_last: bool | None = None) -> dict[str, Any]:
    from simulator import load_scenario, simulate
    from simulator.report import summary
    from simulator.report.alloc_sequence import replay_result
    from simulator.report.allocator import reserved_peak

    result = simulate(load_scenario(path, sets))
    memory = summary(result)["memory"]
    alive = dict(result.memory.by_category)
    mode = "pytorch_expandable" if expandable else "pytorch"
    if expandable is None:
        mode = result.framework.memory_overheads.caching_allocator
    a = replay_result(result, expandable, keep_last)
    return {"sim_alloc": memory["allocated_peak_bytes"] / GIB,
            "closed": (reserved_peak(result.program, alive, mode) or 0.0) / GIB,
            "replay_alloc": a.peak_allocated / GIB if a else None,
            "replay_resv": a.peak_reserved / GIB if a else None,
            "streams": {k: v / GIB for k, v in a.reserved_by_stream.items()} if a else {}}


def _err(pred: float | None, meas: float) -> str:
    return f"{100 * (pred / meas - 1):+6.1f}" if pred is not None else "     -"


def h200_rows() -> list[dict[str, Any]]:
    out = []
    for label, name, expandable in FILES:
        for row in json.loads((MEASURED / name).read_text())["rows"]:
            # fsdp_memory.py reshards every block after its forward (torchtitan keeps the
            # last one, which the torchtitan rows below replay)
            p = predict(str(BASE), _sets(row), expandable, keep_last=False)
            out.append({"id": f"{row['name']} ({label})", "alloc": row["max_allocated_bytes"]
                        / GIB, "resv": row["max_reserved_bytes"] / GIB, **p})
    return out


def titan_rows() -> list[dict[str, Any]]:
    out = []
    with RUNS.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if not r["source"].startswith("torchtitan 2024-12") or r["not_modelled"]:
                continue
            sets = [s for s in r["sets"].split(";") if s]
            p = predict(str(RUNS.parent / f"{r['scenario']}.yaml"), sets, None)
            out.append({"id": r["id"], "alloc": None, "resv": float(r["measured_gib"]), **p})
    return out


def _print(title: str, rows: list[dict[str, Any]]) -> None:
    print(title)
    head = (f"{'row':<30} {'meas alloc':>10} {'sim alloc':>9} {'replay alloc':>12} "
            f"{'err%':>6} {'meas resv':>9} {'closed':>7} {'err%':>6} {'replay resv':>11} "
            f"{'err%':>6}  reserved per stream at the end (GiB)")
    print(head)
    print("-" * len(head))
    for r in rows:
        meas_a = f"{r['alloc']:10.2f}" if r["alloc"] is not None else f"{'-':>10}"
        ra = r["replay_alloc"]
        print(f"{r['id']:<30} {meas_a} {r['sim_alloc']:9.2f} "
              f"{(f'{ra:12.2f}' if ra is not None else f'{chr(45):>12}')} "
              f"{_err(ra, r['alloc']) if r['alloc'] else '     -'} {r['resv']:9.2f} "
              f"{r['closed']:7.2f} {_err(r['closed'], r['resv'])} "
              f"{r['replay_resv'] or 0:11.2f} {_err(r['replay_resv'], r['resv'])}  "
              + " ".join(f"{k} {v:.2f}" for k, v in r["streams"].items()))
    for key in ("sim_alloc", "replay_alloc"):
        errs = [abs(100 * (r[key] / r["alloc"] - 1)) for r in rows if r[key] and r["alloc"]]
        if errs:
            print(f"  allocated, {key}: median {statistics.median(errs):.1f}%, worst "
                  f"{max(errs):.1f}% over {len(errs)} rows")
    for key in ("closed", "replay_resv"):
        errs = [abs(100 * (r[key] / r["resv"] - 1)) for r in rows if r[key]]
        if errs:
            print(f"  reserved, {key}: median {statistics.median(errs):.1f}%, worst "
                  f"{max(errs):.1f}% over {len(errs)} rows")
    print()


def main() -> int:
    _print("one-rank FSDP2 steps on an H200 (benchmarks/device/fsdp_memory.py)", h200_rows())
    _print("torchtitan 2024-12 H100, eager rows (memory_runs.csv)", titan_rows())
    return 0


if __name__ == "__main__":
    sys.exit(main())
