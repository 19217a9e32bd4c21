"""The framework profile's host and mixture-of-experts sections (`launch`, `moe_host`, `moe`):
optional, present where the stack's code or a measurement states them
(`simulator.config.framework.schema` holds the rest)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

__all__ = ["Closed", "Launch", "MoeHost", "Moe"]

Text = StrictStr | None


class Closed(BaseModel):
    """A frozen section that refuses unknown keys (every framework profile section)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Launch(Closed):
    """How the stack issues its kernels from the host, and what that costs per kernel.

    `eager`: every operator goes through Python, the PyTorch dispatcher and autograd and one
    cudaLaunchKernel; `compile`: torch.compile (Inductor) launches its fused kernels from a
    generated Python wrapper; `cuda_graphs`: one graph launch replays every kernel it
    captured (the host cost per kernel vanishes). `host_us_per_kernel` is the measured host
    time per launched kernel, which bounds from below how fast a run of small kernels goes
    (`simulator.lower.costs.price_ops`). `graph_launch_us`: the host time of one replay of
    a captured CUDA graph, which a run's graphed regions cost instead of their kernels'
    launches (scenario `training.cuda_graphs`, `simulator.lower.cuda_graphs`;
    `graph_source`); none: not measured, a graph launch costs the host nothing."""

    mode: Literal["eager", "compile", "cuda_graphs"]
    host_us_per_kernel: Annotated[StrictFloat, Field(ge=0, le=1e4, allow_inf_nan=False)]
    source: Text = None
    graph_launch_us: Annotated[StrictFloat, Field(ge=0, le=1e5, allow_inf_nan=False)] | \
        None = None
    graph_source: Text = None


class MoeHost(Closed):
    """What a mixture-of-experts layer costs the host in this stack (`simulator.lower.
    moe_host`): `dispatcher_sync`, the all-to-all token dispatcher copies the tokens per
    expert to the host and waits for the device once per layer's forward when dropless
    (`sync_source` cites the code); `dispatcher_kernels`, what the dispatcher launches for
    its own bookkeeping before each sync (counted in the same code); `host_us_per_kernel`,
    the measured host time per kernel launched inside a layer, which each launch in such a
    layer costs (`source`); the kernels per local expert are counted from the stack's code
    (`expert_launches_source`). `loop_us_per_gemm` and `loop_us_per_kernel`: the host time of
    a GEMM and of another kernel that a C++ loop issues back to back inside one Python
    operator (Transformer Engine's per-expert GEMMs, split quantizes and scale swizzles), which
    pay no Python frame, dispatcher or autograd node of their own (`loop_source`); none: such a
    launch costs `host_us_per_kernel` as any other."""

    dispatcher_sync: StrictBool
    host_us_per_kernel: Annotated[StrictFloat, Field(ge=0, le=1e4, allow_inf_nan=False)]
    # the dispatcher's own launches before each sync (counts, their all-gather, copies)
    dispatcher_kernels: Annotated[StrictInt, Field(ge=0, le=1000)] = 0
    sync_source: Text = None
    expert_launches_source: Text = None
    source: Text = None
    loop_us_per_gemm: Annotated[StrictFloat, Field(ge=0, le=1e4, allow_inf_nan=False)] | \
        None = None
    loop_us_per_kernel: Annotated[StrictFloat, Field(ge=0, le=1e4, allow_inf_nan=False)] | \
        None = None
    loop_source: Text = None


class Moe(Closed):
    """How the stack's mixture-of-experts layers compute: `probs_in_activation`, the grouped
    experts multiply the routing weights into their activation output and the combine
    (unpermute) sums the expert outputs unweighted, keeping nothing for its backward
    (`simulator.program.moe_saved.probs_in_activation`); `source` cites the code."""

    probs_in_activation: StrictBool = False
    source: Text = None
