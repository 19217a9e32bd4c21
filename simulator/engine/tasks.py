"""The lowering's output: per-device task streams with dependencies (`Plan` of `Task`s).

A task runs on one stream of one device; a stream runs its tasks one after another, in the
order the plan lists them; a task starts when its stream is free and every task in `deps`
has finished (and, for a collective under full fidelity, when every member has arrived).
Durations are already priced by the cost model: the engine only keeps the clock.

`Task` is a NamedTuple rather than a frozen dataclass: a GPT-3 175B plan holds tens of
thousands of them and NamedTuple construction is several times cheaper, with the same
immutability and exact repr.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["Task", "Plan", "STREAMS", "CATEGORIES", "Alloc"]

# offload: host-to-device copies (and ZeRO-Offload's); offload_d2h: device-to-host copies
# of offloaded activations and parameters (PCIe is full duplex: each direction has its lanes);
# nvme: ZeRO-Infinity's optimizer states read from and written to the node's NVMe drives
STREAMS: tuple[str, ...] = ("compute", "pp_fwd", "pp_bwd", "dp", "dp_reduce", "offload",
                             "ps_server", "offload_d2h", "nvme")
CATEGORIES: tuple[str, ...] = ("parameters", "gradients", "optimizer_states", "activations",
                               "communication_buffers")
Alloc = tuple[tuple[str, float], ...]  # (memory category, bytes) pairs


class Task(NamedTuple):
    """One unit of work on one stream of one device.

    tid         index in `Plan.tasks` (also the deterministic tie-breaker)
    device      global rank of the (simulated) device
    stream      one of STREAMS
    name        short label: 'F', 'B', 'R' (compute of a virtual stage), 'opt', 'send_fwd',
                'send_bwd', 'grad_reduce', 'param_gather', ...
    phase       'fwd' | 'bwd' | 'recompute' | 'optimizer' | 'comm' | 'offload' | 'nvme'
    micro       micro-batch index, -1 when none
    chunk       virtual pipeline stage index, -1 when none
    duration_s  seconds the stream is busy once the task starts
    comm_s      the part of duration_s spent in critical-path (tensor-parallel) collectives
    deps        tids that must finish first (besides the previous task on the stream)
    link        '' (no shared link), 'nic' or 'fabric': the link it holds while it runs
    group       rendezvous key of a collective whose members are simulated (full fidelity),
                -1 when none; group_size members must arrive before it starts
    comm        (collective, bytes) pairs this task performs, for communication counters
    alloc       memory (category, bytes) allocated when the task starts
    free        memory (category, bytes) freed when the task ends
    units       identical transfers this task runs back to back (consecutive gradient
                buckets collapsed into one task: duration, bytes per unit x units; its
                buffer holds one unit's bytes at a time)
    route       under fair sharing, the fat-tree uplinks a 'nic' transfer climbs through
                (an index into `Plan.routes`); -1: none (inside one leaf, or no tree)
    """

    tid: int
    device: int
    stream: str
    name: str
    phase: str
    micro: int
    chunk: int
    duration_s: float
    comm_s: float = 0.0
    deps: tuple[int, ...] = ()
    link: str = ""
    group: int = -1
    group_size: int = 1
    comm: tuple[tuple[str, float], ...] = ()
    alloc: Alloc = ()
    free: Alloc = ()
    units: int = 1
    route: int = -1

    def __str__(self) -> str:
        mb = f"{self.micro}" if self.micro >= 0 else ""
        return f"d{self.device}/{self.stream}:{self.name}{mb}[{self.duration_s:.3g}s]"


@dataclass(frozen=True)
class Plan:
    """Per-device task streams for one training iteration.

    tasks          every task, indexed by tid
    streams        ((device, stream name, tids in execution order), ...)
    devices        the simulated device ranks, ascending
    represents     for each simulated device, how many real devices behave identically
                   (1 everywhere under full fidelity)
    stage_of       for each simulated device, its pipeline stage
    static_memory  for each simulated device, bytes allocated before the iteration starts
    total_devices  devices in the cluster
    micro_batches  micro-batches per data-parallel replica per iteration
    slowdown       per simulated device, how much slower its compute kernels run while one
                   of its collectives runs beside them (engine.core)
    blocks         (tid, where) of each task that collapses several identical gradient
                   buckets: where = (device, virtual stage, bucket run, first unit), the
                   key the lowering cuts a block at when another transfer must run inside it
    """

    tasks: tuple[Task, ...]
    streams: tuple[tuple[int, str, tuple[int, ...]], ...]
    devices: tuple[int, ...]
    represents: tuple[int, ...]
    stage_of: tuple[int, ...]
    static_memory: tuple[Alloc, ...]
    total_devices: int
    micro_batches: int
    stage_layers: tuple[int, ...] = ()  # layers of each virtual pipeline stage
    extras: tuple[tuple[str, Any], ...] = ()  # strategy figures for the summary (run --json)
    blocks: tuple[tuple[int, tuple[int, int, int, int]], ...] = ()
    # per simulated device (as `devices`), the fraction its compute kernels slow by while a
    # collective of its own runs beside them (hardware efficiency.overlap_compute_slowdown);
    # () or zeros: overlap is free
    slowdown: tuple[float, ...] = ()
    # how transfers on one link share it (engine.core): 'fifo' one after another, each at
    # the link's full rate; 'fair' all at once, n concurrent flows at 1/n of it each
    link_sharing: str = "fifo"
    # under 'fair', the NICs its devices share (`cost.links.nic_sharing`): per simulated
    # device (as `devices`), the NIC resource its 'nic' transfers hold (-1 or (): its own
    # link, as 'fabric'), how many transfers each of its own stands for there (the devices
    # of its NIC it represents, all active: 1 under full fidelity), and how much slower
    # than alone the cost model priced them (their work alone is duration / that); per
    # resource, (resource, device-alone transfers it carries at full rate at once)
    nic_of: tuple[int, ...] = ()
    nic_weight: tuple[int, ...] = ()
    nic_priced: tuple[float, ...] = ()
    nic_slots: tuple[tuple[int, float], ...] = ()
    # under 'fair', the scale-out fat tree (`cost.fabric`, `lower.fabric`): per route
    # (`Task.route`), how much slower than on a non-blocking fabric the cost model priced
    # its transfers (their work alone is divided by that too) and the uplink resources
    # they hold with their weights (the transfers each stands for there); per uplink
    # resource, the device-alone transfers it carries at full rate at once and its tier
    routes: tuple[tuple[float, tuple[tuple[int, int], ...]], ...] = ()
    uplinks: tuple[tuple[float, str], ...] = ()

    def __str__(self) -> str:
        return (f"Plan({len(self.tasks)} tasks on {len(self.devices)} simulated of "
                f"{self.total_devices} devices, {self.micro_batches} micro-batches)")
