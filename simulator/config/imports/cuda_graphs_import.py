"""`training.cuda_graphs` from Megatron-Core's CUDA-graph options, as the Megatron-LM and
Megatron-Bridge importers read them: `cuda_graph_impl` (none | local | transformer_engine;
the deprecated --enable-cuda-graph is local, --external-cuda-graph transformer_engine) and
`cuda_graph_scope` (a list, or a comma-separated string as Megatron-Core's
TransformerConfig.__post_init__ splits it; the deprecated "full" is the empty list, the whole
layer). NVIDIA/Megatron-LM 92c8482e megatron/training/arguments.py (--cuda-graph-impl,
--cuda-graph-scope nargs '+') and megatron/core/transformer/transformer_config.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulator.errors import InputError

__all__ = ["cuda_graphs_section"]

IMPLS = ("none", "local", "transformer_engine")
# Megatron-Core's CudaGraphScope names (megatron/core/transformer/enums.py); the scenario
# schema's (config.scenario.schema_graphs.SCOPES, which imports this package: not imported
# here; tests/test_cuda_graphs.py checks the two agree)
SCOPES = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")


def _scope_list(scope: Any) -> list[str] | None:
    """The scope as a list of names, or None when it is neither a list nor a string."""
    if scope is None:
        return []
    if isinstance(scope, str):
        scope = [s.strip() for s in scope.split(",") if s.strip()]
    if not isinstance(scope, list) or not all(isinstance(s, str) for s in scope):
        return None
    return [] if scope == ["full"] else list(scope)


def cuda_graphs_section(impl: Any, scope: Any, keys: tuple[str, str],
                        error: Callable[[str, str], InputError]) -> dict[str, Any] | None:
    """{'impl': ..., 'scope': [...]} for `impl` and `scope` as a config gives them (None for
    impl none or absent); `keys` name the two in messages, `error(key, message)` makes the
    InputError. The combinations Megatron-Core refuses are refused by the scenario's rules
    (`config.scenario.cuda_graph_rules`)."""
    if impl is None or impl == "none":
        return None
    if impl not in IMPLS:
        raise error(keys[0], f"found {impl!r}; allowed: {', '.join(IMPLS)}")
    names = _scope_list(scope)
    if names is None or any(s not in SCOPES for s in names):
        raise error(keys[1], f"found {scope!r}; expected a list of {', '.join(SCOPES)} "
                    "(or 'full', the whole layer)")
    return {"impl": impl, "scope": names}
