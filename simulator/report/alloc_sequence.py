"""The allocations and frees of a simulated iteration, tensor by tensor, in the order a
PyTorch FSDP2 (`fully_shard`) step issues them, built from the program the simulator times
(`program.program.Program`) and its device's model states (`Plan.static_memory`); replayed
through the caching allocator (`report.allocator_replay`) it gives `max_memory_reserved`.

Which tensors, from which source (pytorch/pytorch torch/distributed/fsdp/_fully_shard/
_fsdp_param_group.py @002a76f and _fsdp_collectives.py @010ae4a; torch/optim/adam.py
@dc80ccd):

- Model states, laid out as FSDP2 keeps them (`lower.state`, `sharding.state_layout:
  fsdp2`, the states `allocated_peak_bytes` counts too), split over each block's parameter
  tensors (a GEMM's weight is n x k of its `gemm_mnk`; the rest of the block's parameters
  one tensor): the fp32 shards ("parameters", no bf16 copy) and any resident category
  before the first forward; the Adam moments (exp_avg, exp_avg_sq: `optimizer_states`, 8 B
  per sharded parameter) made by the first `step()` (`_init_group`), after the first
  backward.
- Gather of a group (`unshard`, `foreach_all_gather` on the copy-in stream; nothing with
  one rank): the bf16 copy-in input (the shard) and the output (the parameters, whole),
  the input freed; `wait_for_unshard`: the unsharded parameters, one tensor each, on the
  default stream; in the forward the previous output freed then, in the backward this
  one. The root group (the pinned blocks: embedding, final norm, head) is gathered
  first and kept until the backward ends; the other blocks are resharded after their
  forward and their backward.
- Forward: each op's kept tensor (`ComputeSpec.saved_bytes` of the ops the block does
  not run again, fitted to its `saved_bytes`), until the block's backward; the loss
  block's logits (its last GEMM's output) and their fp32 copy while the loss runs; a loss
  under torch.compile (`training.compiled_loss`) keeps the logits themselves as its saved
  tensor (its kept set, alive to its backward) and makes no fp32 copy.
- Backward, blocks in reverse, the next block's gather prefetched (FSDP2's backward
  prefetch of one): the re-run's tensors (`working_bytes`) and the loss's buffers
  (`transient_bytes`) while it runs; each weight's bf16 gradient as its op's backward
  runs, the op's tensors freed; `post_backward`: reshard, the previous reduce-scatter
  input freed, the fp32 reduce-scatter input (the block's parameters, whole) on the
  default stream, the bf16 gradients freed, the reduce-scatter output (the sharded fp32
  gradient, kept as `.grad`) on the reduce-scatter stream.
- Optimizer (`_multi_tensor_adam`, foreach): `exp_avg_sq_sqrt = torch._foreach_sqrt(
  device_exp_avg_sqs)` is the one full-size intermediate (4 B per sharded parameter, one
  tensor each), freed after `_foreach_addcdiv_`; zero_grad(set_to_none) frees the
  gradients.

- The last block kept unsharded from its forward to its backward where the stack does so
  (torchtitan: parallelize_llama.py @9dec370 apply_fsdp, `reshard_after_forward =
  int(layer_id) < len(model.layers) - 1`; `sharding.keep_last_block_unsharded`).

Not in the program, so not in the sequence: each op's transient outputs and the activation
gradients between ops (the loss's buffers excepted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.scenario.schema import DTYPE_BYTES
from simulator.report.allocator_replay import CachingAllocator, replay

__all__ = ["Event", "fsdp2_sequence", "SEQUENCES", "ITERATIONS", "replay_result"]

Event = tuple[str, str, float, str]  # ("alloc" | "free", tensor key, bytes, stream)
DEFAULT, GATHER, REDUCE = "default", "all_gather", "reduce_scatter"


@dataclass(frozen=True)
class _Unit:
    """One copy of a block as FSDP2 wraps it: per op in forward order, the elements of
    the weight it reads (0: none), the bytes it keeps for the backward and the bytes its
    re-run makes again (a recomputed block); the block's other parameters and bytes as a
    last entry."""

    name: str
    ops: tuple[tuple[float, float, float], ...]
    block: Any
    logits: float = 0.0  # the loss block: elements of its last GEMM's output

    @property
    def tensors(self) -> tuple[float, ...]:
        return tuple(w for w, _, _ in self.ops if w > 0)


def _fit(sizes: list[float], total: float) -> list[float]:
    """`sizes` and one more tensor making up `total`; scaled down when they exceed it."""
    have = sum(sizes)
    if have > total:
        return [x * total / have for x in sizes] + [0.0]
    return sizes + [total - have]


def _unit(name: str, block: Any) -> _Unit:
    """The kept set: the saved tensors of the ops the block does not run again (a
    recomputed block keeps its inputs only), fitted to the block's `saved_bytes`; the
    re-run's: the saved tensors of the ops it runs again, fitted to `working_bytes`."""
    rerun = {op.name for op in block.recompute}
    weights, kept, again = [], [], []
    for op in block.fwd:
        mnk = getattr(op, "gemm_mnk", None)
        weights.append(float(mnk[1] * mnk[2]) if mnk and getattr(op, "kind", "") == "gemm"
                       else 0.0)
        saved = float(getattr(op, "saved_bytes", 0.0))
        kept.append(0.0 if op.name in rerun else saved)
        again.append(saved if op.name in rerun else 0.0)
    if sum(weights) > block.params:  # GEMMs without weights (attention products)
        weights = [0.0] * len(weights)
    weights.append(max(block.params - sum(weights), 0.0))
    ops = zip(weights, _fit(kept, block.saved_bytes), _fit(again, block.working_bytes))
    gemms = [op.gemm_mnk for op in block.fwd if getattr(op, "gemm_mnk", None)]
    logits = float(gemms[-1][0] * gemms[-1][1]) if gemms and block.transient_bytes > 0 \
        else 0.0
    return _Unit(name, tuple(o for o in ops if any(x > 0 for x in o)), block, logits)


def _pieces(total: float, unit: float) -> list[float]:
    """The loss's backward buffers (`transient_bytes`) as tensors the size of the block's
    largest kept tensor (the fp32 log-probabilities: NllLossBackward0's grad_input and
    LogSoftmaxBackward0's output are each one such tensor, framework `cross_entropy.
    backward_transient_source`)."""
    if total <= 0:
        return []
    n = max(1, round(total / unit)) if unit > 0 else 1
    return [total / n] * n


def _units(program: Any) -> list[_Unit]:
    blocks = program.stage(0, len(program.sequence()), True, True)
    return [_unit(f"{b.name}{i}", b) for i, b in enumerate(blocks)]


class _Seq:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.live: dict[str, None] = {}  # insertion order: a deterministic sequence

    def alloc(self, key: str, nbytes: float, stream: str = DEFAULT) -> None:
        if nbytes > 0:
            assert key not in self.live, key
            self.live[key] = None
            self.events.append(("alloc", key, nbytes, stream))

    def free(self, key: str) -> None:
        if key in self.live:
            del self.live[key]
            self.events.append(("free", key, 0.0, ""))


def fsdp2_sequence(program: Any, static: dict[str, float], iterations: int = 2,
                   micro_batches: int = 1, fp32_logits: bool = False,
                   shard: float = 1.0, keep_last: bool = False,
                   kept_logits: bool = False) -> list[Event]:
    """The events of `iterations` FSDP2 steps of `micro_batches` micro-batches each
    (module docstring). `static`: the device's model states by category (bytes), laid out
    as FSDP2 does (`lower.state`, `state_layout: fsdp2`: "parameters" the fp32 shards,
    "optimizer_states" the moments, no sharded gradient); `fp32_logits`: the loss casts
    the logits to fp32 (`cross_entropy.logits_dtype`); `shard`: 1 / the FSDP degree;
    `keep_last`: the last block is not resharded after its forward (torchtitan's
    `reshard_after_forward` false for it, `sharding.keep_last_block_unsharded`);
    `kept_logits`: the loss keeps the logits themselves for its backward (a compiled loss,
    `training.compiled_loss`), so its kept tensor is the logits, not another one."""
    units = _units(program)
    elems = sum(sum(u.tensors) for u in units)
    if elems <= 0:
        return []
    # the fp32 shards and any resident category before the first forward, one tensor per
    # parameter; the moments (optimizer_states) by the first step
    per_elem = {c: v / elems for c, v in static.items()
                if c not in ("optimizer_states", "framework_overhead") and v > 0}
    s = _Seq()
    for cat, b in per_elem.items():
        for u in units:
            for j, n in enumerate(u.tensors):
                s.alloc(f"{cat}:{u.name}.{j}", n * b)
    e = _param_bytes(program)
    for it in range(iterations):
        for mb in range(micro_batches):
            _forward(s, units, e, shard, fp32_logits, keep_last, kept_logits)
            _backward(s, units, e, shard, program.grad_bytes, mb > 0, keep_last)
        if it == 0:
            moments = static.get("optimizer_states", 0.0) / elems
            for u in units:
                for j, n in enumerate(u.tensors):
                    s.alloc(f"moments:{u.name}.{j}", n * moments)
        _optimizer(s, units, shard)
    return s.events


def _param_bytes(program: Any) -> float:
    """Bytes of one gathered parameter element: the compute dtype's (MixedPrecisionPolicy
    param_dtype; an FP8 run gathers bf16: float8 all-gather is not modelled)."""
    return float(DTYPE_BYTES.get(program.dtype, 2)) if program.dtype != "fp8" else 2.0


def _all_gather(s: _Seq, group: list[_Unit], e: float, shard: float, tag: str) -> None:
    """`unshard` (`foreach_all_gather` on the copy-in stream): the bf16 copy-in input (the
    shard) and the output (the group's parameters, whole); the input freed. With one rank
    FSDP2 gathers nothing (`unshard`: world_size == 1 returns an empty result)."""
    if shard >= 1.0:
        return
    whole = sum(sum(u.tensors) for u in group) * e
    s.alloc(f"ag_in:{tag}", whole * shard, GATHER)
    s.alloc(f"ag_out:{tag}", whole, GATHER)
    s.free(f"ag_in:{tag}")


def _copy_out(s: _Seq, group: list[_Unit], e: float) -> None:
    """`wait_for_unshard`: the unsharded parameters, one tensor each, on the default
    stream (`alloc_all_gather_outputs`)."""
    for u in group:
        for j, n in enumerate(u.tensors):
            s.alloc(f"unsharded:{u.name}.{j}", n * e)


def _reshard(s: _Seq, group: list[_Unit]) -> None:
    for u in group:
        for j in range(len(u.tensors)):
            s.free(f"unsharded:{u.name}.{j}")


def _loss_forward(s: _Seq, u: _Unit, e: float, fp32_logits: bool) -> None:
    """The loss block's forward: the logits (its last GEMM's output, compute dtype) and,
    where the loss casts them (`fp32_logits`), their fp32 copy, alive while the loss op
    makes its kept set; the copy freed then (log-softmax keeps its output, not its input),
    the logits freed before the backward (torchtitan train.py @9dec370 lines 303-308:
    `loss = loss_fn(pred, labels); del pred; loss.backward()`)."""
    s.alloc("logits", u.logits * e)
    for k, (_, kept, _) in enumerate(u.ops):
        if kept == max(x for _, x, _ in u.ops) and fp32_logits:
            s.alloc("logits_fp32", u.logits * 4.0)
        s.alloc(f"saved:{u.name}.{k}", kept)
        s.free("logits_fp32")
    s.free("logits")


def _forward(s: _Seq, units: list[_Unit], e: float, shard: float, fp32_logits: bool,
             keep_last: bool = False, kept_logits: bool = False) -> None:
    """The root group (the pinned blocks: embedding, final norm, head) is gathered first
    and kept until the backward ends (the root is not resharded after forward); each other
    block is gathered before its forward and resharded after it, but the last one where
    `keep_last`. In the forward the previous all-gather output is freed when the next is
    waited on (`wait_for_unshard`: implicit prefetch keeps `all_gather_state`)."""
    last = [u for u in units if not u.block.pinned][-1:] if keep_last else []
    prev = "root"
    for u in [None] + units:
        group = [v for v in units if v.block.pinned] if u is None else [u]
        if u is None or not u.block.pinned:
            tag = "root" if u is None else u.name
            _all_gather(s, group, e, shard, tag)
            if tag != prev:
                s.free(f"ag_out:{prev}")
            _copy_out(s, group, e)
            prev = tag
        if u is None:
            continue
        if u.logits > 0 and not kept_logits:
            _loss_forward(s, u, e, fp32_logits)
        else:
            for k, (_, kept, _) in enumerate(u.ops):
                s.alloc(f"saved:{u.name}.{k}", kept)
        if not u.block.pinned and u not in last:
            _reshard(s, [u])
    s.free(f"ag_out:{prev}")


def _post_backward(s: _Seq, group: list[_Unit], grad_bytes: float, shard: float, tag: str,
                   accumulate: bool) -> None:
    """`post_backward`: reshard, the previous reduce-scatter input freed
    (`reduce_scatter_state = None`), then `foreach_reduce`: the fp32 reduce-scatter input
    on the default stream, the bf16 gradients freed, the output (the sharded gradient) on
    the reduce-scatter stream; the input kept as the next `reduce_scatter_state`."""
    _reshard(s, group)
    for key in [k for k in s.live if k.startswith("rs_in:")]:
        s.free(key)
    whole = sum(sum(u.tensors) for u in group)
    s.alloc(f"rs_in:{tag}", whole * grad_bytes)
    for u in group:
        for k in range(len(u.ops)):
            s.free(f"grad16:{u.name}.{k}")
    s.alloc(f"grad:{tag}" + (".acc" if accumulate else ""), whole * grad_bytes * shard,
            REDUCE)
    s.free(f"grad:{tag}.acc")


def _block_backward(s: _Seq, u: _Unit, e: float) -> None:
    """A block's re-run (its `working_bytes`), the loss buffers, then per op in reverse
    its weight's bf16 gradient made and its kept and re-run tensors freed."""
    for k, (_, _, again) in enumerate(u.ops):
        s.alloc(f"work:{u.name}.{k}", again)
    pieces = _pieces(u.block.transient_bytes, max(kept for _, kept, _ in u.ops))
    for j, nbytes in enumerate(pieces):
        s.alloc(f"loss:{u.name}.{j}", nbytes)
    for k in reversed(range(len(u.ops))):
        s.alloc(f"grad16:{u.name}.{k}", u.ops[k][0] * e)
        s.free(f"saved:{u.name}.{k}")
        s.free(f"work:{u.name}.{k}")
    for j in range(len(pieces)):
        s.free(f"loss:{u.name}.{j}")


def _backward(s: _Seq, units: list[_Unit], e: float, shard: float, grad_bytes: float,
              accumulate: bool, keep_last: bool = False) -> None:
    """Blocks in reverse; `pre_backward` waits for the block's gather (freeing its
    output after the copy-out; nothing for the last block where the forward kept it,
    `keep_last`: `unshard` returns when the group is unsharded) and prefetches the next
    block's (FSDP2's backward prefetch of one); the root reduces after the last block, at
    the end of the backward."""
    layers = [u for u in reversed(units) if not u.block.pinned]
    for u in reversed(units):
        if not u.block.pinned:
            i = layers.index(u)
            if i == 0 and not keep_last:
                _all_gather(s, [u], e, shard, u.name)
            if i > 0 or not keep_last:
                _copy_out(s, [u], e)
            s.free(f"ag_out:{u.name}")
            if i + 1 < len(layers):
                _all_gather(s, [layers[i + 1]], e, shard, layers[i + 1].name)
        _block_backward(s, u, e)
        if not u.block.pinned:
            _post_backward(s, [u], grad_bytes, shard, u.name, accumulate)
    _post_backward(s, [u for u in units if u.block.pinned], grad_bytes, shard, "root",
                   accumulate)
    for key in [k for k in s.live if k.startswith("rs_in:")]:
        s.free(key)


def _optimizer(s: _Seq, units: list[_Unit], shard: float) -> None:
    for u in units:
        for j, n in enumerate(u.tensors):
            s.alloc(f"sqrt:{u.name}.{j}", n * 4.0 * shard)
    for u in units:
        for j in range(len(u.tensors)):
            s.free(f"sqrt:{u.name}.{j}")
    for key in [k for k in s.live if k.startswith("grad:")]:
        s.free(key)


SEQUENCES = {"fsdp2": fsdp2_sequence}
# steps replayed: the first makes the optimizer's moments, the second runs with them (the
# reserve persists from step to step: nothing is released unless an allocation fails)
ITERATIONS = 2
# micro-batches replayed per step: from the second on, each finds the pools as the one
# before left them (all its tensors are freed, its gradients accumulate into the first's),
# so more repeat the same reserve (checked on the 8B and 70B torchtitan bases and a one-rank
# H200 case: 3 to 8 micro-batches reserve what 2 do)
MICRO_BATCHES = 2


def replay_result(result: Any, expandable: bool | None = None,
                  keep_last: bool | None = None) -> CachingAllocator | None:
    """The caching allocator after replaying `ITERATIONS` steps of the peak device of a
    SimResult, or None where no sequence is modelled: a stack without PyTorch's allocator
    or without `memory_overheads.allocation_sequence`, a run that does not shard its
    parameters (`optimizer_shard` 3) or is cut into pipeline stages. `expandable`: the
    allocator's mode (None: the stack's `caching_allocator`); `keep_last`: whether the last
    block stays unsharded after its forward (None: the stack's
    `sharding.keep_last_block_unsharded`)."""
    fw = getattr(result, "framework", None)
    if fw is None:
        return None
    mem = fw.memory_overheads
    if mem.caching_allocator is None or mem.allocation_sequence is None:
        return None
    par = result.scenario.parallel
    if par.optimizer_shard != 3 or par.pipeline != 1 or \
            getattr(result.program, "state_layout", "zero") != "fsdp2":
        return None
    if expandable is None:
        expandable = mem.caching_allocator == "pytorch_expandable"
    index = result.plan.devices.index(result.memory.device)
    static = dict(result.plan.static_memory[index])
    # a loss under torch.compile (training.compiled_loss) keeps the logits themselves as
    # its saved tensor and makes no fp32 copy (program.model_program)
    compiled = result.scenario.training.compiled_loss
    fp32_logits = str(fw.cross_entropy.logits_dtype or "").startswith("fp32") and \
        not compiled
    events = SEQUENCES[mem.allocation_sequence](
        result.program, static, ITERATIONS,
        min(result.scenario.grad_accum_steps, MICRO_BATCHES), fp32_logits,
        1.0 / (par.data * par.context),
        fw.sharding.keep_last_block_unsharded if keep_last is None else keep_last,
        compiled)
    capacity = result.capacity_bytes - static.get("framework_overhead", 0.0)
    return replay(events, capacity, expandable)
