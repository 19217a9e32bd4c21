"""The parallel and training sections of a Megatron-Bridge config's import (`bridge`), from
the degrees `mcore_config.degrees` reads (`model.*_model_parallel_size`, data parallel the
rest of the world): the schedule,
sequence parallel, the distributed optimizer, recompute, the tensor-parallel overlap, and
the batch. Megatron-Core's rules (TransformerConfig, DistributedDataParallelConfig) as
Megatron-Bridge passes them on."""

from __future__ import annotations

from typing import Any

from simulator.config.imports.cuda_graphs_import import cuda_graphs_section
from simulator.config.imports.mcore_config import batch_sizes
from simulator.config.imports.mindformers_source import MfConfig

__all__ = ["parallel", "training"]

_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act")


def _modules(cfg: MfConfig) -> list[str] | None:
    given = cfg.get("model.recompute_modules")
    if given is None or given == ["core_attn"]:  # Megatron-Core's default: the stack's
        return None
    if not isinstance(given, list) or not given or any(m not in _MODULES for m in given):
        raise cfg.error("model.recompute_modules", f"found {given!r}; expected a list of "
                        f"{', '.join(_MODULES)}")
    return list(given)


def _recompute(cfg: MfConfig, lenient: bool) -> tuple[str, list[str] | None]:
    """(none | selective | full, the modules of a selective one other than the default);
    full over part of a chunk's layers (`block`, fewer than its layers) refused."""
    granularity = cfg.get("model.recompute_granularity")
    if granularity is None:
        return "none", None
    if granularity not in ("selective", "full"):
        raise cfg.error("model.recompute_granularity", f"found {granularity!r}; allowed: "
                        "null, 'selective', 'full'")
    if granularity == "selective":
        return "selective", _modules(cfg)
    method = cfg.get("model.recompute_method")
    if method not in ("uniform", "block"):
        raise cfg.error("model.recompute_method", f"found {method!r}; full recompute needs "
                        "'uniform' or 'block'")
    n = cfg.integer("model.recompute_num_layers", None, lo=0)
    if n is None:
        raise cfg.error("model.recompute_num_layers", "missing: full recompute needs it")
    if method == "block":
        key = "model.recompute_num_layers"
        if not lenient:
            raise cfg.error(key, f"{n} with method 'block': part of each stage recomputed, "
                            "not simulated (use method 'uniform'); --lenient imports it as "
                            "every layer")
        cfg.notes.append(f"{key} {n} (block) imported as every layer")
    elif n > 1:
        cfg.notes.append(f"model.recompute_num_layers {n} (uniform): simulated as a "
                         "checkpoint per layer (the same recompute, more inputs kept)")
    return "full", None


def _sharded(cfg: MfConfig) -> int:
    """1 with the distributed optimizer (`ddp.` or `optimizer.use_distributed_optimizer`,
    which Megatron-Bridge keeps equal), else 0."""
    given = [cfg.flag(k) for k in ("ddp.use_distributed_optimizer",
                                   "optimizer.use_distributed_optimizer") if k in cfg.values]
    if len(set(given)) > 1:
        raise cfg.error("optimizer.use_distributed_optimizer", "differs from "
                        "ddp.use_distributed_optimizer: one optimizer")
    return 1 if given and given[0] else 0


def parallel(cfg: MfConfig, d: dict[str, int], tp_comm_default: bool,
             lenient: bool) -> dict[str, Any]:
    """The parallel section; `tp_comm_default`: what the stack's profile resolves
    `overlap.tp_comm: auto` to (written only when the config says otherwise)."""
    p: dict[str, Any] = {"data": d["data"], "tensor": d["tensor"], "pipeline": d["pipeline"]}
    for k in ("context", "expert"):
        if d[k] > 1:
            p[k] = d[k]
    vp = cfg.integer("model.virtual_pipeline_model_parallel_size", None) or 1
    p.update(schedule="interleaved_1f1b" if vp > 1 else "1f1b", virtual_stages=vp)
    p["sequence_parallel"] = cfg.flag("model.sequence_parallel") and d["tensor"] > 1
    p["optimizer_shard"] = _sharded(cfg)
    p["recompute"], modules = _recompute(cfg, lenient)
    if modules is not None:
        p["recompute_modules"] = modules
    p["comm_fusion"] = {"mode": "auto"}
    tp_comm = any(cfg.flag(k) for k in ("comm_overlap.tp_comm_overlap",
                                        "model.tp_comm_overlap"))
    if d["tensor"] > 1 and tp_comm != tp_comm_default:
        p["overlap"] = {"tp_comm": tp_comm}
    if _moe_a2a(cfg):
        p.setdefault("overlap", {})["moe_a2a"] = True
    if (dispatcher := _dispatcher(cfg)) != "alltoall":
        p["expert_dispatcher"] = dispatcher
    return p


def _dispatcher(cfg: MfConfig) -> str:
    """`parallel.expert_dispatcher` from model.moe_token_dispatcher_type (Bridge's MoE
    providers: alltoall) and, for flex, model.moe_flex_dispatcher_backend (Megatron-Core's
    default deepep; Bridge's flex_dispatcher_backend.py sets both for its recipes) or the
    deprecated model.moe_enable_deepep. allgather is not modelled."""
    kind = cfg.text("model.moe_token_dispatcher_type", "alltoall", ("alltoall", "flex"))
    backend = "deepep" if cfg.values.get("model.moe_flex_dispatcher_backend") is None else \
        cfg.text("model.moe_flex_dispatcher_backend", "deepep", ("deepep", "hybridep"))
    if cfg.flag("model.moe_enable_deepep") and (kind != "flex" or backend != "deepep"):
        raise cfg.error("model.moe_enable_deepep", "true needs moe_token_dispatcher_type "
                        "flex and no other backend, as Megatron-Core asserts ('DeepEP backend "
                        "is only supported with flex token dispatcher.')")
    return backend if kind == "flex" else kind


_A2A = ("comm_overlap.overlap_moe_expert_parallel_comm", "model.overlap_moe_expert_parallel_comm")
_WGRAD = ("comm_overlap.delay_wgrad_compute", "model.delay_wgrad_compute")


def _moe_a2a(cfg: MfConfig) -> bool:
    """Megatron-Core's overlap_moe_expert_parallel_comm (`parallel.overlap.moe_a2a`), given
    in Bridge's comm_overlap section or on the model; delay_wgrad_compute is priced with it
    (`lower.a2a_overlap`), and alone Megatron-Core refuses it (transformer_config.py:
    'overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute')."""
    on = any(cfg.flag(k) for k in _A2A)
    wgrad = [k for k in _WGRAD if cfg.flag(k)]
    if wgrad and not on:
        raise cfg.error(wgrad[0], "true needs overlap_moe_expert_parallel_comm true, as "
                        "Megatron-Core asserts ('overlap_moe_expert_parallel_comm must be "
                        "enabled when enabling delay_wgrad_compute')")
    return on


def training(cfg: MfConfig, d: dict[str, int]) -> dict[str, Any]:
    gbs, micro = batch_sizes(cfg, d, "train")
    name = cfg.get("optimizer.optimizer", "adam")
    if name != "adam":
        raise cfg.error("optimizer.optimizer", f"found {name!r}; the optimizers simulated: "
                        "adam")
    out: dict[str, Any] = {"global_batch_size": gbs, "micro_batch_size": micro,
                           "optimizer": "adam"}
    keys = ("model.cuda_graph_impl", "model.cuda_graph_scope")
    graphs = cuda_graphs_section(cfg.get(keys[0]), cfg.get(keys[1]), keys, cfg.error)
    if graphs is not None:
        out["cuda_graphs"] = graphs
    return out
