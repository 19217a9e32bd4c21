"""Model states (parameters, gradients, optimizer states) per device, and the optimizer step.

Mixed-precision training keeps 16-bit parameters and gradients and an fp32 master copy with
the optimizer's moments: 2 + 2 + K bytes per parameter, K = 12 for Adam (Rajbhandari et al.
2020, "ZeRO", Sec. 3.1). Optimizer sharding over the N data-parallel ranks divides the
optimizer states (stage 1), then the gradients (stage 2), then the parameters (stage 3):
16Psi, 4Psi + 12Psi/N, 2Psi + 14Psi/N, 16Psi/N (ZeRO, Fig. 1). In fp32 training there is no
master copy, so K drops by 4.

The optimizer's states may be kept in bf16 (`training.optimizer_dtype: bf16`: Apex
DistributedFusedAdam's `dtype`, "datatype for optimizer state", set by NeMo's `optim.dtype`):
each moment takes 2 bytes, and a master copy of the weights is kept only where it differs
from the model's weights. NeMo's MegatronBaseModel.setup_optimization (NVIDIA/NeMo
nemo/collections/nlp/models/language_modeling/megatron_base_model.py, 2024) passes
`store_params = True` when `fp8_params` (the weights are FP8, the optimizer keeps a copy in
its own dtype), `False` when the optimizer dtype equals the model's (bf16 states of a bf16
model: no master copy), and a full copy otherwise; so Adam keeps 2 x 2 = 4 bytes per
parameter (6 with FP8 weights) instead of 12. (Its fp32 case stores 16-bit remainders,
`store_param_remainders`, 10 bytes: not modelled, K stays 12.)

PyTorch FSDP2 (`fully_shard`, the framework profile's `sharding.state_layout: fsdp2`) lays
the states of stage 3 out otherwise (`STATE_LAYOUTS`): each parameter's shard is kept in the
dtype the model was built in, fp32, and is the optimizer's master copy
(torch/distributed/fsdp/_fully_shard/_fsdp_param.py `FSDPParam._init_sharded_param`: the
sharded DTensor wraps a chunk of the original fp32 parameter; `MixedPrecisionPolicy.
param_dtype` bf16 only casts it when it is gathered, `_fsdp_collectives.py
foreach_all_gather` / `FSDPParam.all_gather_inputs`), so a device holds 4 bytes of sharded
parameters and the optimizer only its moments (8 for Adam): 4 + 8 per parameter over N,
no 16-bit shard. Its gradients exist only from the backward to the step:
`foreach_reduce` makes each unit's sharded gradient (`reduce_dtype` fp32) as the unit's
reduce-scatter ends (`_fsdp_collectives.py foreach_reduce`, `new_sharded_grad`, assigned to
`sharded_param.grad` or accumulated into it), and `optimizer.zero_grad()` sets them to None
after the step (torch/optim/optimizer.py `zero_grad(set_to_none=True)`, the default). So
under that layout `model_state_bytes` counts no gradients: the lowering allocates each
unit's sharded gradient with its first reduce-scatter and frees them all with the step
(`lower.zero3`, `lower.step.finish`).
"""

from __future__ import annotations

from typing import Any

from simulator.config.scenario.schema import DTYPE_BYTES
from simulator.cost.specs import ComputeSpec
from simulator.engine.tasks import Alloc

__all__ = ["model_state_bytes", "optimizer_spec", "local_params", "STATE_BYTES", "OPTIMIZER_FLOPS",
           "state_bytes_per_param", "state_dtype_of", "STATE_LAYOUTS", "fsdp2_layout",
           "fsdp2_bytes_per_param",
           "framework_overhead_bytes", "fp8_weight_copy_bytes"]

STATE_BYTES = {"adam": 12, "momentum": 8, "sgd": 4}  # mixed precision: fp32 master + moments
OPTIMIZER_FLOPS = {"adam": 12.0, "momentum": 4.0, "sgd": 2.0}  # per parameter per step
# how a stack lays out the states of stage 3 (module docstring): ZeRO's 16-bit shard beside
# the optimizer's master copy, gradients held all step; FSDP2's fp32 shard that is the
# master copy, gradients from the backward to the step (set_to_none)
STATE_LAYOUTS = ("zero", "fsdp2")


def fsdp2_layout(layout: str, shard: int, offload_states: bool) -> bool:
    """Whether FSDP2's state layout applies: the stack's `layout` is "fsdp2" and the run
    shards its parameters (stage 3) with the optimizer's states on the device."""
    return layout == "fsdp2" and shard >= 3 and not offload_states


def state_dtype_of(optimizer_dtype: str, moments_dtype: str | None = None) -> str:
    """The optimizer's state dtype as the functions here take it: `optimizer_dtype`, or
    'MASTER/MOMENTS' where `training.moments_dtype` differs from it (Megatron-Core's
    precision-aware optimizer, --main-params-dtype fp32 --exp-avg-dtype bf16
    --exp-avg-sq-dtype bf16; DeepSeek-V3's BF16 moments with FP32 master weights,
    arXiv:2412.19437 Sec. 3.3.3)."""
    if moments_dtype is None or moments_dtype == optimizer_dtype:
        return optimizer_dtype
    return f"{optimizer_dtype}/{moments_dtype}"


def state_bytes_per_param(optimizer: str, dtype: str, state_dtype: str = "fp32",
                          fp8_params: bool = False) -> int:
    """Optimizer-state bytes per parameter (K): its moments in `state_dtype`, plus a master
    copy of the weights in `state_dtype` where the model's weights are not already that
    copy (see the module docstring): 12 / 8 / 4 for Adam / momentum / SGD of a 16-bit
    model in fp32 states, 4 less in fp32 training; Adam in bf16 states 4 (6 with FP8
    weights). `state_dtype` 'MASTER/MOMENTS' (`state_dtype_of`): the master copy in
    MASTER, the moments in MOMENTS (Adam in fp32 / bf16: 4 + 2 x 2 = 8)."""
    master_dtype, _, moments_dtype = state_dtype.partition("/")
    sb = DTYPE_BYTES[master_dtype]
    mb = DTYPE_BYTES[moments_dtype or master_dtype]
    moments = (STATE_BYTES[optimizer] - 4) // 4
    weights = DTYPE_BYTES[dtype]
    master = fp8_params or weights != sb
    return moments * mb + (sb if master else 0)


def fsdp2_bytes_per_param(optimizer: str, dtype: str, state_dtype: str = "fp32",
                          fp8_params: bool = False) -> tuple[int, int]:
    """(sharded parameter, optimizer state) bytes per parameter under FSDP2's layout (module
    docstring): the shard in the master dtype, which is the optimizer's master copy, and
    `state_bytes_per_param` without that copy (Adam of a bf16 model: 4 and 8)."""
    master = DTYPE_BYTES[state_dtype.partition("/")[0]]
    k = state_bytes_per_param(optimizer, dtype, state_dtype, fp8_params)
    return master, k - (master if fp8_params or DTYPE_BYTES[dtype] != master else 0)


def model_state_bytes(params: int, dtype: str, optimizer: str, shard: int, dp: float,
                      offload_states: bool = False, grad_bytes: float | None = None,
                      unsharded: float = 0.0, state_dtype: str = "fp32",
                      fp8_params: bool = False, kept_states: float = 0.0,
                      layout: str = "zero") -> Alloc:
    """Bytes of model states of a device holding `params` parameters (before optimizer
    sharding), as (category, bytes) pairs: ZeRO stage `shard` over `dp` ranks. Gradients
    take `grad_bytes` per element (default: the dtype's; 4 where bf16 gradients are kept
    in fp32, as Megatron-LM does). `unsharded` of the parameters stay whole whatever the
    stage (MindSpore's parallel_optimizer_threshold). `state_dtype` / `fp8_params`: see
    `state_bytes_per_param`. `kept_states`: elements whose optimizer states stay on the
    device although `offload_states` (those the workers update beside parameter servers).
    `layout` "fsdp2" (`fsdp2_layout`): the sharded parameters in the master dtype and the
    optimizer's moments only; no sharded gradient (the backward makes them), the kept-whole
    elements' gradients as before."""
    e = DTYPE_BYTES[dtype]
    ge = grad_bytes or e
    k = state_bytes_per_param(optimizer, dtype, state_dtype, fp8_params)

    def held(per: float, sharded: bool) -> float:
        return (params - unsharded) * per / (dp if sharded else 1) + unsharded * per

    if fsdp2_layout(layout, shard, offload_states):
        master, moments = fsdp2_bytes_per_param(optimizer, dtype, state_dtype, fp8_params)
        return (("parameters", held(master, True)), ("gradients", unsharded * ge),
                ("optimizer_states", held(moments, True)))

    return (
        ("parameters", held(e, shard >= 3)),
        ("gradients", held(ge, shard >= 2)),
        ("optimizer_states", kept_states * k if offload_states else held(k, shard >= 1)),
    )


def local_params(params: float, shard: int, dp: float, unsharded: float = 0.0) -> float:
    """Parameter elements a device's optimizer updates: its shard of `params` under a
    sharded optimizer, the `unsharded` ones (parallel.optimizer_threshold_kb) whole."""
    if shard < 1:
        return params
    return (params - unsharded) / dp + unsharded


def optimizer_spec(params: int, dtype: str, optimizer: str, shard: int, dp: float,
                   grad_bytes: float | None = None, state_dtype: str = "fp32",
                   fp8_params: bool = False, unsharded: float = 0.0) -> ComputeSpec:
    """The optimizer step as one memory-bound kernel over the local shard: read the gradient
    (`grad_bytes` per element, default the dtype's) and the states, write the states and the
    16-bit parameter. `unsharded`: elements every rank updates whole (`local_params`)."""
    local = local_params(params, shard, dp, unsharded)
    e = DTYPE_BYTES[dtype]
    k = state_bytes_per_param(optimizer, dtype, state_dtype, fp8_params)
    per_param = (grad_bytes or e) + 2 * k + e
    return ComputeSpec("optimizer_step", "optimizer", OPTIMIZER_FLOPS[optimizer] * local,
                       per_param * local, dtype, "optimizer")


def framework_overhead_bytes(overheads: Any, communicators: int) -> float:
    """Device memory a training stack takes besides the model's tensors (framework profile
    `memory_overheads`): the CUDA/runtime context, the collective library's buffers
    (`comm_buffer_bytes` x `comm_buffers_per_communicator` per communicator the device is
    in: NCCL's 4 MiB Simple-protocol FIFO per channel per ring connection; HCCL's
    2 x HCCL_BUFFSIZE), and the library workspaces. A figure the profile leaves null (not
    found in public sources) counts 0. Allocator fragmentation is not counted: no public
    figure states it as a rule."""
    context = overheads.cuda_context_bytes or 0
    per_comm = (overheads.comm_buffer_bytes or 0) * overheads.comm_buffers_per_communicator
    return float(context + per_comm * communicators + (overheads.workspace_bytes or 0))


def fp8_weight_copy_bytes(static: Alloc, copy_bytes_per_param: float, dtype_bytes: float,
                          fp8_share: float) -> float:
    """FP8 weight copies (the e4m3 weight and its transpose, `copy_bytes_per_param` each
    parameter of an FP8 GEMM) of a device whose `parameters` category holds its
    `dtype_bytes`-wide weights; `fp8_share` of them feed FP8 GEMMs."""
    params = sum(b for cat, b in static if cat == "parameters") / dtype_bytes
    return params * fp8_share * copy_bytes_per_param
