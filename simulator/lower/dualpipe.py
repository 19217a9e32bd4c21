"""DualPipe (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv 2412.19437, Sec. 3.2.1,
Figs. 4-5, Table 2): a bidirectional pipeline schedule.

Layout: p (even) devices; the model is cut into p stages as for 1F1B, and device d holds two
of them: stage d of the forward direction (virtual stage d) and stage p-1-d of the reverse
direction (virtual stage p + (p-1-d)) -- two copies of the model's parameters over the
pipeline, "2x parameters" (Table 2). Half the micro-batches (0 .. m/2-1) enter at device 0
and run through the forward direction's stages 0..p-1 (devices 0..p-1); the other half
(m/2 .. m-1) enter at device p-1 and run through the reverse direction's stages 0..p-1
(devices p-1..0). So virtual stage vs runs model stage vs % p, on device vs for vs < p and on
device 2p-1-vs otherwise (`lower.layout.RankMesh.mirrored`).

The order of each device's passes is the one of the authors' implementation
(deepseek-ai/DualPipe, dualpipe/dualpipe.py, `DualPipe.step`: steps 1-8, nF0, nF0F1,
nB1W1F1, nF0B1F1B0, nB1F1B0, nB1B0, nWB0, nW; read, not copied), where phase 0 is the
forward direction on the first half of the devices and the reverse one on the second half.
Its passes, as the step kinds the lowering runs:

- `F`: a forward whose output is sent when it ends;
- `F>`: a forward whose output leaves only after the device's next pass (the
  implementation appends the send after that pass: the warm-up forwards of phase 0 on all
  but the middle devices, the middle devices' last warm-up forward of phase 1);
- `Fp` + `BWp`: a forward and a full backward of the other direction run as one overlapped
  pair (`_forward_backward_chunk`, "F&B" of Table 2): each one's communication (the
  tensor/expert-parallel collectives on its critical path) hides behind the pair's
  computation, and both outputs leave when the pair ends (the middle devices' first pair of
  step 4 is not overlapped, as in the implementation: `F>` then `BW`);
- `BW`: a full backward (input and weight gradients, then the send);
- `B`: the input-gradient part of a backward with zero-bubble enabled (its weight-gradient
  part `W` is queued and runs at a later `W`, in FIFO order).

With uniform stages, free communication, T_F = T_B (the figure's equal cells) and m >= 2p
the schedule leaves (p/2 - 1)(F&B + B - 3W) idle on every device (Table 2; F&B = T_F + T_B +
T_W, B = T_B + T_W, W = T_W; benchmarks/dualpipe_bubble.py). Not modelled: the
implementation's prefetched receives (a device waits at some passes for the input of the
next forward as well), which cost time only where T_F > T_B.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from simulator.lower.moe_pair_host import paired_layers_s

if TYPE_CHECKING:
    from simulator.lower.costs import Priced
    from simulator.lower.lowering import Lowering

__all__ = ["dualpipe_steps", "mirror_stage", "emit_step", "pair_exposed", "STEP_ARGS"]


def mirror_stage(vs: int, stages: int) -> int:
    """The device (pipeline stage) that runs virtual stage `vs` under DualPipe."""
    return vs if vs < stages else 2 * stages - 1 - vs


class _Emitter:
    """Turns DualPipe's per-phase passes into (kind, micro-batch, virtual stage) steps."""

    def __init__(self, rank: int, p: int, micro: int) -> None:
        self.p, self.half = p, micro // 2
        self.second = rank >= p // 2
        self.vs = (rank, 2 * p - 1 - rank)  # virtual stage of each direction
        self.f, self.b = [0, 0], [0, 0]  # next forward / backward per direction
        self.queue: deque[tuple[int, int]] = deque()  # deferred W: (micro-batch, vs)
        self.steps: list[tuple[str, int, int]] = []

    def _dir(self, phase: int) -> int:
        return phase ^ int(self.second)

    def forward(self, phase: int, kind: str = "F") -> None:
        d = self._dir(phase)
        self.steps.append((kind, d * self.half + self.f[d], self.vs[d]))
        self.f[d] += 1

    def backward(self, phase: int, zb: bool = False, kind: str = "BW") -> None:
        d = self._dir(phase)
        mb = d * self.half + self.b[d]
        self.b[d] += 1
        if zb:
            self.steps.append(("B", mb, self.vs[d]))
            self.queue.append((mb, self.vs[d]))
        else:
            self.steps.append((kind, mb, self.vs[d]))

    def weight(self) -> None:
        mb, vs = self.queue.popleft()
        self.steps.append(("W", mb, vs))

    def pair(self, phase0: int, phase1: int) -> None:
        self.forward(phase0, "Fp")
        self.backward(phase1, kind="BWp")


def dualpipe_steps(stage: int, stages: int, micro: int, chunks: int) -> list[tuple[str, int,
                                                                                    int]]:
    """The steps of device `stage` (module doc); `micro` even and >= 2 * `stages`, `stages`
    even (the scenario rules refuse the rest)."""
    p, rank = stages, stage
    half_ranks, hr = p // 2, min(rank, p - 1 - rank)
    middle = rank in (half_ranks - 1, half_ranks)
    e = _Emitter(rank, p, micro)
    for _ in range((half_ranks - hr - 1) * 2):  # step 1: nF0
        e.forward(0)
    for i in range(hr + 1):  # step 2: nF0F1
        e.forward(0, "F" if middle else "F>")
        e.forward(1, "F>" if middle and i == hr else "F")
    for _ in range(half_ranks - hr - 1):  # step 3: nB1W1F1 (zero bubble)
        e.backward(1, zb=True)
        e.weight()
        e.forward(1)
    for i in range(micro // 2 - p + hr + 1):  # step 4: nF0B1F1B0
        if i == 0 and middle:  # not overlapped "to further reduce bubble size"
            e.forward(0, "F>")
            e.backward(1)
        else:
            e.pair(0, 1)
        e.pair(1, 0)
    for _ in range(half_ranks - hr - 1):  # step 5: nB1F1B0
        e.backward(1)
        e.pair(1, 0)
    zb = False
    for i in range(hr + 1):  # step 6: nB1B0, the second half with zero bubble
        if i == (hr + 1) // 2 and hr % 2 == 1:
            zb = True
        e.backward(1, zb=zb)
        if i == (hr + 1) // 2 and hr % 2 == 0:
            zb = True
        e.backward(0, zb=zb)
    for _ in range(half_ranks - hr - 1):  # step 7: nWB0 (zero bubble)
        e.weight()
        e.backward(0, zb=True)
    for _ in range(hr + 1):  # step 8: nW
        e.weight()
    assert not e.queue and e.f == e.b == [micro // 2] * 2
    return e.steps


# each step kind as the Lowering method that emits it ('F' forward, 'B' backward, 'W'
# weight) and its flags
STEP_ARGS: dict[str, tuple[str, dict[str, bool]]] = {
    "F": ("F", {}), "F>": ("F", {"defer": True}), "Fp": ("F", {"defer": True, "pair": True}),
    "B": ("B", {}), "BW": ("B", {"full": True}), "BWp": ("B", {"full": True, "pair": True}),
    "W": ("W", {})}


def emit_step(low: Lowering, dev: int, kind: str, mb: int, vs: int) -> None:
    """Emit one schedule step (`lower.pipeline`) on `low`, then the forward send a previous
    step deferred to after it (DualPipe's 'F>' and 'Fp')."""
    task, flags = STEP_ARGS[kind]
    pending, low.deferred = low.deferred, None
    {"F": low.forward, "B": low.backward, "W": low.weight}[task](dev, mb, vs, **flags)
    if pending is not None:
        peer, pmb, pvs = pending
        low._send(dev, peer, "fwd", pmb, pvs, low.b.ids[("C", dev, task, mb, vs)])


def pair_exposed(low: Lowering, pieces: tuple[Priced, ...],
                 bwd_deltas: tuple[float, ...] = ()) -> tuple[float, float]:
    """(communication of an overlapped forward-backward pair that its computation does not
    hide, compute the pair adds to its halves'). `pieces`: the pair's backward; its forward
    was recorded in `low.pair_fwd`. Exposed: both halves' hidden collectives (`low.hidden`:
    all of them under DualPipe) against both halves' other work, max(0, C_f + C_b - K_f -
    K_b) (DeepSeek-V3 Sec. 3.2.1: each chunk's all-to-all and pipeline communication run
    beside the other's computation; Megatron-Core's expert all-to-all overlap,
    `lower.a2a_overlap`). With `low.pair_slowdown` s > 0 the work beside the collectives
    runs 1 + s times slower while they run (the engine's overlap slowdown): the pair takes
    max(C, K + C s / (1 + s)), C exposed beyond K by max(C - K, C s / (1 + s)). Added:
    the host-bound MoE layer pairs' segments less their halves' compute
    (`lower.moe_pair_host.paired_layers_s` of the forward's and `bwd_deltas`), part of K."""
    fwd_rest, fwd_hidden, fwd_deltas = low.pair_fwd
    low.pair_fwd = (0.0, 0.0, ())
    extra = paired_layers_s(fwd_deltas, bwd_deltas)
    comm = fwd_hidden + sum(low.hidden(p) for p in pieces)
    exposed = max(0.0, comm - fwd_rest - extra - sum(p.compute_s + (p.comm_s - low.hidden(p))
                                                     for p in pieces))
    s = low.pair_slowdown  # the work beside the hidden collectives runs 1 + s times slower
    return (max(exposed, comm * s / (1.0 + s)) if s else exposed), extra
