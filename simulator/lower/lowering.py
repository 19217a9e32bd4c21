"""The pipeline emitter behind `lower.iteration.lower(scenario, program, costs, fidelity) ->
Plan`: one training iteration as per-device task streams with dependencies, every duration
priced by the cost model.

Per simulated device (one per pipeline stage, or every rank under full fidelity):
- compute stream: one task per (virtual stage, micro-batch, F | R | B | W) in the pipeline
  schedule's order (`lower.pipeline`; with W steps, zb_h1, B is the input gradient and W
  the `weight_grad` kernels); its duration is the sum of its kernels plus its
  critical-path tensor-parallel collectives (`Task.comm_s` keeps the split). Under
  recompute, R re-runs the forward right before B, once B's gradient has arrived (Megatron
  recomputes inside the backward). The optimizer step ends the stream.
- pp_fwd / pp_bwd: point-to-point sends of activations and their gradients (s*b*h*dtype
  bytes, /t under sequence parallelism; an operator graph's: the tensors crossing the cut,
  `program.graph_stages`) to the neighbouring stage; the receiver's task depends on the
  send. Sends do not block the sender's compute (asynchronous p2p) unless the stack's sends
  are blocking (`Program.p2p_blocking`): then they run on its compute stream.
- dp: the data-parallel gradient reduction and parameter gathers of the optimizer-sharding
  level (`lower.reduction`, one strategy per ZeRO stage). With overlap.grad_reduce the
  buckets of the last micro-batch leave as its backward produces them (its backward is split
  into per-layer tasks for that); otherwise they all wait for the end of the backward.
  Gradient reductions on the other mesh axes run once, before the optimizer step.
With offload.optimizer_states the optimizer runs on the host (ZeRO-Offload): gradients go
down and parameters come back over PCIe on the offload stream, and the wait is
offload_exposed. Offloading parameters or activations (`lower.offload`) runs compute
piece by piece with host copies on the offload streams. A pipeline over a program kept as
one block is refused (InputError).
Memory: F allocates the micro-batch's activations, B frees them (with W steps: but the W
GEMMs' saved inputs, and allocates the output gradients W reads; W frees both); transfers
hold their buffers while they run; model states are allocated before the iteration.
With `cuts` given (representative fidelity), a run of at least COLLAPSE_MIN identical
gradient buckets of one piece becomes one task of that many units (`Task.units`), cut
where `cuts` says another transfer on the link must run between two of its buckets
(`engine.blocks`, `simulator.simulation.simulate`).
"""

from __future__ import annotations

from simulator.config.scenario.schema import DTYPE_BYTES, Scenario
from simulator.engine.tasks import Alloc
from simulator.lower.a2a_overlap import hidden_comm, pair_slowdown, paired_steps
from simulator.lower.buckets import COLLAPSE_MIN
from simulator.lower.costs import CostModel, Priced
from simulator.lower.data_parallel import DataParallel
from simulator.lower.device_states import host_bytes, model_states, state_bytes
from simulator.lower.dualpipe import emit_step, pair_exposed
from simulator.lower.fabric import Routes, routes_for
from simulator.lower.layout import RankMesh
from simulator.lower.offload import Offload
from simulator.lower.pipeline import schedule_steps
from simulator.lower.reduction import strategy_for
from simulator.lower.stages import StageWork, stage_work
from simulator.lower.state import state_dtype_of
from simulator.lower.step import finish, grad_buffer_s
from simulator.lower.tasks_builder import Builder
from simulator.models.split import StageSplit
from simulator.program.program import Program

__all__ = ["FIDELITIES", "Lowering", "COLLAPSE_MIN", "Cuts"]

FIDELITIES = ("representative", "full")
Cuts = dict[tuple[int, int, int], tuple[int, ...]]  # (device, vs, bucket run) -> unit offsets


class Lowering:
    """The pipeline emitter: per simulated device, the compute tasks of its schedule, the
    point-to-point sends between stages, the optimizer step; the data-parallel strategy
    (`lower.reduction`) adds its collectives. Used once by `lower`, then dropped."""

    def __init__(self, scenario: Scenario, prog: Program, costs: CostModel,
                 fidelity: str, ranks: RankMesh, share: Lowering | None = None,
                 micro: int | None = None, cuts: Cuts | None = None,
                 split: StageSplit | None = None) -> None:
        self.sc, self.prog, self.costs, self.fidelity = scenario, prog, costs, fidelity
        self.ranks = ranks
        # share: a view for devices priced by another cost model (lower.device_costs),
        # emitting into the same plan with the same layers per stage
        layers = tuple(w.copies for w in share.work) if share else (
            split.counts if split else None)
        self.work: tuple[StageWork, ...] = stage_work(scenario, prog, ranks, costs, layers)
        self.b: Builder = share.b if share else Builder()
        self.e = DTYPE_BYTES[prog.dtype]
        self.ge = prog.grad_bytes  # gradient elements: buffer and reduction
        # parameter elements in the sharded optimizer's all-gather (FP8 weights: less)
        self.pe = prog.gather_bytes
        tr = scenario.training  # the optimizer's state dtype, FP8 weights (lower.state)
        self.state_dtype: str = state_dtype_of(tr.optimizer_dtype, tr.moments_dtype)
        self.fp8_params = tr.fp8_params and getattr(scenario.model, "dtype", "") == "fp8"
        self.par = scenario.parallel
        self.micro: int = share.micro if share else (
            scenario.grad_accum_steps if micro is None else micro)
        self.cuts: Cuts | None = share.cuts if share else (
            cuts if fidelity == "representative" else None)
        self.block_of: list[tuple[int, tuple[int, int, int, int]]] = (
            share.block_of if share else [])
        # the fat-tree uplinks transfers climb through (fair sharing with a tree; lower.fabric)
        self.routes: Routes | None = share.routes if share else routes_for(
            costs.hardware, ranks, fidelity)
        self.dp: DataParallel = strategy_for(self)
        self.off: Offload = Offload(self, share.off if share else None)
        self.gates: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}
        self.send_s: dict[tuple[float, bool], float] = {}  # (bytes, intra) -> seconds
        # rank arithmetic asked for once per task, computed once per plan
        self.vstages = ranks.virtual_stages
        # the virtual stages one micro-batch passes: all of them, or under DualPipe those of
        # its direction (p of the 2p, `lower.dualpipe`)
        self.chain = ranks.pipeline if ranks.mirrored else self.vstages
        # DualPipe: a forward's send that leaves after the device's next pass (kind 'F>'),
        # and the communication of a pair's forward that its backward hides ('Fp', 'BWp')
        self.deferred: tuple[int, int, int] | None = None  # (peer, micro-batch, vs)
        # (seconds that hide communication, communication hidden); what a pair hides: all
        # its collectives (DualPipe), or its expert all-to-alls (`lower.a2a_overlap`)
        # ... and the forward's host-bound MoE layer pairs (`StageWork.pair_deltas`)
        self.pair_fwd: tuple[float, float, tuple[float, ...]] = (0.0, 0.0, ())
        self.hidden = hidden_comm(self.par.overlap.moe_a2a)
        self.pair_slowdown = pair_slowdown(self.par.overlap.moe_a2a, costs)
        self.data = ranks.data
        # the ranks that hold identical replicas of a parameter and so share its optimizer
        # states (ZeRO / distributed optimizer): data x context. Megatron-LM builds its
        # distributed optimizer over get_data_parallel_group(with_context_parallel=True)
        # (megatron/core/optimizer/__init__.py, get_megatron_optimizer); context ranks hold
        # the same weights and see different tokens (issue 24 (b)).
        self.shard_ranks = ranks.data * ranks.size("cp")
        self.peers: dict[tuple[int, int], int] = share.peers if share else {}
        self.w_pass = False  # the device's schedule has W steps: B and W split (`device`)
        # host memory each simulated device's offload keeps there (`lower.device_states.host_bytes`)
        self.host_bytes: dict[int, float] = share.host_bytes if share else {}
        # NVMe bytes each simulated device's states take under offload nvme (`lower.nvme`)
        self.nvme_bytes: dict[int, float] = share.nvme_bytes if share else {}

    def micro_range(self, vs: int) -> range:
        """The micro-batches that pass virtual stage vs: all of them, or under DualPipe
        those of its direction (the first half forward, the second reverse)."""
        if not self.ranks.mirrored:
            return range(self.micro)
        half = self.micro // 2
        return range(half) if vs < self.ranks.pipeline else range(half, self.micro)

    def last_micro(self, vs: int) -> int:
        """The last micro-batch through vs: its backward ends vs's gradient accumulation."""
        return self.micro_range(vs)[-1]

    def release(self) -> None:
        """Drop the emitters' references back to this lowering once the plan is built:
        without that cycle the builder is freed as soon as the lowering is, not by a pass
        of the cyclic garbage collector (which a sweep pauses, `planner.sweep`)."""
        del self.dp, self.off

    def blocks(self, count: int, where: tuple[int, int, int]) -> list[tuple[int, int]]:
        """(first unit, units) of the tasks that run `count` identical buckets: one each,
        or, collapsing, one block between consecutive cuts."""
        if self.cuts is None or count < COLLAPSE_MIN or not self.dp.collapsible():
            return [(u, 1) for u in range(count)]
        edges = (0, *self.cuts.get(where, ()), count)
        return [(a, b - a) for a, b in zip(edges, edges[1:])]

    def _peer(self, dev: int, vs: int) -> int:
        """The rank holding virtual stage vs with the same coordinates as dev elsewhere."""
        peer = self.peers.get((dev, vs))
        if peer is None:
            peer = self.peers[(dev, vs)] = self.ranks.with_stage(
                dev, self.ranks.stage_of_virtual(vs))
        return peer

    # ---- compute tasks -------------------------------------------------------------------
    def forward(self, dev: int, mb: int, vs: int, defer: bool = False,
                pair: bool = False) -> None:
        """F of micro-batch mb; `defer`: its send leaves after the device's next pass;
        `pair`: the first half of an overlapped pair, its communication hidden (DualPipe)."""
        w, deps = self.work[vs], self.dp.gather_before(dev, vs, ("F", mb, vs))
        if vs % self.chain > 0:
            prev = self._peer(dev, vs - 1)
            deps += (self.b.ids[("S", prev, "fwd", mb, vs - 1) if prev != dev
                                else ("C", dev, "F", mb, vs - 1)],)
        # the first micro-batch's forward waits, piece by piece, for the parameter all-gather;
        # under ZeRO-3 every forward does, for the gather of its unit
        gates = self.gates.pop((dev, vs), None) if mb == self.micro_range(vs)[0] else None
        held: tuple[float, ...] = ()
        units = self.dp.unit_gates(dev, "F", mb, vs)
        if units is not None:
            gates, held = units
        if not gates and self.off.split:
            gates = ((),) * len(w.fwd_pieces)
        pieces, gates = (w.fwd_pieces, gates) if gates else ((w.fwd,), ((),))
        for k, (piece, gate) in enumerate(zip(pieces, gates)):
            first, last = k == 0, k == len(pieces) - 1
            key = ("C", dev, "F", mb, vs) if last else ("C", dev, "F", mb, vs, k)
            io = self.off.before(dev, "F", mb, vs, k) if self.off.split else None
            alloc = (("activations", w.activation_bytes),) if first else ()
            comm_s = piece.comm_s - self.hidden(piece) if pair else piece.comm_s
            tid = self.b.add(key, device=dev, stream="compute", name="F", phase="fwd",
                             micro=mb, chunk=vs, duration_s=piece.compute_s + comm_s,
                             comm_s=comm_s,
                             deps=(deps if first else ()) + gate + (io.deps if io else ()),
                             comm=piece.comm, alloc=io.alloc if io else alloc,
                             free=((("parameters", held[k]),) if held and held[k] else ())
                             + (io.free if io else ()))
            if io:
                self.off.after_forward(dev, mb, vs, k, tid)
        if pair:
            self.pair_fwd = (sum(p.compute_s + (p.comm_s - self.hidden(p)) for p in pieces),
                             sum(self.hidden(p) for p in pieces), w.pair_deltas)
        if vs % self.chain < self.chain - 1:
            if defer:
                self.deferred = (self._peer(dev, vs + 1), mb, vs)
            else:
                self._send(dev, self._peer(dev, vs + 1), "fwd", mb, vs, tid)

    def _send(self, dev: int, peer: int, direction: str, mb: int, vs: int, after: int) -> None:
        if peer == dev:
            return
        w = self.work[vs]
        nbytes = w.send_fwd_bytes if direction == "fwd" else w.send_bwd_bytes
        intra = self.ranks.same_node(dev, peer)
        buf = (("communication_buffers", nbytes),)
        pair = self.costs.peer_send_s
        if pair:
            seconds = pair(nbytes, intra, dev, peer)
        elif (nbytes, intra) in self.send_s:
            seconds = self.send_s[(nbytes, intra)]
        else:
            seconds = self.send_s[(nbytes, intra)] = self.costs.send_recv_s(nbytes, intra)
        # a blocking send (program.p2p_blocking) holds the sender's compute stream
        stream = "compute" if self.prog.p2p_blocking else "pp_" + direction
        self.b.add(("S", dev, direction, mb, vs), device=dev, stream=stream,
                   name="send_" + direction, phase="comm", micro=mb, chunk=vs,
                   duration_s=seconds, deps=(after,),
                   link="fabric" if intra else "nic", comm=(("send_recv", nbytes),),
                   alloc=buf, free=buf,
                   route=self.routes.send(dev, peer) if self.routes and not intra else -1)

    def _grad_dep(self, dev: int, mb: int, vs: int) -> tuple[int, ...]:
        if vs % self.chain == self.chain - 1:
            return ()
        nxt = self._peer(dev, vs + 1)
        key = ("S", nxt, "bwd", mb, vs + 1) if nxt != dev else ("C", dev, "B", mb, vs + 1)
        return (self.b.ids[key],)

    def backward(self, dev: int, mb: int, vs: int, full: bool = False,
                 pair: bool = False) -> None:
        """B of micro-batch mb (with W passes: its input gradient); `full`: the whole
        backward although the schedule has W passes; `pair`: the second half of an
        overlapped pair (DualPipe), the pair's communication hidden behind its computation."""
        w, deps = self.work[vs], self._grad_dep(dev, mb, vs)
        wp = self.w_pass and not full
        saved = self._w_inputs(vs) if wp else 0.0
        free: Alloc = (("activations", w.activation_bytes - saved),)
        if w.recomputed:
            deps += self.dp.gather_before(dev, vs, ("R", mb, vs))
            r = w.recompute
            self.b.add(("C", dev, "R", mb, vs), device=dev, stream="compute", name="R",
                       phase="recompute", micro=mb, chunk=vs,
                       duration_s=r.compute_s + r.comm_s, comm_s=r.comm_s, deps=deps,
                       comm=r.comm, alloc=(("activations", w.working_bytes),))
            deps, free = (), (("activations", w.activation_bytes + w.working_bytes - saved),
                              *self.dp.backward_frees(vs))
        deps += self.dp.gather_before(dev, vs, ("B", mb, vs))
        units = None if w.recomputed else self.dp.unit_gates(dev, "B", mb, vs)
        split = units is not None or self.off.split or (
            mb == self.last_micro(vs) and self.data > 1 and self.par.overlap.grad_reduce)
        pieces = self._bwd_pieces(vs, "B" if wp else "BW", split)
        gates, held = units if units is not None else (((),) * len(pieces), ())
        grads: Alloc = (("activations", w.w_grad_bytes),) if wp else ()
        exposed, extra = pair_exposed(self, pieces, w.pair_deltas) if pair else (0.0, 0.0)
        passes = () if wp else grad_buffer_s(self, mb, vs, len(pieces))
        tids = []
        for k, piece in enumerate(pieces):
            last = k == len(pieces) - 1
            comm_s = (piece.comm_s - self.hidden(piece) + (exposed if last else 0.0)
                      if pair else piece.comm_s)
            compute_s = max(0.0, piece.compute_s + extra) if last else piece.compute_s
            compute_s += passes[k] if passes else 0.0
            key = ("C", dev, "B", mb, vs) if last else ("C", dev, "B", mb, vs, k)
            gathered = (("parameters", held[k]),) if held and held[k] else ()
            io = self.off.before(dev, "B", mb, vs, k) if self.off.split else None
            own = io.free if io else (free if last else ())
            transient = (("activations", w.transient_bytes),) \
                if k == 0 and w.transient_bytes else ()
            tids.append(self.b.add(key, device=dev, stream="compute", name="B", phase="bwd",
                                   micro=mb, chunk=vs,
                                   duration_s=compute_s + comm_s,
                                   comm_s=comm_s,
                                   deps=(deps if k == 0 else ()) + gates[k]
                                   + (io.deps if io else ()), comm=piece.comm,
                                   alloc=(grads if k == 0 else ()) + transient,
                                   free=own + gathered + transient))
        if vs % self.chain > 0:
            self._send(dev, self._peer(dev, vs - 1), "bwd", mb, vs, tids[-1])
        if not wp and (self.par.overlap.grad_reduce or self.dp.per_unit):
            self.dp.reduce(dev, mb, vs, tids[-1:] if w.whole_grads else tids)

    def _bwd_pieces(self, vs: int, kind: str, split: bool) -> tuple[Priced, ...]:
        """The pieces a 'B', 'BW' (whole backward) or 'W' task runs, or their whole as one
        (with W passes, B is the input-gradient part of the backward)."""
        w = self.work[vs]
        if kind == "BW" or (kind == "B" and not self.w_pass):
            return w.bwd_pieces if split else (w.bwd,)
        pieces = w.weight_pieces if kind == "W" else w.input_pieces
        return pieces if split else (sum(pieces[1:], pieces[0]),)

    def _w_inputs(self, vs: int) -> float:
        """Saved bytes a B leaves alive for its W: the W GEMMs' inputs, at most all."""
        w = self.work[vs]
        return min(w.w_input_bytes, w.activation_bytes) if self.w_pass else 0.0

    def weight(self, dev: int, mb: int, vs: int) -> None:
        """W of micro-batch mb (Qi et al. 2023, Sec. 2); the gradient reductions follow it."""
        w = self.work[vs]
        split = self.dp.per_unit or (
            mb == self.last_micro(vs) and self.data > 1 and self.par.overlap.grad_reduce)
        pieces = self._bwd_pieces(vs, "W", split)
        kept = (("activations", self._w_inputs(vs) + w.w_grad_bytes),)
        passes = grad_buffer_s(self, mb, vs, len(pieces)) or (0.0,) * len(pieces)
        tids = []
        for k, piece in enumerate(pieces):
            last = k == len(pieces) - 1
            key = ("C", dev, "W", mb, vs) + (() if last else (k,))
            tids.append(self.b.add(key, device=dev, stream="compute", name="W", phase="bwd",
                                   micro=mb, chunk=vs,
                                   duration_s=piece.compute_s + piece.comm_s + passes[k],
                                   comm_s=piece.comm_s, comm=piece.comm,
                                   deps=(self.b.ids[("C", dev, "B", mb, vs)],) if k == 0 else (),
                                   free=kept if last else ()))
        if self.par.overlap.grad_reduce or self.dp.per_unit:
            self.dp.reduce(dev, mb, vs, tids[-1:] if w.whole_grads else tids)

    def device(self, dev: int) -> Alloc:
        stage = self.ranks.stage(dev)
        steps = schedule_steps(self.par.schedule, stage, self.ranks.pipeline, self.micro,
                               self.ranks.chunks, self.sc.source)
        if self.par.overlap.moe_a2a:
            steps = paired_steps(steps)
        vss = sorted({vs for _, _, vs in steps})
        for vs, gates in self.dp.early_gates(dev, vss).items():
            self.gates[(dev, vs)] = gates
        self.w_pass = any(kind == "W" for kind, _, _ in steps)
        for kind, mb, vs in steps:
            emit_step(self, dev, kind, mb, vs)
        assert self.deferred is None, "a deferred send after the last step"
        finish(self, dev, vss)
        params = sum(self.work[vs].params for vs in vss)
        self.host_bytes[dev] = host_bytes(self, params, vss)
        if self.par.offload.optimizer_on_nvme:
            self.nvme_bytes[dev] = state_bytes(self, params, vss)
        return model_states(self, vss) + self.prog.resident
