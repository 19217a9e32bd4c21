"""`training.cuda_graphs`: which parts of a training iteration the stack captures in CUDA
graphs (Megatron-Core's --cuda-graph-impl and --cuda-graph-scope; the rules that refuse what
Megatron-Core refuses are in `cuda_graph_rules.py`, the pricing in `simulator/lower/
cuda_graphs.py`).

The names are Megatron-Core's (NVIDIA/Megatron-LM 92c8482e, the commit Megatron-Bridge
@00b7660b pins, megatron/core/transformer/enums.py `CudaGraphScope`, transformer_config.py
`cuda_graph_impl` / `cuda_graph_scope`): `impl` transformer_engine captures per-layer graphs
with Transformer Engine's make_graphed_callables (`TECudaGraphHelper`, cuda_graphs.py),
local with Megatron-Core's own `CudaGraphManager` (an empty scope: a graph per layer) or
`FullCudaGraphWrapper` (scope full_iteration: one graph of the whole forward-backward).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.config.scenario.schema_types import _Closed

__all__ = ["CudaGraphsSpec", "Scope", "SCOPES"]

Scope = Literal["full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"]
SCOPES: tuple[str, ...] = ("full_iteration", "attn", "mlp", "moe", "moe_router",
                           "moe_preprocess", "mamba")


class CudaGraphsSpec(_Closed):
    """The run's CUDA graphs: a captured region's kernels are replayed by one graph launch,
    so the host pays one graph launch (the framework profile's `launch.graph_launch_us`)
    instead of a launch per kernel; a region holding a host sync cannot be captured."""

    impl: Literal["none", "transformer_engine", "local"] = Field(default="none", description=(
        "How the stack captures CUDA graphs (Megatron-Core --cuda-graph-impl): none; "
        "transformer_engine (Transformer Engine's make_graphed_callables, one graph per "
        "layer and scope); local (Megatron-Core's own: a graph per layer, or with scope "
        "full_iteration one graph of the whole forward and backward)."))
    scope: list[Scope] = Field(default_factory=list, description=(
        "What is captured (Megatron-Core --cuda-graph-scope): attn (the attention with its "
        "norm and residual), mlp (a dense layer's MLP), moe (a whole MoE layer: token "
        "dropping only), moe_router (the pre-MLP norm and the router), moe_preprocess (with "
        "moe_router: the dispatcher's preprocessing up to its host sync), mamba, "
        "full_iteration (impl local); empty: every layer whole."))
