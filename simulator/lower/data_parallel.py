"""Data-parallel gradient reduction and parameter gathering up to ZeRO stage 2 (the stages
and how `lower.reduction.strategy_for` picks one are in that module's docstring): the
strategy base class, which emits its collectives on a device's `dp` stream, and stages 0, 1
and 2.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.cost.specs import GroupSpec
from simulator.lower.buckets import grad_bucket_runs

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering

__all__ = ["Bucket", "DataParallel", "NoDataParallel", "ShardedStates", "ShardedGradients",
           "Gates"]

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
    # the optimizer is sharded: the parameters it keeps whole (parallel.optimizer_threshold_kb,
    # MindSpore's parallel_optimizer_threshold) are all-reduced instead, and not gathered
    keeps_whole = False

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
        self.whole = {vs: self._whole_buckets(vs) for vs in range(len(low.work))}

    def sharded(self, vs: int) -> tuple[int, ...]:
        """Parameter elements of each backward piece of virtual stage vs that this strategy
        shards (all of them, but those a sharded optimizer keeps whole)."""
        work = self.low.work[vs]
        if not self.keeps_whole or not work.unsharded:
            return work.piece_params
        return tuple(n - u for n, u in zip(work.piece_params, work.piece_unsharded,
                                           strict=True))

    def _runs(self, vs: int, kind: str, pieces: tuple[int, ...] | None = None
              ) -> tuple[tuple[int, float, int], ...]:
        """Gradient-byte buckets of virtual stage vs (of `pieces`, default the sharded
        parameters) under the fusion rule of collective `kind` (`parallel.comm_fusion`, its
        per-kind entry where given)."""
        low = self.low
        mode, mb, index = low.par.comm_fusion.of(kind)
        starts = _group_starts(low, vs, index) if mode == "index" and index else None
        return grad_bucket_runs(self.sharded(vs) if pieces is None else pieces, low.ge, mode,
                                mb, low.prog.sequence()[0].param_tensors, starts)

    def _whole_buckets(self, vs: int) -> tuple[Bucket, ...]:
        """All-reduce buckets of the gradients of the parameters kept whole (none unless
        `keeps_whole`): they are reduced as without a sharded optimizer, as verify does."""
        work = self.low.work[vs]
        if not self.keeps_whole or not work.unsharded:
            return ()
        return tuple(Bucket(i, nb, self.low.costs.collective_s("all_reduce", nb, self.group),
                            n)
                     for i, nb, n in self._runs(vs, "all_reduce", work.piece_unsharded))

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
        if mb != self.low.last_micro(vs):
            return
        for j, b in enumerate(self.buckets[vs]):
            dep = piece_tids[min(b.piece, len(piece_tids) - 1)]
            for first, units in self.low.blocks(b.count, (dev, vs, j)):
                tid = self.emit(dev, "grad_bucket", self.collective, b.nbytes, b.seconds,
                                (dep,), (mb, vs, j, first), units=units)
                if units > 1:
                    self.low.block_of.append((tid, (dev, vs, j, first)))
        self.reduce_whole(dev, vs, piece_tids)

    def reduce_whole(self, dev: int, vs: int, piece_tids: list[int]) -> None:
        """The last micro-batch's all-reduce of the gradients kept whole, bucket by bucket
        after the piece that completes each (one task per bucket)."""
        for j, b in enumerate(self.whole[vs]):
            dep = piece_tids[min(b.piece, len(piece_tids) - 1)]
            for k in range(b.count):
                self.emit(dev, "grad_whole", "all_reduce", b.nbytes, b.seconds, (dep,),
                          (vs, j, k))

    def backward_frees(self, vs: int) -> tuple[tuple[str, float], ...]:
        """Memory a recomputed backward of virtual stage vs frees when it ends (gathered
        parameters held for it)."""
        return ()

    def after_step(self, dev: int, vss: list[int], step_tid: int) -> None:
        """Collectives after the optimizer step (or after the host's updated parameters)."""

    def made_grads(self, dev: int) -> float:
        """Bytes of gradients dev's collectives made during the step, which the optimizer
        step frees (none: the gradients are model states, `lower.zero3` under FSDP2)."""
        return 0.0

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
        route = low.routes.collective(dev, low.ranks.data_axis, coll, nbytes, self.group) \
            if low.routes and self.link == "nic" and low.ranks.data_axis else -1
        return low.b.add(("dp", dev, name) + key, device=dev, stream=stream, name=name,
                         phase="comm", duration_s=seconds * units, deps=deps, link=self.link,
                         group=group, group_size=size, comm=((coll, nbytes * units),),
                         alloc=buf + alloc, free=buf, units=units, route=route)

    def gather_s(self, vss: list[int]) -> float:
        """Seconds to all-gather the parameters of virtual stages vss, bucket by bucket (the
        gradient buckets rescaled from gradient to parameter bytes)."""
        return sum(self.gather_bucket_s(b.nbytes) * b.count for vs in vss
                   for b in self.gather_buckets(vs))

    def gather_bucket_s(self, grad_bytes: float) -> float:
        """Seconds to all-gather the parameters of one gradient bucket of `grad_bytes`."""
        low = self.low
        return low.costs.collective_s("all_gather", grad_bytes * low.pe / low.ge, self.group)


class NoDataParallel(DataParallel):
    """One data-parallel rank: nothing to reduce or gather."""

    def reduce(self, dev: int, mb: int, vs: int, piece_tids: list[int]) -> None:
        return


class ShardedStates(DataParallel):
    """Stage 1: reduce-scatter, then all-gather the updated parameters."""

    collective = "reduce_scatter"
    keeps_whole = True

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
        params = sum(sum(self.sharded(vs)) for vs in vss)
        if params <= 0:
            return
        self.emit(dev, "param_gather", "all_gather", params * self.low.pe, self.gather_s(vss),
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
            tids.append(self.emit(dev, "param_gather", "all_gather", b.nbytes * low.pe / low.ge,
                                  self.gather_bucket_s(b.nbytes), (), ("overlapped", vs, j),
                                  alloc_buffer=False))
            done += b.nbytes / low.ge
            ends.append(done)  # parameters gathered once bucket j is done
        gates, held = [], 0.0
        for params in reversed(self.sharded(vs)):
            held += params
            j = min(bisect_left(ends, held * (1 - 1e-12)), len(ends) - 1)
            gates.append((tids[j],) if params > 0 and tids else ())
        return tuple(gates)


class ShardedGradients(ShardedStates):
    """Stage 2: gradients sharded too, so every micro-batch's are reduce-scattered."""

    def reduce(self, dev: int, mb: int, vs: int, piece_tids: list[int]) -> None:
        if mb != self.low.last_micro(vs):
            nbytes = sum(self.sharded(vs)) * self.low.ge
            seconds = sum(b.seconds * b.count for b in self.buckets[vs])
            if nbytes <= 0:  # every parameter kept whole: nothing to reduce-scatter
                return
            self.emit(dev, "grad_reduce", self.collective, nbytes, seconds, (piece_tids[-1],),
                      (mb, vs))
            return
        super().reduce(dev, mb, vs, piece_tids)


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
