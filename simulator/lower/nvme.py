"""ZeRO-Infinity's NVMe tier for the optimizer states (`parallel.offload.optimizer_states:
nvme`), as tasks on the device's `nvme` stream.

ZeRO-Infinity (Rajbhandari et al. 2021, "ZeRO-Infinity: Breaking the GPU Memory Wall for
Extreme Scale Deep Learning", SC'21) adds the node's NVMe drives below host memory: the
fp32 optimizer states (master weights, momentum, variance) live on NVMe; at each step the
host reads a device's states into pinned host buffers, its CPU-Adam updates them from the
gradients offloaded as under ZeRO-Offload, and writes them back (Sec. 5: the partitioned
states of every data-parallel rank spread over all the nodes' drives, "bandwidth-centric
partitioning", Sec. 6.1; Sec. 6.2 "overlap-centric design"). DeepSpeed implements it in
deepspeed/runtime/swap_tensor/ (partitioned_optimizer_swapper.py,
pipelined_optimizer_swapper.py: `swap_in_optimizer_state`, the step, then
`swap_out_optimizer_state`, sub-group by sub-group, deepspeed/runtime/zero/stage3.py).

What is priced here, per device and iteration:
- the states' bytes S (`lower.state.model_state_bytes`: 12 bytes per parameter of a 16-bit
  model with Adam, over the ZeRO-3 shard) read, then written back;
- the node's drives are shared by its devices, which all swap at once at the step: a read
  takes S x k / R and a write S x k / W, k the devices of a node, R and W the node's
  sequential read and write bandwidth (`hardware.host.nvme_read_GBps`,
  `nvme_write_GBps`);
- the order is DeepSpeed's default: `pipeline_read` and `pipeline_write` are off
  (deepspeed/runtime/zero/offload_config.py), so sub-group after sub-group (`sub_group_size`,
  1e9 elements, deepspeed/runtime/zero/config.py) the read, the host step and the write run
  one after another, which adds up to one read, one step and one write of the whole shard:
  gradients down, states read, host step, states written, parameters up. Nothing of the
  swap overlaps the host step; the device waits for the whole chain (what the device's
  backward hides is the gradient copy only, as under ZeRO-Offload);
- with `parallel.offload.nvme_pipeline_read` / `nvme_pipeline_write` (DeepSpeed's
  pipeline_read / pipeline_write) the sub-groups are tasks of their own (`_pipelined`): the
  next read, or the previous write, runs under the host's step of the current sub-group.
  Reads and writes share the drives one at a time, in DeepSpeed's issue order.

Host memory then holds the swap buffers only: `buffer_count` (4) buffers of the largest
sub-group's fp32 elements (deepspeed/runtime/swap_tensor/optimizer_utils.py:
SwapBufferManager(num_elems=largest_numel, count=buffer_count, dtype)), which also hold the
gradient being stepped; the node's drives hold the states of its devices (`nvme_GB`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from simulator.errors import InputError

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering

__all__ = ["BUFFER_COUNT", "SUB_GROUP_SIZE", "SWAP_ELEMENT_BYTES", "buffer_bytes", "swap_s",
           "swap_chain", "sub_groups"]

BUFFER_COUNT = 4  # offload_optimizer.buffer_count (deepspeed/runtime/zero/offload_config.py)
SUB_GROUP_SIZE = 1_000_000_000  # zero_optimization.sub_group_size (runtime/zero/config.py)
SWAP_ELEMENT_BYTES = 4  # the swapped states and their buffers are fp32


def buffer_bytes(local: float) -> float:
    """Pinned host buffers of a device's optimizer swapper: BUFFER_COUNT buffers of the
    largest sub-group (its shard, or SUB_GROUP_SIZE elements), fp32."""
    return BUFFER_COUNT * min(local, SUB_GROUP_SIZE) * SWAP_ELEMENT_BYTES


def swap_s(low: Lowering, nbytes: float) -> tuple[float, float]:
    """(read seconds, write seconds) of one device's `nbytes` of states, the node's drives
    shared by its devices swapping at once."""
    read, write = low.costs.nvme_read_s, low.costs.nvme_write_s
    if read is None or write is None:
        raise InputError(low.sc.source, "parallel.offload.optimizer_states",
                         "nvme needs the node's NVMe bandwidth (hardware.host.nvme_read_GBps "
                         "and nvme_write_GBps); this cost model has none")
    sharing = low.ranks.devices_per_node
    return read(nbytes * sharing), write(nbytes * sharing)


def swap_chain(low: Lowering, dev: int, d2h: int, step_s: float, states: float,
               local: float) -> int:
    """The states read from NVMe after the gradients reach the host, the host's step, the
    states written back (phase 'nvme': the breakdown's nvme_exposed), sub-group by
    sub-group where the swap is pipelined (`_pipelined`); the task after which the step
    is done."""
    read_s, write_s = swap_s(low, states)
    off = low.par.offload
    if off.nvme_pipeline_read or off.nvme_pipeline_write:
        return _pipelined(low, dev, d2h, (read_s, step_s, write_s), local)
    read = low.b.add(("N", dev, "read", 0), device=dev, stream="nvme", name="nvme_read",
                     phase="nvme", duration_s=read_s, deps=(d2h,))
    host = low.b.add(("H", dev, "opt"), device=dev, stream="offload", name="host_opt",
                     phase="optimizer", duration_s=step_s, deps=(read,))
    return low.b.add(("N", dev, "write", 0), device=dev, stream="nvme", name="nvme_write",
                     phase="nvme", duration_s=write_s, deps=(host,))


def sub_groups(local: float) -> list[float]:
    """A device's shard cut into DeepSpeed's sub-groups of SUB_GROUP_SIZE elements (the
    last one the rest), as fractions of the shard."""
    n = max(1, math.ceil(local / SUB_GROUP_SIZE))
    sizes = [min(SUB_GROUP_SIZE, local - i * SUB_GROUP_SIZE) for i in range(n)]
    return [g / local for g in sizes] if local > 0 else [1.0]


def _pipelined(low: Lowering, dev: int, d2h: int, secs: tuple[float, float, float],
               local: float) -> int:
    """DeepSpeed's pipelined swap (pipelined_optimizer_swapper.py): per sub-group i, the
    read, the host step and the write, each its share of the whole. With pipeline_read,
    `swap_in_optimizer_state` issues sub-group i+1's read once i's has arrived, so it runs
    under i's step; without, i+1's read waits for i's swap-out. With pipeline_write,
    `swap_out_optimizer_state` leaves i's write in flight (the next swap-out waits for it)
    and the host steps i+1 meanwhile; without, the step of i+1 waits for i's write. Reads
    and writes share the drives: one at a time, in the order DeepSpeed issues them."""
    read_s, step_s, write_s = secs
    off, ids = low.par.offload, low.b.ids
    parts = sub_groups(local)
    n = len(parts)
    read = [ids[("N", dev, "read", i)] for i in range(n)]
    write = [ids[("N", dev, "write", i)] for i in range(n)]
    step = [ids[("H", dev, "opt", i)] for i in range(n)]
    order = [("read", 0)]
    for i in range(n):
        if off.nvme_pipeline_read and i + 1 < n:
            order.append(("read", i + 1))
        order.append(("write", i))
        if not off.nvme_pipeline_read and i + 1 < n:
            order.append(("read", i + 1))
    for kind, i in order:  # the drives' queue, in issue order
        if kind == "read":
            deps = (d2h,) if i == 0 else (read[i - 1],) if off.nvme_pipeline_read else \
                (step[i - 1],)
            low.b.add(("N", dev, "read", i), device=dev, stream="nvme", name="nvme_read",
                      phase="nvme", duration_s=read_s * parts[i], deps=deps)
        else:
            low.b.add(("N", dev, "write", i), device=dev, stream="nvme", name="nvme_write",
                      phase="nvme", duration_s=write_s * parts[i], deps=(step[i],))
    for i in range(n):  # the host's steps, one sub-group after another
        waits = (read[i],) if off.nvme_pipeline_write or i == 0 else (read[i], write[i - 1])
        low.b.add(("H", dev, "opt", i), device=dev, stream="offload", name="host_opt",
                  phase="optimizer", duration_s=step_s * parts[i], deps=waits)
    return write[-1]
