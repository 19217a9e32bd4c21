"""What a run simulated (docs/contract.md section 3, `config`): the hardware profile and the
software stack actually used, the dtype, the devices, every parallel degree and strategy
knob, the batch sizes; and its one-line rendering for the table and the HTML page."""

from __future__ import annotations

from typing import Any

__all__ = ["run_config", "config_lines"]


def _parallel(sc: Any) -> dict[str, Any]:
    """Every parallel degree (tensor_nd replaces tensor where the scenario gives it) and the
    strategy knobs that decide the time: schedule, recompute, optimizer sharding."""
    p = sc.parallel
    tensor: dict[str, Any] = ({"tensor_nd": list(p.tensor_nd)} if p.tensor_nd
                              else {"tensor": p.tensor})
    return {"data": p.data, **tensor, "pipeline": p.pipeline,
            "virtual_stages": p.virtual_stages, "expert": p.expert, "context": p.context,
            "sequence_parallel": p.sequence_parallel, "schedule": p.schedule,
            "recompute": p.recompute, "optimizer_shard": p.optimizer_shard}


def run_config(result: Any) -> dict[str, Any]:
    """The `config` object of a SimResult."""
    sc = result.scenario
    fw = getattr(result, "framework", None)
    config: dict[str, Any] = {
        "hardware": getattr(result, "hardware", "") or sc.hardware,
        "framework": fw.name if fw is not None else None,
        "dtype": sc.model.dtype, "devices": sc.devices,
        "nodes": sc.cluster.nodes, "devices_per_node": sc.cluster.devices_per_node,
        "parallel": _parallel(sc),
        "global_batch_size": sc.global_batch,
        "micro_batch_size": sc.training.micro_batch_size,
        "grad_accum_steps": sc.grad_accum_steps,
    }
    fp4 = getattr(sc.training, "fp4_recipe", "none")
    if fp4 != "none":  # the GEMMs of the recipe run in FP4 (program.fp8)
        config["fp4_recipe"] = fp4
    if sc.cluster.node_types is not None:
        config["node_types"] = [{"hardware": t.hardware, "nodes": t.nodes}
                                for t in sc.cluster.node_types]
    return config


def config_lines(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) rows: the hardware and stack, the parallel layout, the batch."""
    p = config["parallel"]
    tensor = ("tensor " + "x".join(str(d) for d in p["tensor_nd"]) if "tensor_nd" in p
              else f"tensor {p['tensor']}")
    degrees = [f"data {p['data']}", tensor, f"pipeline {p['pipeline']}"]
    degrees += [f"{k.replace('_', ' ')} {p[k]}" for k in ("virtual_stages", "expert", "context")
                if p[k] != 1]
    knobs = [p["schedule"]] if p["pipeline"] > 1 else []
    knobs += ["sequence parallel"] if p["sequence_parallel"] else []
    knobs += [f"recompute {p['recompute']}"] if p["recompute"] != "none" else []
    knobs += [f"optimizer shard {p['optimizer_shard']}"] if p["optimizer_shard"] else []
    hw = config["hardware"]
    if "node_types" in config:
        hw = " + ".join(f"{t['nodes']} nodes of {t['hardware']}"
                        for t in config["node_types"])
    dtype = config["dtype"] + (f" + {config['fp4_recipe']} GEMMs" if "fp4_recipe" in config
                               else "")
    return [("hardware, stack", f"{hw}, {config['framework']}, {dtype}"),
            ("parallel", " x ".join(degrees) + (f" ({', '.join(knobs)})" if knobs else "")),
            ("batch", f"global {config['global_batch_size']}, micro "
                      f"{config['micro_batch_size']}, {config['grad_accum_steps']} "
                      "accumulation steps")]
