"""Rules of `training.cuda_graphs` (Megatron-Core's --cuda-graph-impl / --cuda-graph-scope):
what Megatron-Core refuses, refused here with the same reason (NVIDIA/Megatron-LM 92c8482e,
the commit Megatron-Bridge @00b7660b pins: megatron/core/transformer/transformer_config.py
`TransformerConfig.__post_init__`, the `cuda_graph_impl != "none"` block), and a captured
region that would hold a host sync (a stream capture cannot wait for the device: the
`.tolist()` / `event.synchronize()` of a dropless MoE dispatcher)."""

from __future__ import annotations

from collections.abc import Iterator

from simulator.config.scenario.schema import Scenario

__all__ = ["cuda_graphs"]

Problem = tuple[str, str]
KEY = "training.cuda_graphs"
_MOE = ("moe", "moe_router", "moe_preprocess")


def cuda_graphs(s: Scenario) -> Iterator[Problem]:
    """The implementation and scope name parts this model has, in a combination Megatron-Core
    accepts, with no host sync inside a captured region, and no recompute over it."""
    g = s.training.cuda_graphs
    if g.impl == "none":
        if g.scope:
            yield f"{KEY}.scope", (f"{list(g.scope)} is read only with {KEY}.impl "
                                   "transformer_engine or local (found none); set it, or "
                                   "remove the scope")
        return
    if s.model.type != "transformer":
        yield f"{KEY}.impl", (f"{g.impl} captures a transformer's layers; a model of type "
                              f"'{s.model.type}' has none (allowed: none)")
        return
    if len(set(g.scope)) != len(g.scope):
        yield f"{KEY}.scope", f"{list(g.scope)} names a scope twice (each at most once)"
        return
    yield from _impl_scope(s)
    yield from _model_parts(s)
    yield from _host_sync(s)
    yield from _recompute(s)


def _impl_scope(s: Scenario) -> Iterator[Problem]:
    """local: a graph per layer or of the whole iteration; transformer_engine: layer parts,
    moe and moe_router not both, moe_preprocess only with moe_router."""
    g, key = s.training.cuda_graphs, f"{KEY}.scope"
    if g.impl == "local":
        if g.scope and g.scope != ["full_iteration"]:
            yield key, (f"{list(g.scope)} with impl local: Megatron-Core's own graphs take "
                        "[full_iteration] or [] (a graph per layer); the other scopes need "
                        "impl transformer_engine")
        return
    if "full_iteration" in g.scope:
        yield key, ("full_iteration needs impl local (Megatron-Core's FullCudaGraphWrapper); "
                    "transformer_engine captures layer parts")
    elif "moe" in g.scope and "moe_router" in g.scope:
        yield key, "moe and moe_router both: moe captures the router already (keep one)"
    elif "moe_preprocess" in g.scope and "moe_router" not in g.scope:
        yield key, ("moe_preprocess is captured only with moe_router (the graph runs from "
                    "the router into the preprocessing): add moe_router")


def _model_parts(s: Scenario) -> Iterator[Problem]:
    """moe scopes need model.moe, mlp a dense layer, mamba model.mamba."""
    g, key = s.training.cuda_graphs, f"{KEY}.scope"
    moe = getattr(s.model, "moe", None)
    for i, scope in enumerate(g.scope):
        if scope in _MOE and moe is None:
            yield f"{key}[{i}]", f"{scope} captures part of model.moe, which this model lacks"
            return
        if scope == "mlp" and moe is not None and moe.every == 1 and moe.first_dense == 0:
            yield f"{key}[{i}]", ("mlp captures a dense layer's MLP; every layer of this "
                                  "model is a mixture of experts (use moe_router or moe)")
            return
        if scope == "mamba" and getattr(s.model, "mamba", None) is None:
            yield f"{key}[{i}]", "mamba captures model.mamba's layers, which this model lacks"
            return


def _host_sync(s: Scenario) -> Iterator[Problem]:
    """A dropless MoE layer's dispatcher waits for the device (`.tolist()` of the token
    counts, `d2h_event.synchronize()`), which no stream capture can hold: a whole-layer
    graph, the whole iteration or scope moe of such a layer cannot be captured
    (Megatron-Core: 'moe cuda graph is only supported with drop-padding MoE'); and with
    the all-to-all dispatcher and a capacity factor the preprocess itself copies to the
    host and waits ('moe_preprocess cuda graph is not supported when there are DtoH copies
    and synchronizations in the preprocess step')."""
    g, key = s.training.cuda_graphs, f"{KEY}.scope"
    moe = getattr(s.model, "moe", None)
    if moe is None:
        return
    whole = "whole iteration" if "full_iteration" in g.scope else (
        "whole layer" if not g.scope else None)
    if moe.dropless and (whole or "moe" in g.scope):
        what = whole or "moe scope"
        yield key, (f"{list(g.scope)} ({what}) would capture a dropless MoE layer's "
                    "dispatcher, which waits for the device each forward (a host sync "
                    "cannot be captured); set model.moe.capacity_factor (drop-and-pad), or "
                    "capture [moe_router, moe_preprocess]")
    elif (not moe.dropless and "moe_preprocess" in g.scope
          and s.parallel.expert_dispatcher == "alltoall"):
        yield key, ("moe_preprocess with token dropping and the all-to-all dispatcher: its "
                    "preprocessing copies the counts to the host and waits, which a graph "
                    "cannot hold (Megatron-Core refuses it); drop moe_preprocess")


def _recompute(s: Scenario) -> Iterator[Problem]:
    """Full recompute, and selective recompute of a captured part, are refused
    (Megatron-Core: 'Full-layer CUDA graphs not supported with activation recomputation';
    '<scope> cuda graph is not supported with <module> recompute'). Selective recompute
    without modules recomputes the attention core (Megatron-Core's default core_attn)."""
    g, p = s.training.cuda_graphs, s.parallel
    if p.recompute == "none":
        return
    if p.recompute == "full" or not g.scope:
        yield "parallel.recompute", (
            f"{p.recompute} with {KEY} {g.impl} {list(g.scope)}: Megatron-Core captures no "
            "graph of a layer it recomputes whole (allowed: selective recompute with a "
            "scope, or no graphs)")
        return
    if g.scope == ["full_iteration"]:
        return
    mods = p.recompute_modules if p.recompute_modules is not None else ["core_attn"]
    clash = {"attn": ("core_attn", "mla_up_proj"), "moe": ("moe_act",)}
    for scope, banned in clash.items():
        hit = next((m for m in mods if m in banned), None) if scope in g.scope else None
        if hit is not None:
            yield "parallel.recompute_modules", (
                f"{hit} recomputes a part of the {scope} graph ({KEY}.scope {list(g.scope)}); "
                f"Megatron-Core refuses it: recompute another module or leave {scope} out")
            return
