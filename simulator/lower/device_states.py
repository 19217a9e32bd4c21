"""What a simulated device holds of the model states (a `Lowering`'s device): its optimizer
states and the ranks they are sharded over, the model states allocated before the iteration,
and the host memory its offload keeps (`lower.state` counts the bytes; this module says over
which ranks and for which of the device's virtual stages)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.engine.tasks import Alloc
from simulator.lower.nvme import buffer_bytes
from simulator.lower.state import model_state_bytes

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering

__all__ = ["state_bytes", "host_bytes", "state_ranks", "model_states", "host_extras"]


def state_bytes(low: Lowering, params: int, vss: list[int]) -> float:
    """A device's optimizer states, counted as the device would hold them
    (`lower.state.model_state_bytes`)."""
    return dict(model_state_bytes(
        params, low.prog.dtype, low.sc.training.optimizer, low.par.optimizer_shard,
        state_ranks(low, vss), False, low.ge,
        unsharded=sum(low.work[vs].unsharded for vs in vss),
        state_dtype=low.state_dtype, fp8_params=low.fp8_params))["optimizer_states"]


def host_bytes(low: Lowering, params: int, vss: list[int]) -> float:
    """Host memory a device's offload keeps there: ZeRO-Offload's optimizer states and
    the gradient shard they are updated from (Ren et al. 2021, Sec. 4.1: 12 + 2 bytes
    per parameter of a 16-bit model with Adam, 182 GB for 13B), or with the states on
    NVMe the swapper's buffers only (`lower.nvme.buffer_bytes`); ZeRO-Infinity's 16-bit
    parameters. Offloaded activations are not counted (they come back each step)."""
    host = 0.0
    local = params / (state_ranks(low, vss) if low.par.optimizer_shard >= 1 else 1)
    if low.par.offload.optimizer_on_nvme:
        host += buffer_bytes(local)
    elif low.par.offload.optimizer_states:
        host += state_bytes(low, params, vss) + local * low.ge
    if low.off.params:
        host += params * low.e
    return host


def state_ranks(low: Lowering, vss: list[int]) -> float:
    """The ranks the optimizer shards a device's parameters over (ZeRO stages 1-2), as
    one divisor of the parameters the optimizer does not keep whole: data x context
    (`shard_ranks`), and with expert parallelism Megatron-Core's two groups, the dense
    parameters over every data-parallel rank (data x context, the `ep` ranks
    included: its data-parallel group) and the experts over the expert-data-parallel
    ranks (data / expert: `shard_ranks`) (megatron/core/optimizer/__init__.py builds one
    distributed optimizer per group). The divisor is the weighted harmonic mean that
    makes params / divisor = dense / (shard_ranks * ep) + experts / shard_ranks."""
    ep = low.ranks.size("ep")
    if ep == 1 or low.par.optimizer_shard not in (1, 2):
        return low.shard_ranks
    params = sum(low.work[vs].params - low.work[vs].unsharded for vs in vss)
    expert = sum(low.work[vs].expert_params for vs in vss)
    if params <= 0:
        return low.shard_ranks
    return params / ((params - expert) / (low.shard_ranks * ep)
                     + expert / low.shard_ranks)


def model_states(low: Lowering, vss: list[int], kept: bool = True) -> Alloc:
    """The model states a device holding `vss` allocates before the iteration
    (`lower.state.model_state_bytes` under the stack's `state_layout`, after offload);
    `kept`: count the states the workers keep beside parameter servers."""
    params = sum(low.work[vs].params for vs in vss)
    return low.off.static(model_state_bytes(
        params, low.prog.dtype, low.sc.training.optimizer, low.par.optimizer_shard,
        state_ranks(low, vss),
        bool(low.par.offload.optimizer_states) or low.dp.remote_optimizer,
        low.ge, unsharded=sum(low.work[vs].unsharded for vs in vss),
        state_dtype=low.state_dtype, fp8_params=low.fp8_params,
        kept_states=sum(low.work[vs].worker_params for vs in vss) if kept else 0.0,
        layout=low.prog.state_layout))


def host_extras(low: Lowering) -> tuple[tuple[str, object], ...]:
    """The most host memory one simulated device's offload keeps (nothing without)."""
    most = max(low.host_bytes.values(), default=0.0)
    nvme = max(low.nvme_bytes.values(), default=0.0)
    return ((("host_memory_bytes_per_device", round(most)),) if most else ()) + (
        (("nvme_bytes_per_device", round(nvme)),) if nvme else ())
