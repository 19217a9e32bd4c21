"""Data-parallel gradient reduction and parameter gathering: one strategy per optimizer-
sharding level (ZeRO, Rajbhandari et al. 2020; MindSpore optimizer parallel), each emitting
its collectives on a device's `dp` stream.

- stage 0 (`Replicated`): the gradient buckets of the last micro-batch are all-reduced as
  its backward produces them (PyTorch DDP, Megatron-LM `--overlap-grad-reduce`);
- stage 1 (`ShardedStates`): the buckets are reduce-scattered; after the optimizer step the
  updated parameters are all-gathered, or with `overlap.param_gather` bucket by bucket under
  the next step's first forward, each forward piece waiting for the bucket holding its
  parameters (Megatron-Core's forward pre-hook);
- stage 2 (`ShardedGradients`): as stage 1, and the sharded gradients are reduce-scattered
  after every micro-batch;
- stage 3 (`ShardedParameters`, ZeRO-3 / PyTorch FSDP): parameters stay sharded; each unit
  (the embedding, each layer, the head: FSDP's wrap units, Zhao et al. 2023, Sec. 3) is
  all-gathered right before its forward and again before its backward, prefetched one unit
  ahead (the gather of unit k+1 waits for unit k-1's compute, so at most two units are
  whole at once: FSDP's forward/backward prefetch with limit_all_gathers), held in memory
  until its compute ends; each unit's gradient is reduce-scattered as soon as its backward
  ends, every micro-batch, under the backward of the units before it, on a stream of its
  own (FSDP's post-backward stream) that shares the device's link with the gathers. A
  recompute pass gathers its chunk again, unit by unit (two units whole at most, held until
  the backward ends); with
  `parallel.recompute_comm.optimizer: false` (MindSpore's parallel_optimizer_comm_recompute
  false) it gathers nothing and the forward's gathered units stay whole until the backward
  ends instead (one gather per micro-batch, held from forward to backward).
With one data-parallel rank nothing is emitted (`NoDataParallel`).

`parallel.mode: parameter_server` (`ParameterServer`) replaces the collectives: the last
micro-batch's gradient buckets are pushed to the servers as the backward produces them, the
servers sum and update (the workers run no optimizer and hold no optimizer states), and the
workers pull the updated parameters (closed forms: simulator/cost/parameter_server.py).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.config.hardware import load_profile
from simulator.cost.parameter_server import PsLinks, ps_links, server_update_s, transfer_s
from simulator.cost.specs import GroupSpec
from simulator.errors import InputError
from simulator.lower.buckets import grad_bucket_runs

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering

__all__ = ["DataParallel", "strategy_for", "Bucket"]

Gates = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Bucket:
    """`count` identical consecutive gradient buckets: the backward piece after which they
    are ready, bytes and seconds of each."""

    piece: int
    nbytes: float
    seconds: float
    count: int = 1


class DataParallel:
    """Stage 0, and the shared machinery of the sharded stages."""

    collective = "all_reduce"
    per_unit = False  # compute runs unit by unit (pieces) in every micro-batch

    def collapsible(self) -> bool:
        """Whether identical gradient buckets may run as one task (`Lowering.blocks`)."""
        return True
    remote_optimizer = False  # the optimizer and its states live off the device

    def __init__(self, low: Lowering) -> None:
        self.low = low
        groups = low.ranks.groups()
        self.group: GroupSpec = groups[low.ranks.data_axis or "dp"] if low.ranks.data_axis \
            else GroupSpec(1, 1, low.ranks.devices_per_node)
        self.link = "nic" if self.group.crosses_nodes else "fabric"
        self.buckets = {vs: self._buckets(vs) for vs in range(len(low.work))}

    def _runs(self, vs: int, kind: str) -> tuple[tuple[int, float, int], ...]:
        """Gradient-byte buckets of virtual stage vs under the fusion rule of collective
        `kind` (`parallel.comm_fusion`, its per-kind entry where given)."""
        low = self.low
        mode, mb, index = low.par.comm_fusion.of(kind)
        starts = _group_starts(low, vs, index) if mode == "index" and index else None
        return grad_bucket_runs(low.work[vs].piece_params, low.ge, mode, mb,
                                low.prog.sequence()[0].param_tensors, starts)

    def _buckets(self, vs: int) -> tuple[Bucket, ...]:
        low = self.low
        return tuple(Bucket(i, nb, low.costs.collective_s(self.collective, nb, self.group), n)
                     for i, nb, n in self._runs(vs, self.collective))

    def gather_buckets(self, vs: int) -> tuple[Bucket, ...]:
        """The parameter all-gather's buckets (in gradient bytes, launch order): the
        gradient buckets, unless `comm_fusion.all_gather` fuses the gathers its own way."""
        own = self.low.par.comm_fusion.all_gather
        if own is None or own.mode == "auto":
            return self.buckets[vs]
        return tuple(Bucket(i, nb, 0.0, n) for i, nb, n in self._runs(vs, "all_gather"))

    # ---- what the pipeline emitter calls -----------------------------------------------
    def gather_before(self, dev: int, vs: int, key: tuple) -> tuple[int, ...]:
        """Tasks a compute task of virtual stage vs waits for (stage 3's gather)."""
        return ()

    def early_gates(self, dev: int, vss: list[int]) -> dict[int, Gates]:
        """Per virtual stage, the gather task each forward piece of micro-batch 0 waits for."""
        return {}

    def unit_gates(self, dev: int, kind: str, mb: int, vs: int
                   ) -> tuple[Gates, tuple[float, ...]] | None:
        """For per-unit strategies: the tasks each piece of a F or B task waits for, and
        the gathered bytes each piece frees when it ends. None: no per-unit gathers."""
        return None

    def reduce(self, dev: int, mb: int, vs: int, piece_tids: list[int]) -> None:
        """The gradient reduction of micro-batch mb of virtual stage vs, after piece_tids:
        the buckets of the last micro-batch, each after the piece that completes it."""
        if mb < self.low.micro - 1:
            return
        for j, b in enumerate(self.buckets[vs]):
            dep = piece_tids[min(b.piece, len(piece_tids) - 1)]
            for first, units in self.low.blocks(b.count, (dev, vs, j)):
                tid = self.emit(dev, "grad_bucket", self.collective, b.nbytes, b.seconds,
                                (dep,), (mb, vs, j, first), units=units)
                if units > 1:
                    self.low.block_of.append((tid, (dev, vs, j, first)))

    def backward_frees(self, vs: int) -> tuple[tuple[str, float], ...]:
        """Memory a recomputed backward of virtual stage vs frees when it ends (gathered
        parameters held for it)."""
        return ()

    def after_step(self, dev: int, vss: list[int], step_tid: int) -> None:
        """Collectives after the optimizer step (or after the host's updated parameters)."""

    def remote_step(self, dev: int, params: int, deps: tuple[int, ...]) -> int | None:
        """The optimizer step when it runs off the device (the task after which the device
        has its updated parameters); None: the device runs it."""
        return None

    def extras(self) -> tuple[tuple[str, object], ...]:
        """Figures the strategy reports beside the run's summary."""
        return ()

    # ---- helpers -----------------------------------------------------------------------
    def emit(self, dev: int, name: str, coll: str, nbytes: float, seconds: float,
             deps: tuple[int, ...], key: tuple, alloc_buffer: bool = True,
             alloc: tuple = (), stream: str = "dp", units: int = 1) -> int:
        """One data-parallel collective on a dp stream of dev (both streams share the
        device's link); `alloc`: memory it allocates that a later task frees (gathered
        parameters); `units`: that many identical collectives back to back, each with its
        own buffer in turn."""
        low = self.low
        group, size = -1, 1
        if low.fidelity == "full":
            members = low.ranks.except_axis(dev, low.ranks.data_axis)
            group, size = low.b.groups[(members, name) + key], low.ranks.data
        buf = (("communication_buffers", nbytes),) if alloc_buffer else ()
        return low.b.add(("dp", dev, name) + key, device=dev, stream=stream, name=name,
                         phase="comm", duration_s=seconds * units, deps=deps, link=self.link,
                         group=group, group_size=size, comm=((coll, nbytes * units),),
                         alloc=buf + alloc, free=buf, units=units)

    def gather_s(self, vss: list[int]) -> float:
        """Seconds to all-gather the parameters of virtual stages vss, bucket by bucket (the
        gradient buckets rescaled from gradient to parameter bytes)."""
        return sum(self.gather_bucket_s(b.nbytes) * b.count for vs in vss
                   for b in self.gather_buckets(vs))

    def gather_bucket_s(self, grad_bytes: float) -> float:
        """Seconds to all-gather the parameters of one gradient bucket of `grad_bytes`."""
        low = self.low
        return low.costs.collective_s("all_gather", grad_bytes * low.e / low.ge, self.group)


class NoDataParallel(DataParallel):
    """One data-parallel rank: nothing to reduce or gather."""

    def reduce(self, dev: int, mb: int, vs: int, piece_tids: list[int]) -> None:
        return


class ShardedStates(DataParallel):
    """Stage 1: reduce-scatter, then all-gather the updated parameters."""

    collective = "reduce_scatter"

    def collapsible(self) -> bool:
        """Not under the overlapped parameter gather: it runs one task per bucket, and the
        simulation that cuts collapsed buckets would run all of those again."""
        return not self._overlapped()

    def _overlapped(self) -> bool:
        par = self.low.par
        return par.overlap.param_gather and not par.offload.optimizer_states

    def after_step(self, dev: int, vss: list[int], step_tid: int) -> None:
        if self._overlapped():
            return
        params = sum(self.low.work[vs].params for vs in vss)
        self.emit(dev, "param_gather", "all_gather", params * self.low.e, self.gather_s(vss),
                  (step_tid,), ("final",), alloc_buffer=False)

    def early_gates(self, dev: int, vss: list[int]) -> dict[int, Gates]:
        """Megatron-Core --overlap-param-gather: the previous step's updated parameters are
        all-gathered bucket by bucket, in forward order, while this step's first micro-batch
        runs its forward; a forward piece (embedding, layer, head) waits for the bucket
        holding its last parameter. When the gather is slower than the forward, the
        difference is exposed."""
        if not self._overlapped():
            return {}
        return {vs: self._gather_buckets(dev, vs) for vs in vss}

    def _gather_buckets(self, dev: int, vs: int) -> Gates:
        """All-gather tasks of virtual stage vs in forward order (the gradient buckets
        reversed, rescaled to parameter bytes); per forward piece, the task it waits for."""
        low = self.low
        tids, ends, done = [], [], 0.0
        each = [b for b in self.gather_buckets(vs) for _ in range(b.count)]  # one per bucket
        for j, b in enumerate(reversed(each)):
            tids.append(self.emit(dev, "param_gather", "all_gather", b.nbytes * low.e / low.ge,
                                  self.gather_bucket_s(b.nbytes), (), ("overlapped", vs, j),
                                  alloc_buffer=False))
            done += b.nbytes / low.ge
            ends.append(done)  # parameters gathered once bucket j is done
        gates, held = [], 0.0
        for params in reversed(low.work[vs].piece_params):
            held += params
            j = min(bisect_left(ends, held * (1 - 1e-12)), len(ends) - 1)
            gates.append((tids[j],) if params > 0 and tids else ())
        return tuple(gates)


class ShardedGradients(ShardedStates):
    """Stage 2: gradients sharded too, so every micro-batch's are reduce-scattered."""

    def reduce(self, dev: int, mb: int, vs: int, piece_tids: list[int]) -> None:
        if mb < self.low.micro - 1:
            nbytes = self.low.work[vs].params * self.low.ge
            seconds = sum(b.seconds * b.count for b in self.buckets[vs])
            self.emit(dev, "grad_reduce", self.collective, nbytes, seconds, (piece_tids[-1],),
                      (mb, vs))
            return
        super().reduce(dev, mb, vs, piece_tids)


class ShardedParameters(ShardedGradients):
    """Stage 3: parameters sharded too, gathered unit by unit before the compute that uses
    them; gradients reduce-scattered unit by unit."""

    per_unit = True

    def _keeps(self) -> bool:
        """`parallel.recompute_comm.optimizer: false` (MindSpore's
        parallel_optimizer_comm_recompute false): under recompute the forward's gathered
        parameters stay whole until the backward ends, and the recompute pass gathers
        nothing; true gathers the chunk again before the recompute pass."""
        par = self.low.par
        return par.recompute != "none" and not par.recompute_comm.optimizer

    def _regathered(self, vs: int) -> float:
        """Bytes a recompute pass holds gathered: it gathers its chunk unit by unit, as the
        forward does (prefetch depth one), so two units are whole at most."""
        work = self.low.work[vs]
        return min(work.params, 2 * max(work.piece_params, default=0)) * self.low.e

    def backward_frees(self, vs: int) -> tuple[tuple[str, float], ...]:
        nbytes = self._regathered(vs)
        return (("parameters", nbytes),) if self.low.par.recompute != "none" and nbytes \
            else ()

    def unit_gates(self, dev: int, kind: str, mb: int, vs: int
                   ) -> tuple[Gates, tuple[float, ...]]:
        low = self.low
        params = low.work[vs].piece_params  # backward order: head, layers, embedding
        order = tuple(reversed(params)) if kind == "F" else params
        gates, held = [], []
        last = len(order) - 1
        compute = low.b.streams.get((dev, "compute"), [])
        before = tuple(compute[-1:])  # the task running before this one
        for k, n in enumerate(order):
            nbytes = n * low.e
            # prefetch depth one: the gather of unit k waits for unit k-2's compute (the
            # first two for the task before), so two units are whole at most
            deps = (low.b.ids[("C", dev, kind, mb, vs, k - 2)],) if k >= 2 else before
            tid = self.emit(dev, "param_gather", "all_gather", nbytes,
                            low.costs.collective_s("all_gather", nbytes, self.group), deps,
                            (kind, mb, vs, k), alloc_buffer=False,
                            alloc=(("parameters", nbytes),) if nbytes else ())
            gates.append((tid,))
            held.append(0.0 if self._keeps() else nbytes)  # kept: the backward frees it
        assert len(gates) == last + 1
        return tuple(gates), tuple(held)

    def reduce(self, dev: int, mb: int, vs: int, piece_tids: list[int]) -> None:
        """Each unit's gradient reduce-scattered after its backward, every micro-batch."""
        low = self.low
        for k, n in enumerate(low.work[vs].piece_params):
            nbytes = n * low.ge
            if nbytes <= 0:
                continue
            self.emit(dev, "grad_reduce", self.collective, nbytes,
                      low.costs.collective_s(self.collective, nbytes, self.group),
                      (piece_tids[min(k, len(piece_tids) - 1)],), (mb, vs, k),
                      stream="dp_reduce")

    def gather_before(self, dev: int, vs: int, key: tuple) -> tuple[int, ...]:
        """Before a recompute pass, its chunk's parameters gathered again (held until its
        backward ends), unless the forward's are kept (`_keeps`)."""
        if key[0] != "R" or self._keeps():
            return ()
        low = self.low
        nbytes = low.work[vs].params * low.e
        compute = low.b.streams.get((dev, "compute"), [])
        prefetch = (compute[-2],) if len(compute) >= 2 else ()
        held = self._regathered(vs)
        return (self.emit(dev, "param_gather", "all_gather", nbytes, self.gather_s([vs]),
                          prefetch, key, alloc_buffer=False,
                          alloc=(("parameters", held),) if held else ()),)

    def after_step(self, dev: int, vss: list[int], step_tid: int) -> None:
        return

    def early_gates(self, dev: int, vss: list[int]) -> dict[int, Gates]:
        return {}


class ParameterServer(DataParallel):
    """`parallel.mode: parameter_server`: push the last micro-batch's gradient buckets to
    the servers under the backward, the servers sum and update, the workers pull the
    parameters. Synchronous: every worker transfers at once (the servers' NICs take n/k of
    everything) and waits for the sum of all n pushes. Asynchronous: a worker's transfers
    see its own NIC and the servers' share of one worker, its pull waits for its own update
    only, and the servers serving all n workers once per period bound the period (a task
    on the `ps_server` stream from the start of the iteration)."""

    collective = "ps_push"
    remote_optimizer = True

    def __init__(self, low: Lowering) -> None:
        spec = low.par.parameter_server
        self.workers, self.servers, self.sync = low.ranks.data, spec.servers, spec.sync
        self.links: PsLinks = ps_links(low.costs.hardware, low.ranks.devices_per_node,
                                       _server_profile(low), spec.server_nic_Gbps)
        super().__init__(low)
        self.link = "nic"

    def _buckets(self, vs: int) -> tuple[Bucket, ...]:
        return tuple(Bucket(i, nb, self._transfer_s(nb), n)
                     for i, nb, n in self._runs(vs, "all_reduce"))

    def _transfer_s(self, nbytes: float) -> float:
        return transfer_s(nbytes, self.workers, self.servers, self.links, self.sync)

    def _update_s(self, params: float, pushes: int) -> float:
        return server_update_s(params, pushes, self.servers, self.low.sc.training.optimizer,
                               self.low.ge, self.links)

    def server_round_s(self, params: float) -> float:
        """Asynchronous: seconds the servers need per period to take every worker's push,
        answer every pull and apply every update (the slowest of their NIC directions and
        their memory, each serving all n workers)."""
        n, k, low = self.workers, self.servers, self.low
        nic_in = n * params * low.ge / (k * self.links.server_Bps)
        nic_out = n * params * low.e / (k * self.links.server_Bps)
        return max(nic_in, nic_out, n * self._update_s(params, 1))

    def remote_step(self, dev: int, params: int, deps: tuple[int, ...]) -> int:
        low = self.low
        pushes = self.workers if self.sync else 1
        update = low.b.add(("dp", dev, "ps_update"), device=dev, stream="dp", name="ps_update",
                           phase="optimizer", duration_s=self._update_s(params, pushes),
                           deps=deps, link=self.link)
        pull = self.emit(dev, "ps_pull", "ps_pull", params * low.e,
                         self._transfer_s(params * low.e), (update,), ("pull",))
        waits: tuple[int, ...] = (pull,)
        if not self.sync:
            waits += (low.b.add(("dp", dev, "ps_serve"), device=dev, stream="ps_server",
                                name="ps_serve", phase="comm",
                                duration_s=self.server_round_s(params)),)
        return low.b.add(("O", dev), device=dev, stream="compute", name="opt",
                         phase="optimizer", duration_s=0.0, deps=waits)

    def extras(self) -> tuple[tuple[str, object], ...]:
        low = self.low
        params = sum(w.params for w in low.work)
        push, pull = params * low.ge, params * low.e
        return (("parameter_server", {
            "workers": self.workers, "servers": self.servers, "sync": self.sync,
            "push_bytes_per_worker": push, "pull_bytes_per_worker": pull,
            "bytes_in_per_server": self.workers * push / self.servers,
            "bytes_out_per_server": self.workers * pull / self.servers,
            "server_update_s": self._update_s(params, self.workers if self.sync else 1),
            "server_round_s": None if self.sync else self.server_round_s(params),
            "bottleneck": "server_nic" if self.workers * self.links.worker_Bps
            > self.servers * self.links.server_Bps else "worker_nic",
            # Li et al. 2014 Sec. 4.3: with n workers at one rate, the other n-1 push once
            # between a worker's pull and its push
            "staleness_updates": 0 if self.sync else self.workers - 1}),)


def _group_starts(low: Lowering, vs: int, index: tuple[int, ...]) -> tuple[int, ...]:
    """Backward positions of virtual stage vs's pieces that start a fusion group, for
    `index` (the layers, in forward order, that start a group; MindSpore's fusion index
    list). Pieces run head, the stage's layers (blocks) last to first, embedding; the
    head joins the last layer's group and the embedding the first's."""
    per = low.prog.sequence()[0].layers
    params = low.work[vs].piece_params
    head = len(low.prog.pinned("last")) if vs == len(low.work) - 1 else 0
    embed = len(low.prog.pinned("first")) if vs == 0 else 0
    n = len(params) - head - embed
    first = sum(low.work[k].layers for k in range(vs)) // per

    def group(block: int) -> int:
        return sum(1 for layer in index if layer // per <= block)

    blocks = [first + n - 1 - j for j in range(n)]  # backward order
    return tuple(head + j for j in range(1, n) if group(blocks[j]) != group(blocks[j - 1]))


def _server_profile(low: Lowering):
    """The hardware profile of the server hosts (`parallel.parameter_server.server_hardware`)."""

    name = low.par.parameter_server.server_hardware
    try:
        return load_profile(name)
    except InputError as exc:
        raise InputError(low.sc.source, "parallel.parameter_server.server_hardware",
                         exc.message) from None


STRATEGIES: dict[int, type[DataParallel]] = {0: DataParallel, 1: ShardedStates,
                                             2: ShardedGradients, 3: ShardedParameters}


def strategy_for(low: Lowering) -> DataParallel:
    """The reduction strategy of the scenario's `parallel.optimizer_shard` level (or of
    its parameter servers)."""
    if low.par.mode == "parameter_server":
        return ParameterServer(low)
    if low.ranks.data == 1:
        return NoDataParallel(low)
    return STRATEGIES[low.par.optimizer_shard](low)
