"""CUDA graphs: the host cost of the kernels a stack captures (scenario `training.cuda_graphs`).

What the stack's code does (NVIDIA/Megatron-LM 92c8482e, the commit Megatron-Bridge
@00b7660b pins; Transformer Engine `make_graphed_callables`): a captured region's kernels
are recorded once and replayed by one `cudaGraphLaunch` per forward and one per backward
(TE's graphed callable is an autograd function whose backward replays the backward graph),
so the host pays one graph launch where it paid a launch per kernel; the kernels' device
time is unchanged. Megatron-Core's regions (megatron/core/transformer/transformer_layer.py
`_te_cuda_graph_capture`, `_get_submodules_under_cudagraphs`; cuda_graphs.py
`_layer_is_graphable`):

- attn: `_forward_attention`, the input norm, the attention and its bias-dropout-add
  (here `ln1` .. `dropout_residual1`);
- moe_router: the pre-MLP norm and the router (`ln2` .. `moe_route`); the graph ends where
  `MoELayer.route` raises `MoECudaGraphPartialCaptureSignal` (moe/moe_utils.py
  `maybe_skip_or_early_return_by_cudagraph`) and the rest of the layer runs eagerly;
- moe_preprocess (with moe_router): also `MoELayer.preprocess`, the dispatcher's
  bookkeeping and the permutation (`ln2` .. `moe_dispatch`). The host sync stays outside the
  graph: with this scope `MoEAlltoAllTokenDispatcher` moves its device-to-host copies from
  "before_permutation_1" to "before_ep_alltoall" (token_dispatcher.py `cuda_dtoh_point`),
  after the graph, and syncs there as before. Of the dispatcher's launches before the sync
  (framework profile `moe_host.dispatcher_kernels`) the copies stay eager (`DTOH_COPIES`);
- mlp: a dense layer's pre-MLP norm, MLP and residual (`ln2` .. `dropout_residual2`); moe:
  the same of an MoE layer (drop-and-pad only); mamba: a state-space layer (`MambaLayer`,
  `ln1` .. `dropout_residual1` of a layer with `ssm_*` ops; attn does not capture it);
  an empty scope: the whole layer;
- full_iteration (impl local, `FullCudaGraphWrapper`): the whole forward and backward of every
  micro-batch, one launch an iteration: no host cost per kernel is priced.

The backward of a region is the reverse run of its ops' backward (`<end>.bwd` ..
`<start>.bwd`). Each maximal run of captured ops in the order the host issues them costs one
graph launch (`launch_s`, the framework profile's `launch.graph_launch_us`); a captured op
inside a run costs nothing. Graphed regions keep static input and output buffers of their
own (TE's `static_input_surface`, the graph's private memory pool), which is not priced
(Megatron-Core's doc: 'CUDA graphs ... keep static memory'; not counted here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Graphs", "graphs_for", "captured_names", "host_times", "DTOH_COPIES"]

# the dispatcher's device-to-host copies before its sync, which stay eager under
# moe_preprocess (core_v0.15.0 / 92c8482e token_dispatcher.py _maybe_dtoh_and_synchronize:
# tokens_per_expert, input_splits, output_splits, output_splits_tp)
DTOH_COPIES = 4

_ATTN = ("ln1", "dropout_residual1")
_REGIONS: dict[str, tuple[str, str]] = {
    "attn": _ATTN,
    "moe_router": ("ln2", "moe_route"),
    "moe_preprocess": ("ln2", "moe_dispatch"),
    "mlp": ("ln2", "dropout_residual2"),
    "moe": ("ln2", "dropout_residual2"),
}
_MOE_SCOPES = ("moe", "moe_router", "moe_preprocess")


@dataclass(frozen=True)
class Graphs:
    """The regions a run captures: (first op, last op) names of the forward regions of an MoE
    layer (`moe`) and of a dense layer (`dense`); `launch_s` host seconds per graph launch;
    `whole`: every op (full_iteration); `preprocess`: the MoE dispatcher's preprocessing is
    captured (its bookkeeping launches but the copies leave the host's eager count)."""

    moe: tuple[tuple[str, str], ...] = ()
    dense: tuple[tuple[str, str], ...] = ()
    launch_s: float = 0.0
    mamba: tuple[tuple[str, str], ...] = ()  # a state-space layer's (its ops `ssm_*`)
    whole: bool = False
    preprocess: bool = False


def graphs_for(cuda_graphs: Any, launch_s: float) -> Graphs | None:
    """The Graphs of a scenario's `training.cuda_graphs`, or None for impl none."""
    if cuda_graphs.impl == "none":
        return None
    scope = tuple(cuda_graphs.scope)
    if "full_iteration" in scope:
        return Graphs(launch_s=launch_s, whole=True)
    if not scope:  # every layer whole (a layer of only an MLP or a mixer too)
        layer = (("ln1", "dropout_residual2"), ("ln2", "dropout_residual2"), _ATTN)
        return Graphs(layer, layer, launch_s, (_ATTN,))
    attn = (_ATTN,) if "attn" in scope else ()
    mlp = next((_REGIONS[s] for s in ("moe", "moe_preprocess", "moe_router") if s in scope),
               None)
    dense = attn + ((_REGIONS["mlp"],) if "mlp" in scope else ())
    return Graphs(attn + ((mlp,) if mlp else ()), dense, launch_s,
                  (_ATTN,) if "mamba" in scope else (),
                  preprocess="moe_preprocess" in scope)


def _spans(names: Sequence[str], start: str, end: str) -> set[int]:
    """Positions from each `start` through the next `end`, inclusive."""
    out: set[int] = set()
    i = 0
    while i < len(names):
        if names[i] == start:
            j = next((k for k in range(i, len(names)) if names[k] == end), None)
            if j is None:
                break
            out.update(range(i, j + 1))
            i = j + 1
        else:
            i += 1
    return out


def captured_names(ops: Sequence[Any], graphs: Graphs, moe_layer: bool) -> frozenset[str]:
    """Names of the ops of `ops` (a block's forward or backward, in program order) inside a
    captured region: its forward regions, or their backward mirrors."""
    names = [op.name for op in ops]
    if graphs.whole:
        return frozenset(names)
    hit: set[int] = set()
    mixer = any(n.startswith("ssm_") for n in names)  # a Mamba layer: ln1 .. its residual
    for start, end in graphs.mamba if mixer else graphs.moe if moe_layer else graphs.dense:
        hit |= _spans(names, start, end) | _spans(names, f"{end}.bwd", f"{start}.bwd")
    return frozenset(names[i] for i in hit)


def host_times(ops: Sequence[Any], captured: frozenset[str], graphs: Graphs | None,
               eager_s: Callable[[Any], float]) -> list[float]:
    """Host seconds per op of `ops` in the order the host issues them: an op outside the
    captured set costs `eager_s(op)`; a run of captured ops costs one graph launch, on its
    first op (none at all under full_iteration)."""
    out: list[float] = []
    inside = False
    for op in ops:
        if graphs is not None and op.name in captured:
            out.append(0.0 if inside or graphs.whole else graphs.launch_s)
            inside = True
        else:
            out.append(eager_s(op))
            inside = False
    return out
