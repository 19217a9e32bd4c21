"""Cross-field rules of a scenario (docs/contract.md section 2), each with a message that says how
to fix it. A rule returns (dotted key, message) pairs; `check_rules` raises the first. What
differs between model types is the answer of the model's schema class
(`schema_models.ModelConfig`: its capabilities, and its own rules in `transformer_rules`,
`graph_rules`, `pipeline_rules`), never a test of its type.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator

from simulator.config.scenario.a2a_rules import moe_a2a
from simulator.config.scenario.axis_rules import context, parameter_server, tensor_nd
from simulator.config.scenario.comm_rules import comm_subgraph, recompute_comm
from simulator.config.scenario.cuda_graph_rules import cuda_graphs
from simulator.config.scenario.dataset import dataset_problems
from simulator.config.scenario.mode_rules import parallel_modes
from simulator.config.scenario.recompute_rules import (
    expert_dispatcher,
    fp8_saved_activations,
    recompute_modules,
    slice_activation,
)
from simulator.config.scenario.rule_helpers import Problem, divisors, fused_collectives
from simulator.config.scenario.schedule_rules import schedule
from simulator.config.scenario.schema import CommFusionSpec, ParallelSpec, Scenario
from simulator.errors import InputError

__all__ = ["check_rules", "divisors", "cluster_problems"]

def _devices(s: Scenario) -> Iterator[Problem]:
    p, c = s.parallel, s.cluster
    if s.model.writes_ops:  # its own mesh
        return
    if p.devices != c.devices:
        yield "parallel", (
            f"{_product(p)} = {p.devices} must equal "
            f"cluster.nodes*cluster.devices_per_node = {c.nodes}*{c.devices_per_node} = "
            f"{c.devices}"
        )


def _product(p: ParallelSpec) -> str:
    """'data*tensor*pipeline = 2*4*1', with `*context` when the sequence is split."""
    if p.context == 1:
        return f"data*tensor*pipeline = {p.data}*{p.tensor}*{p.pipeline}"
    return f"data*tensor*pipeline*context = {p.data}*{p.tensor}*{p.pipeline}*{p.context}"


_HETERO_MAX_DEVICES = 1_000_000  # per-device speeds are arrays of this length at most


def cluster_problems(s: Scenario) -> Iterator[Problem]:
    """node_types cover the nodes exactly; slow entries name devices and nodes that exist."""
    c = s.cluster
    if c.node_types is not None and sum(t.nodes for t in c.node_types) != c.nodes:
        counts = "+".join(str(t.nodes) for t in c.node_types)
        yield "cluster.node_types", (f"nodes add up to {counts} = "
                                     f"{sum(t.nodes for t in c.node_types)}; expected "
                                     f"cluster.nodes = {c.nodes}")
    for i, slow in enumerate(c.slow):
        where = f"cluster.slow[{i}]"
        if not slow.devices and not slow.nodes:
            yield where, "names no device; give devices: [ranks] or nodes: [indices]"
        for key, ids, n in (("devices", slow.devices, c.devices), ("nodes", slow.nodes, c.nodes)):
            bad = [x for x in ids if x >= n]
            if bad:
                yield f"{where}.{key}", f"{bad[0]} is out of range (allowed: 0..{n - 1})"
    if not c.uniform and c.devices > _HETERO_MAX_DEVICES:
        yield "cluster", (f"{c.devices} devices with node_types, slow or jitter; at most "
                          f"{_HETERO_MAX_DEVICES} are simulated with per-device speeds")


def _batch(s: Scenario) -> Iterator[Problem]:
    t, p = s.training, s.parallel
    per_step = t.micro_batch_size * p.data
    if s.model.writes_ops:  # its batch is its input tensors'
        return
    if t.global_batch_size % per_step:
        yield "training.global_batch_size", (
            f"{t.global_batch_size} must be a multiple of training.micro_batch_size*"
            f"parallel.data = {t.micro_batch_size}*{p.data} = {per_step} "
            f"(gradient-accumulation steps must be whole)"
        )
    if t.fp8_params and s.model.dtype != "fp8":
        yield "training.fp8_params", (
            "true stores the weights of the FP8 GEMMs in FP8; it needs model.dtype: fp8 "
            f"(found {s.model.dtype})")
    if t.fp8_scaling != "tensor" and s.model.dtype != "fp8":
        yield "training.fp8_scaling", (
            f"{t.fp8_scaling} scales the operands of FP8 GEMMs; it needs model.dtype fp8 "
            f"(found {s.model.dtype})")
    if t.fp4_recipe != "none" and s.model.dtype != "bf16":
        yield "training.fp4_recipe", (
            f"{t.fp4_recipe} runs the recipe's GEMMs in FP4 on a bf16 model; it needs "
            f"model.dtype: bf16 (found {s.model.dtype})")


def _model(s: Scenario) -> Iterator[Problem]:
    """The rules the model's type answers for itself (`schema_models.ModelConfig.problems`)."""
    return s.model.problems(s)


def _one_block_overlap(s: Scenario) -> Iterator[Problem]:
    """A one-block model's gradients are all ready when its single backward ends: the
    data-parallel reduction cannot overlap it either way (a pipeline's stages are cut into
    units, whose gradients the reduction can follow)."""
    if not s.model.one_block:
        return
    if s.parallel.comm_fusion.mode == "index" and s.parallel.pipeline > 1:
        yield "parallel.comm_fusion.mode", (
            f"index: fusion groups by layer index are simulated for transformers; a model "
            f"of type '{s.model.type}' fuses its stages' gradients by size (allowed: size, "
            f"auto, none)")
    elif s.parallel.comm_fusion.mode == "index":
        yield "parallel.comm_fusion.mode", (
            f"index fuses each block's gradients into one bucket; a model of type "
            f"'{s.model.type}' is one block, so that is one bucket of its whole gradient "
            f"(allowed: size, auto, none)")
    # a pipeline cuts the model into units whose gradients are ready one after another
    if s.parallel.overlap.grad_reduce or s.parallel.pipeline > 1:
        return
    yield "parallel.overlap.grad_reduce", (
        f"false: a model of type '{s.model.type}' is one block, whose gradients are ready "
        f"only when its whole backward ends, so the reduction runs after it either way "
        f"(allowed: true)")


def _selective_recompute(s: Scenario) -> Iterator[Problem]:
    """An operator graph recomputes unit by unit (`full`, `schedule.graph_recompute`);
    `selective` recomputes a transformer layer's attention core (Korthikanti et al. 2022,
    Sec. 5), which other models do not have: refused rather than ignored."""
    if s.model.attention_core or s.parallel.recompute != "selective":
        return
    yield "parallel.recompute", (
        f"selective recomputes a transformer layer's attention core; a model of type "
        f"'{s.model.type}' has none (allowed: none, full; or attrs.recompute: true on the "
        f"operators of a type graph model)")


def _model_knobs(s: Scenario) -> Iterator[Problem]:
    """Keys that only some models' programs use: refused on the others (the graph search on
    a transformer, whose plan is Megatron's; a transformer's sequence-parallel regions and
    tensor-parallel overlap on other models), never ignored."""
    p, m = s.parallel, s.model
    if not m.searched and p.mode == "auto":
        yield "parallel.mode", ("auto searches the strategies of an operator graph (mlp, "
                                "resnet, graph); a transformer runs Megatron's plan with "
                                "parallel.tensor (allowed: semi_auto, parameter_server)")
    if not m.sequence_regions and p.sequence_parallel:
        yield "parallel.sequence_parallel", (
            f"true splits a transformer's norm and dropout regions along the sequence; a "
            f"model of type '{m.type}' has none (allowed: false)")
    if not m.tp_comm_overlap and p.overlap.tp_comm != "auto":
        yield "parallel.overlap.tp_comm", (
            f"{str(p.overlap.tp_comm).lower()}: not simulated yet for a model of type "
            f"'{m.type}' (chunked tensor-parallel overlap is modelled on the transformer's "
            f"GEMMs; allowed: auto)")


def _copies(s: Scenario) -> Iterator[Problem]:
    """Multi-copy parallel splits a micro-batch into `copies` slices along the batch."""
    c = s.parallel.overlap.copies
    if c > 1 and not s.model.writes_ops and s.training.micro_batch_size % c:
        yield "parallel.overlap.copies", (
            f"{c} must divide training.micro_batch_size={s.training.micro_batch_size} (the "
            f"copies are slices of the micro-batch; valid: "
            f"{divisors(s.training.micro_batch_size)})")


def _comm_fusion(s: Scenario) -> Iterator[Problem]:
    """Fusion index lists (MindSpore's `all_reduce_fusion_config`): increasing layer numbers
    inside the model, with mode index; nothing to fuse under ZeRO-3's per-unit reductions."""
    f, layers = s.parallel.comm_fusion, getattr(s.model, "layers", 1)
    entries = [("parallel.comm_fusion", f.mode, f.index)] + [
        (f"parallel.comm_fusion.{k}", e.mode, e.index)
        for k in ("all_reduce", "reduce_scatter", "all_gather")
        if (e := getattr(f, k)) is not None]
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        e = getattr(f, kind)
        if e is not None and e.bucket_mb is not None and e.mode != "size":
            yield f"parallel.comm_fusion.{kind}.bucket_mb", (
                f"{e.bucket_mb:g} is read only with parallel.comm_fusion.{kind}.mode: size "
                f"(found {e.mode}, which ignores it); add the mode or remove the key")
    for key, mode, index in entries:
        if index is None:
            continue
        if mode != "index":
            yield f"{key}.index", f"needs {key}.mode: index (found {mode})"
        elif not index:
            yield f"{key}.index", ("[]: expected at least one layer number that starts a "
                                   "fusion group (or leave the key out: one group per layer)")
        elif any(b <= a for a, b in zip(index, index[1:])) or index[-1] >= layers:
            yield f"{key}.index", (f"{index}: layer numbers that start a fusion group must "
                                   f"increase and stay below model.layers={layers}")
    z = s.parallel.optimizer_shard
    for kind, ok in fused_collectives(z).items():
        if getattr(f, kind) is not None and not ok:
            yield f"parallel.comm_fusion.{kind}", (
                f"fuses no collective with parallel.optimizer_shard {z} (the gradients are "
                + ("all-reduced" if z == 0 else "reduce-scattered" if z < 3 else
                   "reduced unit by unit") + "; remove the entry)")
    if z == 3 and f != CommFusionSpec() and f.mode != "auto":
        yield "parallel.comm_fusion", (
            "does not apply with parallel.optimizer_shard 3: ZeRO-3 / FSDP gathers and "
            "reduce-scatters one unit (layer) at a time (allowed: mode auto or the default)")


def _optimizer_threshold(s: Scenario) -> Iterator[Problem]:
    """MindSpore's parallel_optimizer_threshold applies to a sharded optimizer, and is
    judged on the transformer's planned parameters."""
    p = s.parallel
    if p.optimizer_threshold_kb <= 0:
        return
    if not p.optimizer_shard:
        yield "parallel.optimizer_threshold_kb", (
            f"{p.optimizer_threshold_kb:g} applies to a sharded optimizer (parallel."
            f"optimizer_shard 1, 2 or 3; found 0)")
    elif not s.model.optimizer_threshold:
        yield "parallel.optimizer_threshold_kb", (
            f"{p.optimizer_threshold_kb:g}: not simulated yet for a model of type "
            f"'{s.model.type}' (allowed: 0)")


def _param_gather(s: Scenario) -> Iterator[Problem]:
    p = s.parallel
    if not p.overlap.param_gather and p.optimizer_shard not in (1, 2):
        yield "parallel.overlap.param_gather", (
            f"false applies to the all-gather of updated parameters after a sharded optimizer step "
            f"(parallel.optimizer_shard 1 or 2; found {p.optimizer_shard}: "
            + ("ZeRO-3 gathers each unit before use)" if p.optimizer_shard == 3
               else "nothing is gathered)"))


def _offload(s: Scenario) -> Iterator[Problem]:
    """Offloading parameters / activations (simulator/lower/offload.py) moves them piece
    by piece: a transformer's layers, an operator graph's units (`schedule.graph_stages`);
    the combinations not modelled are refused, for `run` and `verify` alike."""
    p, off = s.parallel, s.parallel.offload
    per_op = s.model.recomputed_ops()
    for key, on in (("parameters", off.parameters), ("activations", off.activations)):
        if not on:
            continue
        where = f"parallel.offload.{key}"
        if p.recompute != "none":
            yield where, (f"true with parallel.recompute {p.recompute} is not simulated yet "
                          f"(allowed: recompute none)")
        elif per_op:
            yield where, (f"true with model.ops[{per_op[0]}].attrs.recompute true is not "
                          f"simulated yet (allowed: false, or no operator recomputed)")
        elif key == "parameters" and p.optimizer_shard != 0:
            yield where, (f"true with parallel.optimizer_shard {p.optimizer_shard} is not "
                          f"simulated yet (allowed: optimizer_shard 0)")
        elif key == "parameters" and p.mode == "parameter_server":
            yield where, ("true with parallel.mode parameter_server is not simulated yet "
                          "(the servers hold the parameters; allowed: false)")


def _nvme_offload(s: Scenario) -> Iterator[Problem]:
    """Optimizer states on NVMe (ZeRO-Infinity, `lower.nvme`): DeepSpeed swaps them only
    under ZeRO-3 (its stage3 optimizer owns the swapper, runtime/zero/stage3.py; its tests
    refuse NVMe offload at stages 1-2)."""
    p = s.parallel
    for key in ("nvme_pipeline_read", "nvme_pipeline_write"):
        if getattr(p.offload, key) and not p.offload.optimizer_on_nvme:
            yield f"parallel.offload.{key}", (
                "true applies only with parallel.offload.optimizer_states nvme (found "
                f"{str(p.offload.optimizer_states).lower()})")
    if p.offload.optimizer_on_nvme and p.optimizer_shard != 3:
        yield "parallel.offload.optimizer_states", (
            f"nvme with parallel.optimizer_shard {p.optimizer_shard}: DeepSpeed swaps "
            "optimizer states to NVMe only under ZeRO-3 (allowed: optimizer_shard 3, or "
            "optimizer_states true for host memory)")


def _printable(s: Scenario) -> Iterator[Problem]:
    """The name reaches terminals: no control character (an ANSI or window-title escape)."""
    bad = next(((i, c) for i, c in enumerate(s.name) if unicodedata.category(c) == "Cc"),
               None)
    if bad is not None:
        yield "name", (f"contains the control character {bad[1]!r} at position {bad[0]}; "
                       "a name is printed on terminals: use printable text")


def _search(s: Scenario) -> Iterator[Problem]:
    """`parallel.search` chooses the strategies under mode auto; elsewhere nothing reads it.
    (Judged on the value, not on whether the key was written: the planner's candidates
    are re-validated from full dumps, where every key is written.)"""
    p = s.parallel
    if p.search != ParallelSpec.model_fields["search"].default and p.mode != "auto":
        yield "parallel.search", (f"{p.search} is read only with parallel.mode: auto (the "
                                  f"search fills the strategies left open; found mode "
                                  f"{p.mode}); set the mode or remove the key")


RULES: tuple[Callable[[Scenario], Iterator[Problem]], ...] = (
    _printable,
    parallel_modes,
    _search,
    context,
    _devices,
    cluster_problems,
    _batch,
    _model,
    _selective_recompute,
    recompute_modules,
    slice_activation,
    expert_dispatcher,
    fp8_saved_activations,
    cuda_graphs,
    _one_block_overlap,
    schedule,
    moe_a2a,
    _model_knobs,
    _param_gather,
    _optimizer_threshold,
    _comm_fusion,
    _copies,
    _offload,
    _nvme_offload,
    parameter_server,
    tensor_nd,
    recompute_comm,
    comm_subgraph,
    dataset_problems,
)


def check_rules(s: Scenario) -> None:
    """Raise InputError for the first rule the scenario breaks."""
    for rule in RULES:
        for key, message in rule(s):
            raise InputError(s.source, key, message)
