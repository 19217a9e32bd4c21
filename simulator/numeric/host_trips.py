"""Offloaded tensors in `verify` of an operator graph (mlp, resnet, `type: graph`): what
`lower.offload` copies to host memory and back is copied so here, and the run goes on
with the copies that came back.

- `parallel.offload.parameters`: before each micro-batch every parameter comes up from its
  host copy (ZeRO-Infinity keeps the 16-bit parameters on the host, Rajbhandari et al.
  2021, Sec. 5.1); the forward and the backward compute with what came up.
- `parallel.offload.activations`: after the forward, the activations each operator of an
  offloaded unit keeps for its backward go to the host and the device drops them; the
  backward reads what comes back (torch `autograd.graph.save_on_cpu`). The last unit's
  stay on the device, as `run` keeps them.

- host-placed operators (MindSpore `primitive_target: CPU`, "Host&Device Heterogeneous"):
  the operator runs on the host, so its output comes up to the device after its forward
  and the gradient of that output goes down before its backward (`placed`; the parameters
  of such an operator stay on the host and never travel).

A copy moves every block of every rank into a fresh host array and back into a fresh device
array; `Faults.offload_fault` mutates the way back ('drop': zeros, a copy that never
arrived; 'corrupt': the first element of the first block off by one), which `verify` must
catch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.numeric.dist import DistTensor
from simulator.sharding.plan import ShardingPlan

__all__ = ["HostTrips", "HOST_TARGET", "host_ops"]

HOST_TARGET = "CPU"  # MindSpore's primitive_target value for the host ("Other Features")


def host_ops(graph: Any) -> frozenset[str]:
    """The operators of `graph` placed on the host (`attrs.primitive_target: CPU`)."""
    return frozenset(op.name for op in graph.ops
                     if op.attrs.get("primitive_target") == HOST_TARGET)


@dataclass
class HostTrips:
    """Round trips to the host: of the parameters (`params`), of the saved activations of
    the operators in `acts`, of the outputs (up) and output gradients (down) of the
    host-placed operators in `placed`; `moved`: bytes each way, over all ranks and
    micro-batches."""

    params: bool
    acts: frozenset[str]
    placed: frozenset[str] = frozenset()
    moved: dict[str, float] = field(default_factory=lambda: {"d2h": 0.0, "h2d": 0.0})
    fault: str | None = None

    def trip(self, t: DistTensor, ways: tuple[str, ...] = ("d2h", "h2d"),
             itemsize: int | None = None) -> DistTensor:
        """`t` copied block by block to host memory and back (`ways`: the directions it
        is counted in: a host-placed operator's output only comes up, its gradient only
        goes down; the way back is the mutation's all the same), counted at `itemsize`
        bytes an element (None: as held)."""
        host = [np.array(b, copy=True) for b in t.blocks]
        size = float(sum(b.size * (itemsize or b.itemsize) for b in host))
        for way in ways:
            self.moved[way] += size
        back = [np.zeros_like(b) if self.fault == "drop" else np.array(b, copy=True)
                for b in host]
        if self.fault == "corrupt" and back and back[0].size:
            back[0].flat[0] += 1.0
        return DistTensor(t.shape, t.layout, tuple(back))

    def saved(self, plan: ShardingPlan, saved: Any) -> None:
        """The saved activation inputs (`saved[k]`, of op k of `plan`) of the offloaded
        operators replaced by their copies back from the host (each tensor moved once)."""
        done: dict[int, DistTensor] = {}
        for k, p in enumerate(plan.ops):
            ins = saved[k]
            if p.op.name not in self.acts or ins is None:
                continue
            for i, t in enumerate(ins):
                if plan.graph.tensors[p.op.inputs[i]].kind != "activation":
                    continue
                if id(t) not in done:
                    done[id(t)] = self.trip(t)
                ins[i] = done[id(t)]

    def came_up(self, ex: Any, name: str, output: str) -> None:
        """After operator `name`'s forward: a host-placed operator's output copied up."""
        if name in self.placed:
            ex.values[output] = self.trip(ex.values[output], ("h2d",))

    def goes_down(self, ex: Any, name: str, output: str, grads: dict) -> None:
        """Before operator `name`'s backward: a host-placed operator's output gradient (each
        layout it was accumulated in) copied down to the host, in the output's dtype."""
        if name in self.placed and output in grads:
            size = ex.values[output].blocks[0].itemsize
            grads[output] = {lay: self.trip(g, ("d2h",), size)
                             for lay, g in grads[output].items()}

    def runner(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        """`inner` (a micro-batch runner) with the parameters brought up from the host."""
        def run(ex, params, *args, **kwargs):
            self.fault = ex.faults.offload_fault
            ex.host = self
            if self.params:
                params = {n: self.trip(t) for n, t in params.items()}
            return inner(ex, params, *args, **kwargs)
        return run

    def note(self) -> str:
        what = [k for k, on in (("parameters", self.params), ("activations", bool(self.acts)),
                                ("host-placed operators", bool(self.placed))) if on]
        down, up = self.moved["d2h"], self.moved["h2d"]
        back = "came back" if down == up else f"{up:.0f} came up"
        return (f"offload ({', '.join(what)}): {down:.0f} bytes went to the host and {back} "
                f"(all ranks, micro-batches run); the run continued with the copies")
