# ruff: noqa: E501  (data records and citations are kept one per line)
"""Write the pending validation cases (one YAML per published run) and runs.csv.

Every run below is one row of a public table or log; its source, the figures read from it and
every assumption are kept in the record and copied into the case file's comment header. The
YAML body uses only keys the scenario schema accepts today; what the simulator cannot express
yet is listed on the `# needs:` line, and where the body has to approximate the run (context
parallel folded into data parallel, a layer count rounded to the pipeline degree, a
placeholder hardware profile) the `# body_approximation:` line says how, and the `exact:` line
gives the values to use once the feature exists.

    python benchmarks/data/validation-pending/make_cases.py      (from the repo root; rewrites the files)

target_iteration_time_s is derived from the source's own figure:
  tokens   T = global_batch_tokens / (tokens_per_s_per_gpu * GPUs)   (or / total tokens_per_s)
  tflops   T = F / (TFLOP/s/GPU * 1e12 * GPUs), F = the FLOP count named in the record
  seconds  T = the measured seconds per iteration as printed by the source
"""

from __future__ import annotations

import csv
from pathlib import Path

from runs_data import RUNS  # noqa: E402  (sibling module)

HERE = Path(__file__).resolve().parent
CSV_COLUMNS = [
    "source", "table_or_figure", "model_name", "params_billion", "num_layers", "hidden_size",
    "num_heads", "ffn_hidden_size", "seq_len", "vocab_size", "global_batch_size",
    "micro_batch_size", "num_gpus", "gpu_type", "tensor_parallel", "pipeline_parallel",
    "data_parallel", "sequence_parallel", "recompute", "zero_stage", "interleaved_stages",
    "measured_metric", "measured_value", "notes", "target_iteration_time_s", "formula",
    "framework", "dtype", "fsdp_or_zero", "case_file", "published_memory", "needs",
]


def megatron_flops(r: dict) -> float:
    """Megatron-LM `num_floating_point_operations` (megatron/training/training.py, core r0.8):
    12*B*s*l*h^2*((1 + g/a + s/h) + (f/h)*glu) + 6*B*s*h*V, glu = 1.5 for SwiGLU else 1."""
    b, s, l, h = r["global_batch_size"], r["seq_len"], r["num_layers"], r["hidden_size"]
    a = r["num_heads"]
    g = r.get("num_kv_heads") or a
    f = r.get("ffn_hidden_size") or 4 * h
    glu = 1.5 if r.get("ffn_activation") == "swiglu" else 1.0
    v = r["vocab_size"]
    return 12 * b * s * l * h * h * ((1 + g / a + s / h) + (f / h) * glu) + 6 * b * s * h * v


def target_seconds(r: dict) -> tuple[float, str]:
    kind = r["metric_kind"]
    gpus = r["num_gpus"]
    if kind == "tokens_per_s_per_gpu":
        tok = r["global_batch_size"] * r["seq_len"]
        return tok / (r["measured_value"] * gpus), (
            "T = global_batch_size * seq_len / (tokens_per_s_per_gpu * GPUs)")
    if kind == "tokens_per_s_total":
        tok = r.get("global_batch_tokens") or r["global_batch_size"] * r["seq_len"]
        return tok / r["measured_value"], (
            "T = global_batch_tokens / total_tokens_per_s (the table's Throughput (T/s))")
    if kind == "seconds_per_iteration":
        return float(r["measured_value"]), "T = measured seconds per iteration (as printed)"
    if kind == "tflops_megatron":
        f = megatron_flops(r)
        return f / (r["measured_value"] * 1e12 * gpus), (
            "T = F / (TFLOP/s/GPU * 1e12 * GPUs), F = Megatron-LM num_floating_point_operations:"
            " 12*B*s*l*h^2*((1 + g/a + s/h) + (f/h)*glu) + 6*B*s*h*V (glu 1.5 for SwiGLU)")
    raise ValueError(kind)


def body(r: dict) -> str:
    p = r["body"]
    gpus = r["num_gpus"]
    dpn = p.get("devices_per_node", 8)
    m = ["type: transformer", f"layers: {p.get('layers', r['num_layers'])}",
         f"hidden_size: {r['hidden_size']}", f"num_heads: {r['num_heads']}"]
    if r.get("ffn_hidden_size"):
        m.append(f"ffn_hidden_size: {r['ffn_hidden_size']}")
    if r.get("num_kv_heads") and r["num_kv_heads"] != r["num_heads"]:
        m.append(f"num_kv_heads: {r['num_kv_heads']}")
    if r.get("ffn_activation") == "swiglu":
        m.append("ffn_activation: swiglu")
    m.append(f"attention: {p.get('attention', 'auto')}")
    m.append(f"seq_length: {p.get('seq_length', r['seq_len'])}")
    if "dropout" in p:  # (probability, why)
        m.append(f"dropout: {p['dropout'][0]}  # {p['dropout'][1]}")
    m += [f"vocab_size: {r['vocab_size']}", f"dtype: {r['dtype']}"]
    par = [f"data: {p['data']}", f"tensor: {p.get('tensor', 1)}",
           f"pipeline: {p.get('pipeline', 1)}"] + (
        [f"context: {p['context']}"] if p.get("context", 1) > 1 else []) + [
           f"schedule: {p.get('schedule', '1f1b')}",
           f"virtual_stages: {p.get('virtual_stages', 1)}",
           f"sequence_parallel: {str(p.get('sequence_parallel', False)).lower()}",
           f"optimizer_shard: {p.get('optimizer_shard', 0)}",
           f"recompute: {p.get('recompute', 'none')}"]
    extra = p.get("parallel_extra", [])
    lines = [f"name: {r['id']} - {r['model_name']} on {gpus} x {r['hardware']}",
             f"hardware: {r['hardware']}",
             "cluster:", f"  nodes: {gpus // dpn}", f"  devices_per_node: {dpn}",
             "model:"] + [f"  {x}" for x in m] + [
             "training:", f"  global_batch_size: {p.get('global_batch_size', r['global_batch_size'])}",
             f"  micro_batch_size: {p.get('micro_batch_size', r['micro_batch_size'])}",
             "  optimizer: adam", "parallel:"] + [f"  {x}" for x in par] + [
             f"  {x}" for x in extra]
    return "\n".join(lines) + "\n"


TAGS = (  # substring of a needs item -> short tag for the `# needs:` line
    ("fp8", "fp8"), ("framework profile", "framework_profile"),
    ("uneven pipeline", "uneven_pipeline_stages"), ("context parallel", "context_parallel"),
    ("hardware variant", "hardware:h100-96gb-hbm2e-500w"), ("hardware profile b200", "hardware:b200"),
    ("Jean Zay", "hardware:omnipath-4x100g"), ("torch.compile", "compile_fusion"),
    ("reshard_after_forward=False", "fsdp_no_reshard_with_pp"), ("Megatron-FSDP", "megatron_fsdp"),
    ("learned position embedding", "learned_pos_embedding"), ("ALiBi", "alibi_embed_layernorm"),
)


def need_tags(needs: list[str]) -> list[str]:
    tags = []
    for n in needs:
        tag = next((t for key, t in TAGS if key in n), "other")
        if tag == "framework_profile":
            tag = "framework_profile:" + n.split("framework profile ")[1].split(" ")[0]
        if tag not in tags:
            tags.append(tag)
    return tags


def header(r: dict, t: float, formula: str) -> str:
    ga = r["body"].get("global_batch_size", r["global_batch_size"]) // (
        r["body"].get("micro_batch_size", r["micro_batch_size"]) * r["body"]["data"])
    h = [f"# shardsim validation case {r['id']}   split: pending",
         f"# framework: {r['framework']}",
         f"# source: {r['source']}"]
    h += [f"#         {x}" for x in r["source_detail"]]
    h += [f"# model: {r['model_name']} ({r['params_billion']}B), {r['num_gpus']} x {r['gpu_type']}",
          f"# measured: {r['measured_metric']} = {r['measured_value']}",
          f"# target_iteration_time_s: {t:.6g}",
          f"# formula: {formula}",
          f"# gradient accumulation steps: {ga} (as the body states it)"]
    if r.get("memory"):
        h.append(f"# memory: {r['memory']}")
    if r.get("needs"):
        h.append(f"# needs: {', '.join(need_tags(r['needs']))}")
        h.append("# needs_detail:")
        h += [f"#   - {x}" for x in r["needs"]]
    if r.get("approx"):
        h.append("# body_approximation:")
        h += [f"#   - {x}" for x in r["approx"]]
    if r.get("settings"):
        h.append("# stated settings (not in the body):")
        h += [f"#   - {x}" for x in r["settings"]]
    h.append("# assumptions:")
    h += [f"#   - {x}" for x in r.get("assumptions", ["none beyond the source's own table"])]
    return "\n".join(h) + "\n"


def csv_row(r: dict, t: float, formula: str, case: str) -> dict:
    p = r["body"]
    return {
        "source": r["source"], "table_or_figure": r["table"], "model_name": r["model_name"],
        "params_billion": r["params_billion"], "num_layers": r["num_layers"],
        "hidden_size": r["hidden_size"], "num_heads": r["num_heads"],
        "ffn_hidden_size": r.get("ffn_hidden_size", ""), "seq_len": r["seq_len"],
        "vocab_size": r["vocab_size"], "global_batch_size": r["global_batch_size"],
        "micro_batch_size": r["micro_batch_size"], "num_gpus": r["num_gpus"],
        "gpu_type": r["gpu_type"], "tensor_parallel": r.get("tp", p.get("tensor", 1)),
        "pipeline_parallel": r.get("pp", p.get("pipeline", 1)),
        "data_parallel": r.get("dp", p["data"]),
        "sequence_parallel": r.get("sp_csv", ""), "recompute": r.get("recompute_csv", ""),
        "zero_stage": r.get("zero_csv", ""), "interleaved_stages": r.get("vp_csv", ""),
        "measured_metric": r["measured_metric"], "measured_value": r["measured_value"],
        "notes": "; ".join(r.get("notes", [])), "target_iteration_time_s": f"{t:.6g}",
        "formula": formula, "framework": r["framework"], "dtype": r["dtype_csv"],
        "fsdp_or_zero": r["fsdp_or_zero"], "case_file": case,
        "published_memory": r.get("memory", ""),
        "needs": " ".join(need_tags(r.get("needs", []))),
    }


VALIDATION = HERE.parent.parent.parent / "scenarios" / "validation"


def main() -> int:
    rows = []
    for r in RUNS:
        t, formula = target_seconds(r)
        if r.get("formula_note"):
            formula += "; " + r["formula_note"]
        name = f"{r['id']}.yaml"
        if (VALIDATION / name).is_file():  # moved: its needs are met (framework: key added)
            rows.append(csv_row(r, t, formula, f"scenarios/validation/{name}"))
            continue
        (HERE / name).write_text(header(r, t, formula) + body(r))
        rows.append(csv_row(r, t, formula, f"benchmarks/data/validation-pending/{name}"))
    with open(HERE / "runs.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} cases and runs.csv")
    return 0


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
