"""ZeRO stage 3 / PyTorch FSDP (`parallel.optimizer_shard: 3`): parameters gathered unit by
unit before the compute that uses them, gradients reduce-scattered unit by unit (the
details are in `lower.reduction`'s docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.lower.data_parallel import Gates, ShardedGradients
from simulator.lower.device_states import state_ranks
from simulator.lower.state import fsdp2_layout

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering

__all__ = ["ShardedParameters"]


class ShardedParameters(ShardedGradients):
    """Stage 3: parameters sharded too, gathered unit by unit before the compute that uses
    them; gradients reduce-scattered unit by unit."""

    per_unit = True

    def __init__(self, low: Lowering) -> None:
        super().__init__(low)
        self.grads: dict[int, float] = {}  # device -> sharded gradient bytes made

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
        pieces = self.sharded(vs)
        return min(sum(pieces), 2 * max(pieces, default=0)) * self.low.e

    def backward_frees(self, vs: int) -> tuple[tuple[str, float], ...]:
        nbytes = self._regathered(vs)
        return (("parameters", nbytes),) if self.low.par.recompute != "none" and nbytes \
            else ()

    def unit_gates(self, dev: int, kind: str, mb: int, vs: int
                   ) -> tuple[Gates, tuple[float, ...]]:
        low = self.low
        params = self.sharded(vs)  # backward order: head, layers, embedding
        order = tuple(reversed(params)) if kind == "F" else params
        gates: list[tuple[int, ...]] = []
        held: list[float] = []
        last = len(order) - 1
        compute = low.b.streams.get((dev, "compute"), [])
        before = tuple(compute[-1:])  # the task running before this one
        for k, n in enumerate(order):
            nbytes = n * low.e
            if nbytes <= 0:  # a unit whose parameters are all kept whole gathers nothing
                gates.append(())
                held.append(0.0)
                continue
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
        """Each unit's gradient reduce-scattered after its backward, every micro-batch.
        Under FSDP2's state layout (`lower.state.fsdp2_layout`) the first micro-batch's
        reduce-scatter makes the unit's sharded gradient (`foreach_reduce`'s output, kept
        as `.grad`; later micro-batches add into it), which the step frees (`made_grads`)."""
        low = self.low
        if mb == low.micro - 1:
            self.reduce_whole(dev, vs, piece_tids)
        made = mb == low.micro_range(vs)[0] and fsdp2_layout(
            low.prog.state_layout, low.par.optimizer_shard,
            bool(low.par.offload.optimizer_states))
        for k, n in enumerate(self.sharded(vs)):
            nbytes = n * low.ge
            if nbytes <= 0:
                continue
            grad = nbytes / state_ranks(low, [vs]) if made else 0.0
            self.grads[dev] = self.grads.get(dev, 0.0) + grad
            self.emit(dev, "grad_reduce", self.collective, nbytes,
                      low.costs.collective_s(self.collective, nbytes, self.group),
                      (piece_tids[min(k, len(piece_tids) - 1)],), (mb, vs, k),
                      alloc=(("gradients", grad),) if grad else (), stream="dp_reduce")

    def made_grads(self, dev: int) -> float:
        """Bytes of the sharded gradients dev's reduce-scatters made (FSDP2's layout), which
        `optimizer.zero_grad()` frees after the step (set_to_none)."""
        return self.grads.get(dev, 0.0)

    def gather_before(self, dev: int, vs: int, key: tuple) -> tuple[int, ...]:
        """Before a recompute pass, its chunk's parameters gathered again (held until its
        backward ends), unless the forward's are kept (`_keeps`)."""
        if key[0] != "R" or self._keeps():
            return ()
        low = self.low
        nbytes = sum(self.sharded(vs)) * low.e
        if nbytes <= 0:
            return ()
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
