"""Offloading parameters and activations to the host, as tasks on the device's `offload`
stream (the lowering, `lower.lowering`, calls `Offload` from its compute emitters).

- `parallel.offload.activations` (activation offload, "checkpoint to CPU": torch
  `autograd.graph.save_on_cpu`, Transformer Engine `get_cpu_offload_context` as used by
  Megatron-LM `--cpu-offloading`; SuperNeurons, Wang et al. 2018, Sec. 3.2 "offloading";
  Capuchin, Peng et al. 2020, Sec. 3): the activations each transformer layer saves for its
  backward are copied device-to-host (D2H) as soon as the layer's forward ends, and the copy
  frees them; before the layer's backward a host-to-device (H2D) copy brings them back,
  prefetched one piece ahead (it may start once the compute task two before the backward
  has finished, so it runs under the preceding piece). The embedding's and the head's
  activations stay on the device (they are used right after they are made on the last
  stage). An operator graph (mlp, resnet, `type: graph`) moves unit by unit: its pieces
  are the units of `program.graph_stages` (an mlp layer, a resnet block or FC layer, a
  graph operator), each tensor with the last unit of the stage that keeps it; the last
  unit of the last stage keeps its activations (its backward follows at once).
- `parallel.offload.parameters` (ZeRO-Infinity, Rajbhandari et al. 2021, Sec. 5.1 and
  Sec. 6.2 "overlap-centric design"): the 16-bit parameters live on the host; each piece's
  parameters are copied H2D before the piece runs, prefetched one piece ahead, in the
  forward and again in the backward of every micro-batch, and freed when the piece ends.
  With `offload.optimizer_states` the host optimizer updates the host copy in place (no
  H2D of updated parameters, ZeRO-Offload, Ren et al. 2021, Sec. 4.1); with the optimizer
  on the device the updated parameters go D2H after the step.

Copies run one at a time per direction (H2D on the `offload` stream, D2H on
`offload_d2h`: PCIe is full duplex) at `CostModel.copy_s`
(the profile's `host.pcie_bandwidth_GBps`, PCIe Gen4 x16 ~25 GB/s, Gen5 x16 ~50 GB/s one
way); what they cannot hide under compute comes out of the event engine as offload_exposed.
Closed forms (tests/test_offload.py, tests/test_graph_offload.py): per micro-batch and
stage, activation offload moves L * a bytes each way (L layers of a saved bytes; a graph:
the saved bytes of its offloaded units); parameter offload moves 2 * P * e bytes H2D (P
local parameters of e bytes, forward and backward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.engine.tasks import Alloc
from simulator.program.host_placement import host_placed

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering
    from simulator.lower.stages import StageWork

__all__ = ["Offload", "PieceIO", "verify_note"]


@dataclass(frozen=True)
class PieceIO:
    """What offloading adds to one compute piece: dependencies (its H2D copy), memory it
    allocates at its start and frees at its end."""

    deps: tuple[int, ...] = ()
    alloc: Alloc = ()
    free: Alloc = ()


class Offload:
    """The offload emitter of one `Lowering` (shares its builder and cost model)."""

    def __init__(self, low: Lowering, share: Offload | None = None) -> None:
        self.low = low
        off = low.par.offload
        self.params, self.acts = off.parameters, off.activations
        self.split = self.params or self.acts  # compute runs piece by piece
        # (device, direction) -> bytes copied this iteration; shared with the other views
        self.bytes: dict[tuple[int, str], float] = share.bytes if share else {}

    # ---- per-piece quantities --------------------------------------------------------------
    def _param_bytes(self, w: StageWork, kind: str, k: int) -> float:
        """16-bit parameters of piece k (in execution order of `kind`)."""
        order = w.piece_params if kind == "B" else w.piece_params[::-1]
        return order[k] * self.low.e if self.params else 0.0

    def _act_bytes(self, w: StageWork, kind: str, k: int) -> float:
        """Offloaded saved activations of piece k (layers only)."""
        n = len(w.act_pieces)
        j = k if kind == "F" else n - 1 - k
        return w.act_pieces[j] if self.acts and w.offloadable[j] else 0.0

    # ---- emission --------------------------------------------------------------------------
    def _copy(self, key: tuple, dev: int, name: str, nbytes: float, deps: tuple[int, ...],
              mb: int, vs: int, alloc: Alloc = (), free: Alloc = ()) -> int:
        way = "h2d" if name.endswith("h2d") else "d2h"
        self.count(dev, way, nbytes)
        stream = "offload" if way == "h2d" else "offload_d2h"
        return self.low.b.add(("X",) + key, device=dev, stream=stream, name=name,
                              phase="offload", micro=mb, chunk=vs,
                              duration_s=self.low.costs.copy_s(nbytes), deps=deps,
                              alloc=alloc, free=free)

    def count(self, dev: int, way: str, nbytes: float) -> None:
        """Bytes over the host link this iteration ('h2d' or 'd2h'), also ZeRO-Offload's."""
        self.bytes[(dev, way)] = self.bytes.get((dev, way), 0.0) + nbytes

    def before(self, dev: int, kind: str, mb: int, vs: int, k: int) -> PieceIO:
        """What piece k of `kind` ('F' or 'B') waits for and holds: its H2D prefetch of
        parameters (both passes) and offloaded activations (backward), gated on the compute
        task two before the piece; in the forward, a free staging buffer (`_buffer`)."""
        w = self.low.work[vs]
        par = self._param_bytes(w, kind, k)
        act = self._act_bytes(w, kind, k) if kind == "B" else 0.0
        alloc, free = self._own_acts(w, kind, k)
        waits = self._buffer(dev, kind, mb, vs, k)
        if par + act == 0.0:
            return PieceIO(deps=waits, alloc=alloc, free=free)
        compute = self.low.b.streams.get((dev, "compute"), [])
        gate: tuple[int, ...] = (compute[-2],) if len(compute) >= 2 else ()
        if act:  # after its own trip down
            gate += (self.low.b.ids[("X", dev, "F", mb, vs, len(w.act_pieces) - 1 - k, "d2h")],)
        held = tuple((c, b) for c, b in (("parameters", par), ("activations", act)) if b)
        tid = self._copy((dev, kind, mb, vs, k, "h2d"), dev, f"{kind.lower()}_h2d", par + act,
                         gate, mb, vs, alloc=held)
        params = (("parameters", par),) if par else ()
        return PieceIO(deps=waits + (tid,), alloc=alloc, free=params + free)

    def _buffer(self, dev: int, kind: str, mb: int, vs: int, k: int) -> tuple[int, ...]:
        """Double buffering of the activation D2H (Transformer Engine's CPU offload keeps
        two layers' buffers in flight): forward piece k starts once piece k - 2's copy is
        done, so a slow link stalls the forward rather than piling up device memory."""
        w = self.low.work[vs]
        if kind != "F" or k < 2 or not self._act_bytes(w, "F", k - 2):
            return ()
        return (self.low.b.ids[("X", dev, "F", mb, vs, k - 2, "d2h")],)

    def _own_acts(self, w: StageWork, kind: str, k: int) -> tuple[Alloc, Alloc]:
        """Activations piece k allocates (forward) or frees (backward) itself."""
        n = len(w.act_pieces)
        j = k if kind == "F" else n - 1 - k
        nbytes = w.act_pieces[j]
        if not nbytes:
            return (), ()
        return ((("activations", nbytes),), ()) if kind == "F" else ((), (("activations", nbytes),))

    def after_forward(self, dev: int, mb: int, vs: int, k: int, tid: int) -> None:
        """The D2H copy of forward piece k's saved activations, freeing them on the device."""
        act = self._act_bytes(self.low.work[vs], "F", k)
        if act:
            self._copy((dev, "F", mb, vs, k, "d2h"), dev, "act_d2h", act, (tid,), mb, vs,
                       free=(("activations", act),))

    def after_step(self, dev: int, params: float, step: int) -> int:
        """Updated 16-bit parameters back to the host after an on-device optimizer step."""
        if not self.params:
            return step
        return self._copy((dev, "param_d2h"), dev, "param_d2h", params * self.low.e, (step,),
                          -1, -1)

    def static(self, states: Alloc) -> Alloc:
        """Model states on the device: no resident parameters under parameter offload."""
        if not self.params:
            return states
        return tuple((c, 0.0 if c == "parameters" else b) for c, b in states)

    def extras(self) -> tuple[tuple[str, object], ...]:
        """Host copy bytes per iteration of the busiest simulated device, per direction."""
        if not self.split:
            return ()
        most = {way: max((b for (_, w), b in self.bytes.items() if w == way), default=0.0)
                for way in ("h2d", "d2h")}
        return (("offload_bytes_per_device", {k: round(v) for k, v in most.items()}),)


def verify_note(scenario: Any) -> str | None:
    """What `verify` proves for offloaded tensors and host-placed operators: copies between
    device and host memory and a kernel run by the host leave every value as it is, so the
    numpy run checks the same tensors the placement moves (said in the verify report)."""

    off = scenario.parallel.offload
    moved = [k for k in ("optimizer_states", "parameters", "activations") if getattr(off, k)]
    ops = getattr(scenario.model, "ops", None) or ()
    hosted = [f"model.ops[{i}] ({op.name})" for i, op in enumerate(ops) if host_placed(op)]
    parts = []
    if moved:
        copies = "host copies and NVMe swaps" if off.optimizer_on_nvme else "host copies"
        parts.append(f"parallel.offload.{', '.join(moved)}: {copies} leave the values "
                     f"unchanged; checked the tensors they move (parameters, activations, "
                     f"gradients and optimizer states of the sharded run)")
    if hosted:
        parts.append(f"primitive_target CPU on {', '.join(hosted)}: the host computes the "
                     f"same kernel; checked its outputs and gradients against one device")
    return "; ".join(parts) or None
