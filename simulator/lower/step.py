"""The end of an iteration in the lowering (`lower.lowering.Lowering`): the deferred
data-parallel reductions, the gradient synchronisation on the other mesh axes, and the
optimizer step, on the device, on the host (ZeRO-Offload) or on parameter servers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.cost.specs import ComputeSpec
from simulator.lower.device_states import state_bytes, state_ranks
from simulator.lower.host import host_optimizer_s, offload_step_s
from simulator.lower.nvme import swap_chain
from simulator.lower.state import local_params, optimizer_spec

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering

__all__ = ["finish", "grad_buffer_s"]


def finish(low: Lowering, dev: int, vss: list[int]) -> None:
    """Deferred reductions (no overlap), the gradient synchronisation on the other axes,
    the optimizer step (on the device, or on the host), the parameter all-gather."""
    compute = low.b.streams[(dev, "compute")]
    if not low.par.overlap.grad_reduce and not low.dp.per_unit:
        for vs in vss:
            for mb in low.micro_range(vs):
                low.dp.reduce(dev, mb, vs, [compute[-1]])
    last_comm = tuple(low.b.streams[(dev, s)][-1] for s in ("dp", "dp_reduce")
                      if low.b.streams.get((dev, s)))
    params = sum(low.work[vs].params for vs in vss)
    deps = last_comm + _grad_sync(low, dev, vss)
    deps += _mirror_sync(low, dev, vss, deps + (compute[-1],))
    deps += _host_ops_step(low, dev, deps + (compute[-1],))
    remote = low.dp.remote_step(dev, params, deps)
    if remote is not None:
        step = remote
    elif low.par.offload.optimizer_states:
        step = _host_optimizer(low, dev, params, deps, vss)
    else:
        spec = optimizer_spec(params, low.prog.dtype, low.sc.training.optimizer,
                              low.par.optimizer_shard, state_ranks(low, vss), low.ge,
                              low.state_dtype, low.fp8_params,
                              sum(low.work[vs].unsharded for vs in vss))
        # FSDP2: zero_grad(set_to_none) after the step frees the sharded gradients
        made = low.dp.made_grads(dev)
        step = low.b.add(("O", dev), device=dev, stream="compute", name="opt",
                          phase="optimizer", duration_s=low.costs.compute_s(spec),
                          deps=deps, free=(("gradients", made),) if made else ())
        step = low.off.after_step(dev, params, step)
    low.dp.after_step(dev, vss, step)


def grad_buffer_s(low: Lowering, mb: int, vs: int, pieces: int) -> tuple[float, ...]:
    """Seconds each of the `pieces` backward pieces of micro-batch mb of virtual stage vs
    adds for the stack's own passes over its gradient buffer (`Program.grad_buffer_passes`
    element reads + writes a step, the second figure only with more than one data-parallel
    rank; framework profile `grad_reduction.buffer_passes`, `.buffer_passes_dp`): all in the
    last micro-batch, each piece's share as its parameters, so a bucket's reduction waits
    for them. Megatron-Core takes each bucket's NaN-check norm and 1/dp pre-scale in
    `Bucket.start_grad_sync` on the compute stream right before the bucket's collective;
    its `zero_grad_buffer` runs at the step's start, priced here with them (the same device
    time on the same stream). Empty: nothing to add."""
    always, with_dp = low.prog.grad_buffer_passes
    passes = always + (with_dp if low.ranks.data > 1 else 0.0)
    if not passes or mb != low.last_micro(vs):
        return ()
    params = low.work[vs].piece_params
    each = params if len(params) == pieces else (sum(params),) * (pieces == 1)
    return tuple(low.costs.compute_s(ComputeSpec(
        "grad_buffer_passes", "elementwise", 0.0, passes * n * low.ge, low.prog.dtype, "bwd"))
        if n > 0 else 0.0 for n in each)


def _mirror_sync(low: Lowering, dev: int, vss: list[int], deps: tuple[int, ...]
                 ) -> tuple[int, ...]:
    """DualPipe (`lower.dualpipe`): device d and device p-1-d hold the same two stages, one
    per direction, so their gradients are summed before the optimizer step (the
    implementation's example adds each copy's gradient to the other's,
    deepseek-ai/DualPipe examples/example_dualpipe.py): an all-reduce of two ranks, which
    moves each device's gradients once to the other (reduce-scatter and all-gather of half
    each), priced as that send."""
    if not low.ranks.mirrored:
        return ()
    mirror = low.ranks.with_stage(dev, low.ranks.pipeline - 1 - low.ranks.stage(dev))
    nbytes = sum(low.work[vs].params for vs in vss) * low.ge
    seconds = low.costs.send_recv_s(nbytes, low.ranks.same_node(dev, mirror))
    buf = (("communication_buffers", nbytes),)
    return (low.b.add(("M", dev), device=dev, stream="pp_bwd", name="mirror_grad_sync",
                       phase="comm", duration_s=seconds, deps=deps,
                       link="fabric" if low.ranks.same_node(dev, mirror) else "nic",
                       comm=(("send_recv", nbytes),), alloc=buf, free=buf),)


def _host_ops_step(low: Lowering, dev: int, deps: tuple[int, ...]) -> tuple[int, ...]:
    """The optimizer step of the parameters operators on the host CPU keep there
    (`lower.host`), after the backward; the device's step follows it (the iteration
    ends when both have), so a wait for it is charged to the optimizer."""
    if not low.prog.host_params:
        return ()
    seconds = host_optimizer_s(low.prog.host_params, low.prog.dtype,
                               low.sc.training.optimizer)
    return (low.b.add(("HO", dev), device=dev, stream="offload", name="host_opt",
                       phase="optimizer", duration_s=seconds, deps=deps),)

def _grad_sync(low: Lowering, dev: int, vss: list[int]) -> tuple[int, ...]:
    """Gradient reductions on non-dp axes (tensor-parallel replicas of sequence-parallel
    norms, ...), once per iteration on the compute stream before the optimizer step, as
    Megatron-LM's finalize_model_grads runs them."""
    sync = [low.work[vs].grad_sync for vs in vss if low.work[vs].grad_sync.comm_s > 0]
    if not sync:
        return ()
    total = sync[0]
    for part in sync[1:]:
        total = total + part
    return (low.b.add(("G", dev), device=dev, stream="compute", name="grad_sync",
                       phase="bwd", duration_s=total.comm_s, comm_s=total.comm_s,
                       comm=total.comm),)

def _host_optimizer(low: Lowering, dev: int, params: int, deps: tuple[int, ...],
                    vss: list[int]) -> int:
    """ZeRO-Offload (Ren et al. 2021, Sec. 4): the reduced gradient shard goes to the
    host over PCIe, the host CPU runs the optimizer on it (its CPU-Adam, Sec. 5.1), and
    the updated 16-bit parameters come back; the device waits for them. Returns the task
    after which the parameters are back.

    The host's step is priced on the host profile as the host-placed operators' is
    (`lower.host.host_optimizer_s`: a socket of the profile `HOST_PROFILE`); the devices of
    a node share its `HOST_SOCKETS` sockets, so one socket updates the shards of
    devices_per_node / HOST_SOCKETS devices, one after another (the default schedule, no
    delayed parameter update: DPU, Sec. 5.2, is off unless asked for)."""
    unsharded = sum(low.work[vs].unsharded for vs in vss)
    local = local_params(params, low.par.optimizer_shard, low.shard_ranks, unsharded)
    # after the backward too (without data-parallel reductions nothing else orders it)
    deps += (low.b.streams[(dev, "compute")][-1],)
    back = 0.0 if low.off.params else local * low.e  # ZeRO-Infinity: stays on the host
    low.off.count(dev, "d2h", local * low.ge)
    low.off.count(dev, "h2d", back)
    d2h = low.b.add(("H", dev, "d2h"), device=dev, stream="offload", name="grad_d2h",
                     phase="offload", duration_s=low.costs.copy_s(local * low.ge),
                     deps=deps)
    step_s = offload_step_s(int(local), low.prog.dtype, low.sc.training.optimizer,
                            low.ranks.devices_per_node)
    if low.par.offload.optimizer_on_nvme:  # ZeRO-Infinity: the states on NVMe (lower.nvme)
        host = swap_chain(low, dev, d2h, step_s, state_bytes(low, params, vss), local)
    else:
        host = low.b.add(("H", dev, "opt"), device=dev, stream="offload", name="host_opt",
                         phase="optimizer", duration_s=step_s, deps=(d2h,))
    h2d = low.b.add(("H", dev, "h2d"), device=dev, stream="offload", name="param_h2d",
                     phase="offload", duration_s=low.costs.copy_s(back),
                     deps=(host,))
    low.b.add(("O", dev), device=dev, stream="compute", name="opt", phase="optimizer",
               duration_s=0.0, deps=(h2d,))
    return h2d
