"""The `parallel` section of a scenario from a torchtitan job config: the degrees (the data
shard degree -1 taking the rest of the world, as torchtitan's ParallelDims does), FSDP2 as
ZeRO-3, tensor parallelism with sequence parallel (torchtitan's TP plan always shards the
norms along the sequence: parallelize_llama.py `SequenceParallel()`), the pipeline schedule
and split (torchtitan/distributed/pipeline_parallel.py @238fa99), and activation
checkpointing (job_config.py ActivationCheckpoint)."""

from __future__ import annotations

from typing import Any

from simulator.config.imports.torchtitan_source import Toml

__all__ = ["degrees", "parallel_section", "Derived"]

Derived = list[tuple[str, str, str]]  # (scenario key, value, why)

# names of each degree in the three schemas: (2025-) parallelism, (2024-12) training /
# experimental, (2024-04) training
_DEGREES = {
    "replicate": ("parallelism.data_parallel_replicate_degree",
                  "training.data_parallel_replicate_degree"),
    "shard": ("parallelism.data_parallel_shard_degree", "training.data_parallel_shard_degree",
              "training.data_parallel_degree"),
    "tensor": ("parallelism.tensor_parallel_degree", "training.tensor_parallel_degree"),
    "pipeline": ("parallelism.pipeline_parallel_degree", "experimental.pipeline_parallel_degree",
                 "training.pipeline_parallel_degree"),
    "context": ("parallelism.context_parallel_degree", "experimental.context_parallel_degree"),
    "expert": ("parallelism.expert_parallel_degree",),
}


def _degree(toml: Toml, name: str, default: int) -> tuple[int, str | None]:
    key = toml.first(*_DEGREES[name])
    if key is None:
        return default, None
    return toml.integer(key, default, lo=-1 if name == "shard" else 1), key


def degrees(toml: Toml, world: int) -> dict[str, int]:
    """replicate, shard, tensor, pipeline, context, expert; the shard degree -1 is the world
    over the others (ParallelDims._validate: 'dp_shard = self.world_size // (dp_replicate *
    cp * tp * pp)'), and the product must be the world size."""
    d = {name: _degree(toml, name, -1 if name == "shard" else 1)[0] for name in _DEGREES}
    others = d["replicate"] * d["tensor"] * d["pipeline"] * d["context"]
    given = [k for n in ("shard", "replicate", "tensor", "pipeline", "context")
             if (k := _degree(toml, n, 1)[1]) is not None]
    key = given[0] if given else "parallelism.data_parallel_shard_degree"
    if d["shard"] == 0 or d["shard"] < -1:
        raise toml.error(key, f"found {d['shard']}; expected -1 (the rest) or at least 1")
    if d["shard"] == -1:
        if world % others:
            raise toml.error(key, f"the data shard degree -1 (the rest): the world size "
                             f"{world} is not divisible by replicate x TP x PP x CP = {others}")
        d["shard"] = world // others
    if others * d["shard"] != world:
        raise toml.error(key, f"replicate {d['replicate']} x shard {d['shard']} x TP "
                         f"{d['tensor']} x PP {d['pipeline']} x CP {d['context']} = "
                         f"{others * d['shard']}, not the world size {world} (torchtitan "
                         "ParallelDims refuses it)")
    dp = d["replicate"] * d["shard"]
    if dp % d["expert"]:
        raise toml.error(_DEGREES["expert"][0], f"{d['expert']} does not divide the "
                         f"data-parallel size {dp}")
    return d


def _fsdp(toml: Toml, d: dict[str, int], lenient: bool) -> int:
    """ZeRO-3 when the data shard degree is above 1 (FSDP2 fully_shard); HSDP (replicate and
    shard both above 1) shards over the shard degree only, which no scenario key says."""
    if d["replicate"] > 1 and d["shard"] > 1:
        why = (f"HSDP (replicate {d['replicate']} x shard {d['shard']}): the scenario shards "
               "over every data-parallel rank")
        key = _degree(toml, "replicate", 1)[1] or ""
        if not lenient:
            raise toml.error(key, f"changes what torchtitan runs and has no scenario key "
                             f"({why}); --lenient imports it as FSDP over all of them")
        toml.notes.append(f"{key} left out: {why}")
    return 3 if d["shard"] > 1 else 0


def _recompute(toml: Toml, lenient: bool) -> str:
    """none, full, selective op (saves the matmul outputs: `selective`), or selective every
    N-th layer: N 1 is every layer whole (`full`); N > 1 has no scenario key."""
    mode = toml.text("activation_checkpoint.mode", "selective",
                     ("none", "selective", "full", "memory_budget"))
    if mode == "memory_budget":
        raise toml.error("activation_checkpoint.mode", "memory_budget: recompute chosen by "
                         "torch.compile's min-cut under a budget is not simulated (allowed: "
                         "none, selective, full)")
    if mode != "selective":
        return mode
    key = "activation_checkpoint.selective_ac_option"
    option = toml.get(key, "2")
    if option == "op":
        return "selective"
    every = toml.integer(key, 2, lo=1)
    if every == 1:
        return "full"
    why = f"one layer in every {every} recomputed whole (selective_ac_option {str(every)!r}" + \
        ("" if toml.has(key) else ", torchtitan's default") + ")"
    if not lenient:
        raise toml.error(key if toml.has(key) else "activation_checkpoint.mode", f"{why}: "
                         "recompute of part of the layers is not simulated (allowed: 'op', "
                         "or 1: every layer); --lenient imports it as full")
    toml.notes.append(f"activation_checkpoint.selective_ac_option {every} imported as full: "
                      f"{why}")
    return "full"


def _tp_comm(toml: Toml, tp: int) -> bool:
    key = toml.first("parallelism.enable_async_tensor_parallel",
                     "experimental.enable_async_tensor_parallel")
    on = toml.flag(key) if key else False
    if on and tp == 1:
        raise toml.error(key or "", "true with tensor_parallel_degree 1: there is no "
                         "tensor-parallel communication to overlap")
    return on


def parallel_section(toml: Toml, d: dict[str, int], layers: int, lenient: bool,
                     pipeline: dict[str, Any]) -> tuple[dict[str, Any], Derived]:
    """The parallel keys (the schedule and split: `pipeline`) and the derived ones."""
    p: dict[str, Any] = {"data": d["replicate"] * d["shard"], "tensor": d["tensor"],
                         "pipeline": d["pipeline"]}
    if d["context"] > 1:
        p["context"] = d["context"]
    if d["expert"] > 1:
        p["expert"] = d["expert"]
    p.update(pipeline)
    p["sequence_parallel"] = d["tensor"] > 1
    p["optimizer_shard"] = _fsdp(toml, d, lenient)
    p["recompute"] = _recompute(toml, lenient)
    p["comm_fusion"] = {"mode": "auto"}
    if d["tensor"] > 1:
        p["overlap"] = {"tp_comm": _tp_comm(toml, d["tensor"])}
    derived: Derived = [
        ("parallel.data", str(p["data"]), "replicate x shard degree (the shard degree -1: "
         "the world over the other degrees)"),
        ("parallel.comm_fusion", "mode auto", "FSDP2 collectives one per TransformerBlock "
         "(the torchtitan profile's rule)")]
    if layers and d["tensor"] > 1:
        derived.append(("parallel.sequence_parallel", "true", "torchtitan's TP plan shards the "
                        "norms along the sequence (SequenceParallel)"))
    return p, derived
