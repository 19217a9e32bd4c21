"""`lower(scenario, program, costs, fidelity) -> Plan`: one training iteration as per-device
task streams with dependencies, every duration priced by the cost model.

Per simulated device (one per pipeline stage, or every rank under full fidelity):
- compute stream: one task per (virtual stage, micro-batch, F | R | B) in the pipeline
  schedule's order (`schedule.pipeline`); its duration is the sum of its kernels plus its
  critical-path tensor-parallel collectives (`Task.comm_s` keeps the split). Under
  recompute, R re-runs the forward right before B, once B's gradient has arrived (Megatron
  recomputes inside the backward). The optimizer step ends the stream.
- pp_fwd / pp_bwd: point-to-point sends of activations and their gradients (s*b*h*dtype
  bytes, /t under sequence parallelism) to the neighbouring stage; the receiver's task
  depends on the send. Sends do not block the sender's compute (asynchronous p2p).
- dp: the data-parallel gradient reduction in buckets (`schedule.buckets`): all-reduce, or
  reduce-scatter when optimizer_shard >= 1, then an all-gather of the updated parameters
  (stages 1 and 2): after the optimizer step, or with overlap.param_gather bucket by bucket
  under the next step's first forward, whose pieces (embedding, layers, head) each wait for
  the bucket holding their parameters. With overlap.grad_reduce the buckets of the
  last micro-batch leave as its backward produces them (its backward is split into
  per-layer tasks for that); otherwise they all wait for the end of the backward.
  Sharded gradients (stage >= 2) are reduce-scattered after every micro-batch; stage 3
  also all-gathers a chunk's parameters before each of its F, R and B tasks, prefetched
  one compute task ahead.
With offload.optimizer_states the optimizer runs on the host (ZeRO-Offload): gradients go
down and parameters come back over PCIe on the offload stream, and the wait is
offload_exposed. Offloading parameters or activations is not simulated yet (InputError).
Memory: F allocates the micro-batch's activations, B frees them; transfers hold their
buffers while they run; model states are allocated before the iteration (`Plan.static_memory`).
"""

from __future__ import annotations

from bisect import bisect_left

from simulator.errors import InputError
from simulator.scenario.schema import DTYPE_BYTES, Scenario
from simulator.schedule.buckets import grad_buckets
from simulator.schedule.costs import CostModel
from simulator.schedule.layout import Layout, layout_of
from simulator.schedule.pipeline import schedule_steps
from simulator.schedule.program import TransformerProgram
from simulator.schedule.stages import StageWork, stage_work
from simulator.schedule.state import model_state_bytes, optimizer_spec
from simulator.schedule.tasks import Alloc, Plan, Task
from simulator.schedule.tasks_builder import Builder

__all__ = ["lower", "FIDELITIES"]

FIDELITIES = ("representative", "full")


class _Lowering:
    """Emits the tasks of one plan; used once by `lower`, then dropped."""

    def __init__(self, scenario: Scenario, prog: TransformerProgram, costs: CostModel,
                 fidelity: str, groups: tuple = ()) -> None:
        self.sc, self.prog, self.costs = scenario, prog, costs
        self.lay: Layout = layout_of(scenario, groups)
        self.work: tuple[StageWork, ...] = stage_work(scenario, prog, self.lay, costs)
        self.b = Builder()
        self.e = DTYPE_BYTES[prog.dtype]
        self.ge = prog.grad_bytes  # gradient elements: buffer and reduction
        self.par = scenario.parallel
        self.micro = scenario.grad_accum_steps
        self.dp_group = self.lay.groups()["dp"]
        self.dp_link = "nic" if self.dp_group.crosses_nodes else "fabric"
        self.fidelity = fidelity
        self.buckets = {vs: self._buckets(w) for vs, w in enumerate(self.work)}
        self.gates: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}
        self.send_s = {intra: costs.send_recv_s(prog.boundary_bytes, intra)
                       for intra in (True, False)}

    # ---- helpers -------------------------------------------------------------------------
    def _buckets(self, w: StageWork) -> tuple[tuple[int, float, float], ...]:
        """(ready piece, bytes, seconds) of each gradient bucket of a virtual stage."""
        fusion = self.par.comm_fusion
        coll = "reduce_scatter" if self.par.optimizer_shard >= 1 else "all_reduce"
        raw = grad_buckets(w.piece_params, self.ge, fusion.mode, fusion.bucket_mb,
                           self.prog.param_tensors_per_layer)
        return tuple((i, nb, self.costs.collective_s(coll, nb, self.dp_group)) for i, nb in raw)

    def _peer(self, dev: int, vs: int) -> int:
        """The rank holding virtual stage vs with the same data/tensor coordinates as dev."""
        _, dp_rank, tp_rank = self.lay.coords(dev)
        return self.lay.rank(self.lay.stage_of_virtual(vs), dp_rank, tp_rank)

    def _dp(self, dev: int, name: str, coll: str, nbytes: float, seconds: float,
            deps: tuple[int, ...], key: tuple, alloc_buffer: bool = True) -> int:
        """One data-parallel collective on the dp stream of dev."""
        d = self.lay.data
        group, size = -1, 1
        if self.fidelity == "full" and d > 1:
            stage, _, tp_rank = self.lay.coords(dev)
            group, size = self.b.groups[(stage, tp_rank, name) + key], d
        buf = (("communication_buffers", nbytes),) if alloc_buffer else ()
        return self.b.add(("dp", dev, name) + key, dev, "dp", name, "comm", -1, -1, seconds,
                          deps=deps, link=self.dp_link, group=group, group_size=size,
                          comm=((coll, nbytes),), alloc=buf, free=buf)

    # ---- compute tasks -------------------------------------------------------------------
    def _gather_params(self, dev: int, vs: int, key: tuple) -> tuple[int, ...]:
        """ZeRO-3: all-gather a chunk's parameters before a compute task; () otherwise."""
        if self.par.optimizer_shard < 3 or self.lay.data == 1:
            return ()
        nbytes = self.work[vs].params * self.e
        seconds = self._gather_s([vs])
        compute = self.b.streams.get((dev, "compute"), [])
        prefetch = (compute[-2],) if len(compute) >= 2 else ()
        return (self._dp(dev, "param_gather", "all_gather", nbytes, seconds, prefetch, key,
                         alloc_buffer=False),)

    def forward(self, dev: int, mb: int, vs: int) -> None:
        w, deps = self.work[vs], self._gather_params(dev, vs, ("F", mb, vs))
        if vs > 0:
            prev = self._peer(dev, vs - 1)
            deps += (self.b.ids[("S", prev, "fwd", mb, vs - 1) if prev != dev
                                else ("C", dev, "F", mb, vs - 1)],)
        # the first micro-batch's forward waits, piece by piece, for the parameter all-gather
        gates = self.gates.pop((dev, vs), None) if mb == 0 else None
        pieces, gates = (w.fwd_pieces, gates) if gates else ((w.fwd,), ((),))
        for k, (piece, gate) in enumerate(zip(pieces, gates)):
            first, last = k == 0, k == len(pieces) - 1
            key = ("C", dev, "F", mb, vs) if last else ("C", dev, "F", mb, vs, k)
            tid = self.b.add(key, dev, "compute", "F", "fwd", mb, vs,
                             piece.compute_s + piece.comm_s, piece.comm_s,
                             (deps if first else ()) + gate, comm=piece.comm,
                             alloc=(("activations", w.activation_bytes),) if first else ())
        if vs < self.lay.virtual_stages - 1:
            self._send(dev, self._peer(dev, vs + 1), "fwd", mb, vs, tid)

    def _send(self, dev: int, peer: int, direction: str, mb: int, vs: int, after: int) -> None:
        if peer == dev:
            return
        nbytes = self.prog.boundary_bytes
        intra = self.lay.same_node(dev, peer)
        buf = (("communication_buffers", nbytes),)
        self.b.add(("S", dev, direction, mb, vs), dev, "pp_" + direction, "send_" + direction,
                   "comm", mb, vs, self.send_s[intra], deps=(after,),
                   link="fabric" if intra else "nic", comm=(("send_recv", nbytes),),
                   alloc=buf, free=buf)

    def _grad_dep(self, dev: int, mb: int, vs: int) -> tuple[int, ...]:
        if vs == self.lay.virtual_stages - 1:
            return ()
        nxt = self._peer(dev, vs + 1)
        key = ("S", nxt, "bwd", mb, vs + 1) if nxt != dev else ("C", dev, "B", mb, vs + 1)
        return (self.b.ids[key],)

    def backward(self, dev: int, mb: int, vs: int) -> None:
        w, deps = self.work[vs], self._grad_dep(dev, mb, vs)
        free = (("activations", w.activation_bytes),)
        if self.par.recompute != "none":
            deps += self._gather_params(dev, vs, ("R", mb, vs))
            r = w.recompute
            self.b.add(("C", dev, "R", mb, vs), dev, "compute", "R", "recompute", mb, vs,
                       r.compute_s + r.comm_s, r.comm_s, deps, comm=r.comm,
                       alloc=(("activations", w.working_bytes),))
            deps, free = (), (("activations", w.activation_bytes + w.working_bytes),)
        deps += self._gather_params(dev, vs, ("B", mb, vs))
        split = mb == self.micro - 1 and self.lay.data > 1 and self.par.overlap.grad_reduce
        pieces = w.bwd_pieces if split else (w.bwd,)
        tids = []
        for k, piece in enumerate(pieces):
            last = k == len(pieces) - 1
            key = ("C", dev, "B", mb, vs) if last else ("C", dev, "B", mb, vs, k)
            tids.append(self.b.add(key, dev, "compute", "B", "bwd", mb, vs,
                                   piece.compute_s + piece.comm_s, piece.comm_s,
                                   deps if k == 0 else (), comm=piece.comm,
                                   free=free if last else ()))
        if vs > 0:
            self._send(dev, self._peer(dev, vs - 1), "bwd", mb, vs, tids[-1])
        if self.par.overlap.grad_reduce:
            self._reduce_grads(dev, mb, vs, tids)

    # ---- data-parallel reduction and the optimizer ---------------------------------------
    def _reduce_grads(self, dev: int, mb: int, vs: int, piece_tids: list[int]) -> None:
        """Gradient buckets of micro-batch mb of virtual stage vs, after piece_tids."""
        if self.lay.data == 1:
            return
        coll = "reduce_scatter" if self.par.optimizer_shard >= 1 else "all_reduce"
        if mb < self.micro - 1:
            if self.par.optimizer_shard >= 2:  # sharded gradients: reduce every micro-batch
                nbytes = self.work[vs].params * self.ge
                seconds = sum(s for _, _, s in self.buckets[vs])
                self._dp(dev, "grad_reduce", coll, nbytes, seconds, (piece_tids[-1],),
                         (mb, vs))
            return
        for j, (piece, nbytes, seconds) in enumerate(self.buckets[vs]):
            dep = piece_tids[min(piece, len(piece_tids) - 1)]
            self._dp(dev, "grad_bucket", coll, nbytes, seconds, (dep,), (mb, vs, j))

    def finish(self, dev: int, vss: list[int]) -> None:
        """Deferred reductions (no overlap), the optimizer step, the parameter all-gather."""
        compute = self.b.streams[(dev, "compute")]
        if not self.par.overlap.grad_reduce:
            for vs in vss:
                for mb in range(self.micro):
                    self._reduce_grads(dev, mb, vs, [compute[-1]])
        dp_tasks = self.b.streams.get((dev, "dp"), [])
        params = sum(self.work[vs].params for vs in vss)
        deps = tuple(dp_tasks[-1:]) + self._grad_sync(dev, vss)
        if self.par.offload.optimizer_states:
            self._host_optimizer(dev, vss, params, deps)
            return
        spec = optimizer_spec(params, self.prog.dtype, self.sc.training.optimizer,
                              self.par.optimizer_shard, self.lay.data, self.ge)
        opt = self.b.add(("O", dev), dev, "compute", "opt", "optimizer", -1, -1,
                         self.costs.compute_s(spec), 0.0, deps)
        if self.par.optimizer_shard in (1, 2) and self.lay.data > 1 and \
                not self.par.overlap.param_gather:
            self._dp(dev, "param_gather", "all_gather", params * self.e,
                     self._gather_s(vss), (opt,), ("final",), alloc_buffer=False)

    def _grad_sync(self, dev: int, vss: list[int]) -> tuple[int, ...]:
        """Gradient reductions on non-dp axes (tensor-parallel replicas of sequence-parallel
        norms, ...), once per iteration on the compute stream before the optimizer step, as
        Megatron-LM's finalize_model_grads runs them."""
        sync = [self.work[vs].grad_sync for vs in vss if self.work[vs].grad_sync.comm_s > 0]
        if not sync:
            return ()
        total = sync[0]
        for part in sync[1:]:
            total = total + part
        return (self.b.add(("G", dev), dev, "compute", "grad_sync", "bwd", -1, -1,
                           total.comm_s, total.comm_s, (), comm=total.comm),)

    def _gather_s(self, vss: list[int]) -> float:
        """Seconds to all-gather the parameters of virtual stages vss, bucket by bucket (the
        gradient buckets rescaled from gradient to parameter bytes)."""
        return sum(self._gather_bucket_s(nb) for vs in vss for _, nb, _ in self.buckets[vs])

    def _gather_bucket_s(self, grad_bytes: float) -> float:
        """Seconds to all-gather the parameters of one gradient bucket of `grad_bytes`."""
        return self.costs.collective_s("all_gather", grad_bytes * self.e / self.ge,
                                       self.dp_group)

    def early_gather(self, dev: int, vss: list[int]) -> None:
        """Overlapped parameter all-gather (Megatron-Core --overlap-param-gather): the
        previous step's updated parameters are all-gathered bucket by bucket, in forward
        order, on the dp stream, while this step's first micro-batch runs its forward; a
        forward piece (embedding, layer, head) waits for the bucket holding its last
        parameter (Megatron's forward pre-hook waits on that bucket's all-gather). When the
        gather is slower than the forward, the difference is exposed."""
        if self.par.optimizer_shard in (1, 2) and self.lay.data > 1 and \
                self.par.overlap.param_gather and not self.par.offload.optimizer_states:
            for vs in vss:
                self.gates[(dev, vs)] = self._gather_buckets(dev, vs)

    def _gather_buckets(self, dev: int, vs: int) -> tuple[tuple[int, ...], ...]:
        """All-gather tasks of virtual stage vs in forward order (the gradient buckets
        reversed, rescaled to parameter bytes); per forward piece, the task it waits for."""
        tids, ends, done = [], [], 0.0
        for j, (_, nb, _) in enumerate(reversed(self.buckets[vs])):
            tids.append(self._dp(dev, "param_gather", "all_gather", nb * self.e / self.ge,
                                 self._gather_bucket_s(nb), (), ("overlapped", vs, j),
                                 alloc_buffer=False))
            done += nb / self.ge
            ends.append(done)  # parameters gathered once bucket j is done
        gates, held = [], 0.0
        for params in reversed(self.work[vs].piece_params):
            held += params
            j = min(bisect_left(ends, held * (1 - 1e-12)), len(ends) - 1)
            gates.append((tids[j],) if params > 0 and tids else ())
        return tuple(gates)

    def _host_optimizer(self, dev: int, vss: list[int], params: int,
                        deps: tuple[int, ...]) -> None:
        """ZeRO-Offload (Ren et al. 2021, Sec. 4): the reduced gradient shard goes to the
        host over PCIe, the host runs the optimizer (its time is not modelled), and the
        updated 16-bit parameters come back; the device waits for them."""
        local = params / (self.lay.data if self.par.optimizer_shard >= 1 else 1)
        d2h = self.b.add(("H", dev, "d2h"), dev, "offload", "grad_d2h", "offload", -1, -1,
                         self.costs.copy_s(local * self.ge), 0.0, deps)
        h2d = self.b.add(("H", dev, "h2d"), dev, "offload", "param_h2d", "offload", -1, -1,
                         self.costs.copy_s(local * self.e), 0.0, (d2h,))
        self.b.add(("O", dev), dev, "compute", "opt", "optimizer", -1, -1, 0.0, 0.0, (h2d,))
        if self.par.optimizer_shard in (1, 2) and self.lay.data > 1:
            self._dp(dev, "param_gather", "all_gather", params * self.e, self._gather_s(vss),
                     (h2d,), ("final",), alloc_buffer=False)

    def device(self, dev: int) -> Alloc:
        stage = self.lay.coords(dev)[0]
        steps = schedule_steps(self.par.schedule, stage, self.lay.pipeline, self.micro,
                               self.lay.chunks, self.sc.source)
        vss = sorted({vs for _, _, vs in steps})
        self.early_gather(dev, vss)
        for kind, mb, vs in steps:
            (self.forward if kind == "F" else self.backward)(dev, mb, vs)
        self.finish(dev, vss)
        params = sum(self.work[vs].params for vs in vss)
        return model_state_bytes(params, self.prog.dtype, self.sc.training.optimizer,
                                 self.par.optimizer_shard, self.lay.data,
                                 self.par.offload.optimizer_states, self.ge)


def _check_offload(scenario: Scenario) -> None:
    off = scenario.parallel.offload
    for key, on in (("parameters", off.parameters), ("activations", off.activations)):
        if on:
            raise InputError(scenario.source, f"parallel.offload.{key}",
                             "true is not simulated yet (supported: offload.optimizer_states)")


def lower(scenario: Scenario, program: TransformerProgram, costs: CostModel,
          fidelity: str = "representative", groups: tuple = ()) -> Plan:
    """The task streams of one training iteration of `scenario` (see the module docstring).
    `groups` adds (axis name, GroupSpec) pairs for the collectives of an operator graph."""
    assert fidelity in FIDELITIES, f"fidelity must be one of {FIDELITIES}"
    _check_offload(scenario)
    low = _Lowering(scenario, program, costs, fidelity, groups)
    devices, represents = low.lay.simulated(fidelity)
    static = tuple(low.device(dev) for dev in devices)
    tasks: tuple[Task, ...] = low.b.tasks()
    streams = tuple((dev, name, tuple(tids)) for (dev, name), tids in low.b.streams.items())
    return Plan(tasks=tasks, streams=streams, devices=devices, represents=represents,
                stage_of=tuple(low.lay.coords(d)[0] for d in devices), static_memory=static,
                total_devices=low.lay.devices, micro_batches=low.micro)
