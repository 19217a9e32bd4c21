"""One device's share of a planned graph, in the shared currency of `cost.specs`: the bridge
from the sharding algebra to the cost model, for every model type.

The forward and backward passes are the plan's own item lists (`ShardingPlan.forward_items`
/ `backward_items`, the steps `numeric.execute` runs), so what is timed is what is proven:

- each collective step becomes a CommSpec on the mesh axis it runs along (local slices and
  relabels are free);
- consecutive ops that share a `kernel` attr run as ONE kernel (a fused QKV GEMM, Megatron's
  scale-mask-softmax and bias-dropout-add); a collective between them splits the kernel. A
  kernel reads and writes only the tensors that cross its boundary (at the local shape of
  the layout it uses them in); its FLOPs are those of its members of the kernel's kind (a
  GEMM's bias epilogue is free); a family with its own `cost` (vocabulary-parallel
  cross-entropy, fused attention, embedding lookup) prices its share itself;
- backward: a GEMM kernel runs dgrad (m,k,n) and wgrad (k,n,m) GEMMs for the inputs that need
  a gradient (of its first and second input: the second is an activation in attention's
  scores and context GEMMs, so only a GEMM differentiating a parameter is `weight_grad`,
  what a zero-bubble schedule defers); other kernels cost twice the FLOPs and 1.5x the
  bytes of their forward (they read the output gradient and a saved input, and write the
  input gradient);
- activation memory: each op keeps what its backward reads (`OpFamily.saves`, inputs or
  output, plus `saved_extra`: a dropout mask, a log-sum-exp), each tensor once, at its local
  size in the layout it is KEPT in (so a sequence-parallel GEMM input counts its sequence
  shard: Megatron saves it sharded and re-gathers it in the backward); a fused kernel keeps
  only what enters it from outside and recomputes the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from simulator.cost.specs import CommSpec, ComputeSpec, Phase
from simulator.graph.ops.attention import window_keys
from simulator.graph.ops.einsum import gemm_mnk
from simulator.sharding.layout import Layout
from simulator.sharding.plan import Item, OpPlan, ShardingPlan

__all__ = ["forward_specs", "backward_specs", "gradient_steps", "param_gathers",
           "local_shapes", "saved", "Saved", "kernel_of", "loaded_bytes"]

Spec = ComputeSpec | CommSpec
Select = Callable[[str], bool]
_KIND_ORDER = ("gemm", "attention", "softmax", "norm", "gather", "reduction", "elementwise",
               "copy")


def local_shapes(plan: ShardingPlan, p: OpPlan) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    """Local input shapes and output shape of an op on one device."""
    g, mesh = plan.graph, plan.mesh
    ins = [p.sig.input_layout(i).local_shape(g.tensors[n].shape, mesh)
           for i, n in enumerate(p.op.inputs)]
    out = p.sig.output_layout.local_shape(g.tensors[p.op.output].shape, mesh)
    return ins, out


def kernel_of(p: OpPlan) -> str:
    return str(p.op.attrs.get("kernel", p.op.name))


@dataclass(frozen=True)
class _Kernel:
    """Consecutive ops run as one kernel."""

    name: str
    ops: tuple[OpPlan, ...]

    @property
    def kind(self) -> str:
        kinds = [p.op.family.kind for p in self.ops]
        return min(kinds, key=lambda k: _KIND_ORDER.index(k) if k in _KIND_ORDER else 99)


def _external(plan: ShardingPlan, k: _Kernel) -> float:
    """Elements of the tensors crossing the kernel's boundary, once each, at the local shape
    of the layout the member uses them in; members that price themselves are left out."""
    inside = {p.op.output for p in k.ops}
    members = {p.op.name for p in k.ops}
    seen: set[str] = set()
    total = 0.0
    for p in k.ops:
        if p.op.family.cost is not None:
            continue
        ins, out = local_shapes(plan, p)
        for name, shape in zip(p.op.inputs, ins):
            if name not in inside and name not in seen:
                seen.add(name)
                total += math.prod(shape)
        consumers = plan.graph.consumers(p.op.output)
        if not consumers or any(c.name not in members for c in consumers):
            total += math.prod(out)
    return total


def _gemm_shape(plan: ShardingPlan, k: _Kernel) -> tuple[int, tuple[int, int, int]] | None:
    """(batch, (m, n, k)) of a kernel's GEMMs fused side by side (same input: n adds up)."""
    shapes = [gemm_mnk(local_shapes(plan, p)[0], p.op.attrs) for p in k.ops
              if p.op.type == "Einsum"]
    if not shapes:
        return None
    batch, (m, _, kk) = shapes[0]
    if any((b, mm, k2) != (batch, m, kk) for b, (mm, _, k2) in shapes):
        return shapes[0]
    return batch, (m, sum(n for _, (_, n, _) in shapes), kk)


def _own(plan: ShardingPlan, k: _Kernel, e: float, phase: str) -> tuple[float, float, float]:
    """(FLOPs, bytes, executed fraction) of the members that price themselves."""
    flops = nbytes = 0.0
    frac = 1.0
    for p in k.ops:
        if p.op.family.cost is not None:
            ins, out = local_shapes(plan, p)
            f, b, frac = p.op.family.cost(ins, out, p.op.attrs, e, phase)
            flops, nbytes = flops + f, nbytes + b
    return flops, nbytes, frac


def _flops(plan: ShardingPlan, k: _Kernel) -> float:
    kind = k.kind
    total = 0.0
    for p in k.ops:
        if p.op.family.kind == kind and p.op.family.cost is None:
            ins, out = local_shapes(plan, p)
            total += p.op.family.flops(ins, out, p.op.attrs)
    return total


def _key_length(plan: ShardingPlan, k: _Kernel) -> tuple[int, int]:
    """A fused attention kernel's (local key length, window): the keys its query rows run
    over (the t of its k input [b, t, ...]) and the window W each row sees where shorter
    than t (0 otherwise: a window of t or more keys is plain causal attention); (0, 0) for
    other kernels."""
    for p in k.ops:
        if p.op.family.kind == "attention" and len(p.op.inputs) >= 2:
            ins, _ = local_shapes(plan, p)
            if len(ins[1]) >= 2:
                t = int(ins[1][1])
                w = window_keys(t, p.op.attrs)
                return t, (w if w < t else 0)
    return 0, 0


_SOFTMAX_ATTENTION = ("FusedAttention", "RingAttention")  # not the SSD scan's fused kernel


def _head_dim(plan: ShardingPlan, k: _Kernel) -> int:
    """A softmax attention kernel's head width (the last dim of its q input); 0 for
    others (a Mamba-2 scan is priced as a fused kernel too, with no softmax to amortise)."""
    for p in k.ops:
        if p.op.family.name in _SOFTMAX_ATTENTION and p.op.inputs:
            ins, _ = local_shapes(plan, p)
            return int(ins[0][-1]) if ins[0] else 0
    return 0


def _forward_spec(plan: ShardingPlan, k: _Kernel, dtype: str, e: float,
                  kept: dict[str, float] | None = None) -> ComputeSpec:
    """The kernel's forward; `kept`: activation bytes each op keeps (Saved.by_op)."""
    own_f, own_b, frac = _own(plan, k, e, "fwd")
    shape = _gemm_shape(plan, k) if k.kind == "gemm" else None
    kind = k.kind if k.kind != "gemm" or shape else "elementwise"
    batch, mnk = shape if shape else (1, None)
    keep = sum((kept or {}).get(p.op.name, 0.0) for p in k.ops)
    keys, window = _key_length(plan, k) if kind == "attention" else (0, 0)
    return ComputeSpec(k.name, kind, _flops(plan, k) + own_f,  # type: ignore[arg-type]
                       e * _external(plan, k) + own_b, dtype, "fwd", mnk, batch,
                       saved_bytes=keep, executed_fraction=frac,
                       seq=keys, window=window,
                       head_dim=_head_dim(plan, k) if kind == "attention" else 0)


def _needs_grad(plan: ShardingPlan, name: str) -> bool:
    return plan.graph.tensors[name].kind not in ("input", "label")


def _backward_specs(plan: ShardingPlan, k: _Kernel, dtype: str, e: float) -> list[ComputeSpec]:
    fwd = _forward_spec(plan, k, dtype, e)
    if fwd.kind == "gemm" and fwd.gemm_mnk is not None:
        m, n, kk = fwd.gemm_mnk
        first = next(p for p in k.ops if p.op.type == "Einsum")
        shapes = {".dgrad": (m, kk, n), ".wgrad": (kk, n, m)}
        operand = dict(zip(shapes, first.op.inputs[:2]))  # the input each one differentiates
        b = fwd.gemm_batch
        return [ComputeSpec(k.name + sfx, "gemm", 2.0 * b * mm * nn * k2,
                            e * b * (mm * k2 + k2 * nn + mm * nn), dtype, "bwd", (mm, nn, k2), b,
                            weight_grad=plan.graph.tensors[operand[sfx]].kind == "parameter")
                for sfx, (mm, nn, k2) in shapes.items() if _needs_grad(plan, operand[sfx])]
    own_f, own_b, frac = _own(plan, k, e, "bwd")
    return [ComputeSpec(k.name + ".bwd", fwd.kind, 2.0 * _flops(plan, k) + own_f,
                        1.5 * e * _external(plan, k) + own_b, dtype, "bwd",
                        executed_fraction=frac, seq=fwd.seq, head_dim=fwd.head_dim,
                        window=fwd.window)]


def _comm(plan: ShardingPlan, name: str, step, phase: Phase) -> CommSpec:
    return CommSpec(f"{name}.{step.kind}", step.kind, step.bytes, plan.mesh.names[step.axis],
                    phase)


def _select_all(name: str) -> bool:
    return True


def _kernels(plan: ShardingPlan, items: list[Item], select: Select,
             ) -> list[_Kernel | tuple[str, object]]:
    """Items grouped: kernels of consecutive same-kernel ops, collectives between them."""
    ops = {p.op.name: p for p in plan.ops}
    out: list[_Kernel | tuple[str, object]] = []
    for name, step in items:
        if not select(name):
            continue
        if step is not None:
            if step.is_comm:
                out.append((name, step))
            continue
        p = ops[name]
        last = out[-1] if out else None
        if isinstance(last, _Kernel) and last.name == kernel_of(p):
            out[-1] = _Kernel(last.name, last.ops + (p,))
        else:
            out.append(_Kernel(kernel_of(p), (p,)))
    return out


def forward_specs(plan: ShardingPlan, dtype: str, select: Select = _select_all,
                  itemsize: float | None = None, kept: Saved | None = None
                  ) -> tuple[Spec, ...]:
    """The forward pass of the selected ops, in execution order (kernels and collectives).
    `itemsize`: bytes per element of the model dtype (default: the plan's); `kept`: the
    plan's `saved` (computed when not given)."""
    e = float(itemsize or plan.itemsize)
    by_op = (kept or saved(plan, e)).by_op()
    out: list[Spec] = []
    for k in _kernels(plan, plan.forward_items(), select):
        if isinstance(k, _Kernel):
            out.append(_forward_spec(plan, k, dtype, e, by_op))
        else:
            out.append(_comm(plan, k[0], k[1], "fwd"))
    return tuple(out)


def backward_specs(plan: ShardingPlan, dtype: str, select: Select = _select_all,
                   itemsize: float | None = None) -> tuple[Spec, ...]:
    """The backward pass of the selected ops, as `numeric.execute` runs it: per op in
    reverse, the moves of its output gradient, then its VJP kernel (a fused kernel's backward
    runs once, where its last member's VJP runs). Parameter-gradient moves are not here."""
    e = float(itemsize or plan.itemsize)
    ops = {p.op.name for p in plan.ops}
    items = [(n, s) for n, s in plan.backward_items() if n in ops]
    out: list[Spec] = []
    for k in _kernels(plan, items, select):
        if isinstance(k, _Kernel):
            out += _backward_specs(plan, _Kernel(k.name, tuple(reversed(k.ops))), dtype, e)
        else:
            out.append(_comm(plan, k[0], k[1], "bwd"))
    return tuple(out)


def gradient_steps(plan: ShardingPlan, skip_axes: tuple[str, ...] = ()
                   ) -> tuple[CommSpec, ...]:
    """Collectives that bring each parameter's accumulated gradient to the parameter's
    layout (after the backward, once per iteration), except along `skip_axes` (reduced
    elsewhere: bucketed data parallel). Parameter contributions in several layouts are
    first brought to one (`backward_items`)."""
    out: list[CommSpec] = []
    params = {t.name for t in plan.graph.of_kind("parameter")}
    for name, step in plan.backward_items():
        if name in params and step is not None and step.is_comm:
            out.append(_comm(plan, name, step, "bwd"))
    for t in plan.graph.of_kind("parameter"):
        src = plan.grad_layout(t.name)
        if src is None:
            continue
        kept = list(plan.layouts[t.name].placements)
        for axis in skip_axes:  # left as they are: reduced elsewhere, on the whole buffer
            if axis in plan.mesh.names:
                a = plan.mesh.axis_index(axis)
                kept[a] = src.placements[a]
        for step in plan.move(t.name, src, Layout(tuple(kept)), keep=skip_axes):
            if step.is_comm and plan.mesh.names[step.axis] not in skip_axes:
                out.append(_comm(plan, f"{t.name}.grad", step, "bwd"))
    return tuple(c for c in out if c.axis not in skip_axes)


def param_gathers(plan: ShardingPlan, select: Select) -> tuple[CommSpec, ...]:
    """The all-gathers a backward runs again for the parameters kept split on an axis
    (`TensorDef.gathered`: the forward's gathered copies are not kept, as ZeRO-3 does,
    Rajbhandari et al. 2020 Sec. 5.3): each from its kept layout to the layout an op
    reads it in, once per parameter and layout in the backward pass (ops in reverse, as
    `numeric.execute` runs them), charged to the selected ops that run them."""
    out: list[CommSpec] = []
    seen: set[tuple[str, Layout]] = set()
    for p in reversed(plan.ops):
        for i, name in enumerate(p.op.inputs):
            key = (name, p.sig.input_layout(i))
            if not plan.graph.tensors[name].gathered or key in seen:
                continue
            seen.add(key)
            if select(p.op.name):
                out += [_comm(plan, f"{name}.gather", s, "bwd")
                        for s in plan.input_steps(p, i) if s.is_comm]
    return tuple(out)


def _same_kernel(a: OpPlan, b: OpPlan) -> bool:
    """Both ops in one fused kernel (same kernel name within the same block, e.g. layer)."""
    return (kernel_of(a) == kernel_of(b) and "kernel" in a.op.attrs
            and a.op.name.rsplit(".", 1)[0] == b.op.name.rsplit(".", 1)[0])


@dataclass(frozen=True)
class Saved:
    """Activation bytes one device keeps for the backward: per tensor (name -> (bytes,
    producing op, ops that keep it)), and per op its extra bytes (masks, statistics)."""

    tensors: dict[str, tuple[float, str, tuple[str, ...]]]
    extra: dict[str, float]

    def total(self, select: Select = _select_all, recomputed: Select | None = None) -> float:
        """Bytes kept by the selected ops; with `recomputed`, tensors produced by recomputed
        ops and kept by recomputed ops alone are not stored (they are made again)."""
        out = 0.0
        for nbytes, producer, keepers in self.tensors.values():
            mine = [k for k in keepers if select(k)]
            if not mine:
                continue
            if recomputed and recomputed(producer) and all(recomputed(k) for k in mine):
                continue
            out += nbytes
        out += sum(b for op, b in self.extra.items()
                   if select(op) and not (recomputed and recomputed(op)))
        return out


    def by_op(self) -> dict[str, float]:
        """Bytes per op: each tensor charged to the first op that keeps it, plus extras."""
        out = dict(self.extra)
        for nbytes, _, keepers in self.tensors.values():
            out[keepers[0]] = out.get(keepers[0], 0.0) + nbytes
        return out


def saved(plan: ShardingPlan, itemsize: float | None = None) -> Saved:
    """What each op keeps for its backward (see the module docstring)."""
    e = float(itemsize or plan.itemsize)
    g, mesh = plan.graph, plan.mesh
    producer = {p.op.output: p for p in plan.ops}
    tensors: dict[str, tuple[float, str, tuple[str, ...]]] = {}
    extra: dict[str, float] = {}
    for p in plan.ops:
        fam = p.op.family
        idx = fam.saves if fam.saves is not None else tuple(range(len(p.op.inputs)))
        for i in idx:
            name = p.op.output if i == -1 else p.op.inputs[i]
            src = producer.get(name)
            if g.tensors[name].kind != "activation" or src is None:
                continue
            if i != -1 and _same_kernel(src, p):
                continue  # made inside the same fused kernel: recomputed there
            nbytes = e * math.prod(plan.layouts[name].local_shape(g.tensors[name].shape, mesh))
            _, prod, keepers = tensors.get(name, (nbytes, src.op.name, ()))
            tensors[name] = (nbytes, prod, keepers + (p.op.name,))
        if fam.saved_extra is not None:
            ins, out = local_shapes(plan, p)
            extra[p.op.name] = float(fam.saved_extra(ins, out))
    return Saved(tensors, extra)


def loaded_bytes(plan: ShardingPlan, itemsize: float | None = None) -> float:
    """Bytes of the inputs and labels one device loads per micro-batch, at the local size
    of the layout the dataset loads them in (`notation.dataset_layout`; without a dataset
    strategy, the layout their first operator reads): the batch held on the device."""
    e = float(itemsize or plan.itemsize)
    g = plan.graph
    return sum(e * math.prod(plan.layouts[t.name].local_shape(t.shape, plan.mesh))
               for t in g.tensors.values() if t.kind in ("input", "label")
               and t.name in plan.layouts)
