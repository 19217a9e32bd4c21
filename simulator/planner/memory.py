"""Closed-form peak memory of one device under a parallel configuration, in bytes.

Used to prune the search space before any simulation. The accounting is the one
docs/contract.md section 3 states for `memory.by_category_bytes`:

- model states (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1 and Fig. 1): mixed-precision
  Adam keeps 2 + 2 + 12 bytes per parameter (16-bit weights, 16-bit gradients, fp32 master
  copy + momentum + variance); ZeRO stage 1 divides the 12 by the data-parallel degree N,
  stage 2 also the gradients, stage 3 also the weights: 16Psi, 4Psi + 12Psi/N,
  2Psi + 14Psi/N, 16Psi/N. fp32 training has no master copy (K = 8 for Adam). Gradients
  kept in fp32 (the profile's `software.bf16_grads_fp32`, as Megatron-LM) take 4 bytes.
  ZeRO-Offload (Ren et al. 2021, Sec. 4) moves the optimizer states to the host.
- activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", Sec. 4.1, Eq. 1 and Table 2): per layer and micro-batch of b
  sequences of s tokens, hidden h, a heads, in 16-bit training sbh(34 + 5as/h) bytes
  without parallelism; with tensor parallelism t sbh(10 + 24/t + 5as/(ht)); with sequence
  parallelism sbh(34/t + 5as/(ht)); selective recompute drops the 5as/h term; full
  recompute keeps only the layer input, 2sbh (/t with sequence parallelism). Without
  dropout (`model.dropout: 0`) no keep-mask is saved: the 2sbh mask bytes and, in the
  attention core, the mask and dropout output (3as^2b) drop out. `layer_bytes`
  below is the same count written per tensor for any element size e, FFN width f and
  key/value heads kv, so that it reduces to those forms (a test checks it). A fused
  attention kernel (Dao et al. 2022, FlashAttention, Sec. 3.1) keeps Q, K, V and the fp32
  softmax statistics instead of the s x s score, probability and dropout tensors.
- in flight: stage i of a p-stage 1f1b pipeline holds min(p - i, m) micro-batches
  (Narayanan et al. 2021, Sec. 2.2.1), so the first stage holds p micro-batches of L/p
  layers, L layers' worth in all (Korthikanti et al. 2022, Sec. 4.2.3); the interleaved
  schedule with v chunks holds (1 + (p - 1)/(pv)) times that (same section; Megatron-LM's
  warm-up of (p - i - 1) * 2 + (v - 1) * p chunk forwards). Under recompute one layer's
  full activation set is alive while it is recomputed for the backward.
- the first stage also holds the embedding (vocabulary-parallel, V h / t, plus the
  position table s h, split over t with sequence parallelism as the simulator's planned
  graph does) and its dropout mask; the last stage the final norm, the output
  layer (V h / t, tied to the embedding when there is one stage) and the fp32 logits its
  cross-entropy keeps (4 s b V / t, Megatron-LM's vocab_parallel_cross_entropy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.framework.load import framework_for
from simulator.config.scenario.schema import DTYPE_BYTES, Scenario, TransformerModel
from simulator.lower.framework_apply import fp8_copy_bytes_per_param, fp8_recipe
from simulator.lower.state import (
    framework_overhead_bytes,
    fsdp2_bytes_per_param,
    fsdp2_layout,
    state_bytes_per_param,
    state_dtype_of,
)
from simulator.models.params import transformer_params
from simulator.models.transformer import transformer_model
from simulator.models.transformer_plan import uses_flash
from simulator.planner.space import Config
from simulator.program.model_program import transformer_program

__all__ = ["Workload", "workload_of", "gather_bytes", "MemoryEstimate", "estimate_memory",
           "layer_bytes", "layer_params", "storage_bytes", "STATE_BYTES_PER_PARAM"]

# Optimizer state bytes per parameter in mixed precision: fp32 master weights + moments
# (ZeRO, Sec. 3.1: K = 12 for Adam).
STATE_BYTES_PER_PARAM = {"adam": 12, "momentum": 8, "sgd": 4}
_MASK_BYTES = 1  # dropout masks are bytes (Korthikanti et al. 2022, Sec. 4.1)


@dataclass(frozen=True)
class Workload:
    """What is trained, independent of how it is parallelised: the model, the global batch,
    the optimizer, whether attention runs fused, bytes per gradient element, and the
    gradient bucketing (`parallel.comm_fusion`)."""

    model: TransformerModel
    global_batch: int
    optimizer: str
    flash: bool
    grad_bytes: int
    fusion_mode: str = "size"
    bucket_bytes: float = 25e6
    overheads: Any = None  # the framework profile's memory_overheads (None: none)
    # parallel.offload.parameters / activations (simulator/lower/offload.py): a layer's
    # weights or saved activations are on the device only around its compute
    offload_parameters: bool = False
    offload_activations: bool = False
    state_dtype: str = "fp32"  # training.optimizer_dtype (simulator/lower/state.py)
    # FP8 recipe: bytes of FP8 weight copies per parameter of an FP8 GEMM (the framework's
    # fp8.weight_copy_bytes_per_param, less the bf16 weight they replace with fp8_params)
    fp8_copy_bytes: float = 0.0
    fp8_params: bool = False
    # what the program is derived with (`figures`): the scenario, the stack, the device's
    # compute units and the FP8 recipe; None: the closed forms below
    scenario: Scenario | None = None
    software: Any = None
    compute_units: int = 132
    fp8_recipe: Any = None
    # the optimizer runs on parameter servers (parallel.mode: parameter_server): its
    # states are not on the workers (simulator/lower/reduction.py, ParameterServer)
    remote_optimizer: bool = False
    devices_per_node: int = 8  # cluster.devices_per_node (devices sharing a host)


def workload_of(scenario: Scenario, hw: Any) -> Workload:
    """The workload of a transformer scenario on hardware profile `hw` (whose software
    stack says whether `attention: auto` is fused and whether bf16 gradients are fp32)."""
    m = transformer_model(scenario.model)
    fw = framework_for(scenario, hw)
    sw = fw.software
    flash = uses_flash(scenario, sw.fused_attention)
    e = storage_bytes(m)
    ge = 4 if sw.bf16_grads_fp32 and e == 2 and m.dtype != "fp16" else e
    fusion = scenario.parallel.comm_fusion
    off = scenario.parallel.offload
    tr = scenario.training
    fp8 = m.dtype == "fp8" and fw.fp8.supported
    recipe = fp8_recipe(scenario, fw, hw)
    copies = fp8_copy_bytes_per_param(recipe if fp8 else None, fw, tr.fp8_params, e)
    return Workload(m, tr.global_batch_size, tr.optimizer, bool(flash), ge, fusion.mode,
                    fusion.bucket_mb * 1e6, fw.memory_overheads, off.parameters,
                    off.activations, state_dtype_of(tr.optimizer_dtype, tr.moments_dtype),
                    copies, fp8 and tr.fp8_params,
                    scenario, sw, hw.compute_units, recipe,
                    scenario.parallel.mode == "parameter_server",
                    scenario.cluster.devices_per_node)


@dataclass(frozen=True)
class Figures:
    """Bytes one device's blocks keep per micro-batch, from the program `run` simulates
    (`program.model_program`): a layer's saved set (`layer`), what its recompute makes
    again (`working`), the embedding's and the head's saved sets and the loss's transient
    buffers beyond the working set."""

    layer: float
    working: float
    embed: float
    head: float
    transient: float


# (id(workload), the fields of a configuration the figures depend on) -> (workload,
# figures): the entry holds the workload (frozen: its scenario, stack, compute units and
# FP8 recipe), so its id cannot be reused while it is stored
_FIGURES: dict[tuple, tuple[Workload, Figures]] = {}
FIGURES_SIZE = 512  # entries kept at most, emptied when full


def figures(w: Workload, cfg: Config) -> Figures | None:
    """The program's `Figures` of `w`'s scenario under `cfg` (None without a scenario):
    one program per distinct (tensor degree, sequence parallelism, recompute, micro-batch
    size), which is all of `cfg` the saved bytes depend on."""
    if w.scenario is None:
        return None
    key = (id(w), cfg.tensor, cfg.sequence_parallel, cfg.recompute, cfg.micro_batch_size)
    hit = _FIGURES.get(key)
    if hit is not None and hit[0] is w:
        return hit[1]
    s = w.scenario
    par = s.parallel.model_copy(update={
        "data": 1, "tensor": cfg.tensor, "pipeline": 1, "sequence_parallel":
        cfg.sequence_parallel, "recompute": cfg.recompute, "expert": 1})
    tr = s.training.model_copy(update={"micro_batch_size": cfg.micro_batch_size})
    prog = transformer_program(s.model_copy(update={"parallel": par, "training": tr}),
                               w.software, w.compute_units, w.fp8_recipe)
    embed, head = prog.block("embed"), prog.block("head")
    # per model layer, the least over the layer groups: a floor for any stage's layers
    groups = prog.cut()
    out = Figures(min(b.saved_bytes / b.layers for b in groups),
                  min(b.working_bytes for b in groups), embed.saved_bytes,
                  head.saved_bytes, head.transient_bytes)
    if len(_FIGURES) >= FIGURES_SIZE:
        _FIGURES.clear()
    _FIGURES[key] = (w, out)
    return out


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak bytes of the most loaded device and its parts (CONTRACT section 3 categories).

    `floor_bytes` is what the device must hold at some moment whatever the timing: the
    model states with the larger of the activations in flight and the data-parallel
    buffer. The pruning uses it, so that it never drops a configuration that fits."""

    parameters: float
    gradients: float
    optimizer_states: float
    activations: float
    communication_buffers: float
    floor_bytes: float = 0.0
    framework_overhead: float = 0.0  # the stack's context and collective buffers

    @property
    def peak_bytes(self) -> float:
        return (self.parameters + self.gradients + self.optimizer_states + self.activations
                + self.communication_buffers + self.framework_overhead)


def storage_bytes(m: TransformerModel) -> int:
    """Bytes of a stored element: an FP8 recipe keeps weights, gradients and activations
    in bf16 (simulator/program/fp8.py) except the FP8 copies."""
    return 2 if m.dtype == "fp8" else DTYPE_BYTES[m.dtype]


def layer_params(m: TransformerModel, t: int) -> float:
    """Parameters of one transformer layer held by one of t tensor-parallel ranks, counted
    on the planned graph as the program counts them (`models.params`): QKV (a + 2kv heads
    of d) and output projection with biases, the FFN (gelu: two matrices with biases;
    swiglu: three without), two layernorms (12h^2 + 13h at t = 1, kv = a, f = 4h;
    Narayanan et al. 2021, Sec. 5.1 / Eq. 2)."""
    return transformer_params(m, t).per_layer


def layer_bytes(m: TransformerModel, b: int, t: int, sp: bool, recompute: str,
                flash: bool) -> float:
    """Activation bytes one layer saves for its backward, per micro-batch of b sequences
    (Korthikanti et al. 2022, Sec. 4.1; see the module docstring)."""
    s, h, a, e = m.seq_length, m.hidden_size, m.num_heads, storage_bytes(m)
    sbh, f_ratio, kv = s * b * h, m.ffn / h, m.kv_heads / m.num_heads
    # a tensor only an FP8 GEMM keeps is kept as its FP8 copy (TE Linear saves the FP8
    # input): the QKV, FC1 and FC2 inputs, and the projection's unless fused attention
    # keeps it as its output; the FP8 recipes' GEMMs are these four linears
    g = 1 if m.dtype == "fp8" else e
    if recompute == "full":
        return e * sbh / (t if sp else 1)
    mask = _MASK_BYTES if m.dropout > 0 else 0.0  # no dropout ran, no mask kept
    # not split by t (split under sequence parallelism): the two layernorm inputs, the QKV
    # and FC1 inputs and the two dropout masks: sbh(4e + 2) (= 10 sbh at e = 2)
    replicated = (2 * e + 2 * g + 2 * mask) * sbh
    # split by t: Q, K, V, the projection input, FFN intermediates (gelu: its input and
    # FC2's input, 2f; swiglu: gate, up, FC2 input, 3f): 24 sbh at e = 2, f = 4h, kv = a
    ffn = ((2 if m.ffn_activation == "swiglu" else 1) * e + g) * f_ratio
    split = sbh * (e * (1 + 2 * kv) + (e if flash else g) + ffn)
    if recompute == "selective":  # the core attention runs again in the backward
        core = 0.0
    elif flash:  # fp32 row log-sum-exp per head and token instead of the s x s tensors
        core = 4.0 * b * a * s
    elif mask:  # softmax output, dropout mask and dropout output: as^2b(2e + 1) = 5as^2b
        core = (2 * e + mask) * a * s * s * b
    else:  # the softmax output alone (its own backward's and the PV GEMM's input)
        core = e * a * s * s * b
    return replicated / (t if sp else 1) + (split + core) / t


@dataclass(frozen=True)
class _Stage:
    params: float
    activations: float


def _in_flight(cfg: Config, micro: int, stage: int) -> float:
    """Chunk-forwards alive on `stage` at its first backward, in units of a whole stage's
    activations (a chunk holds 1/v of them)."""
    p, v = cfg.pipeline, cfg.virtual_stages
    if cfg.schedule != "interleaved_1f1b" or v == 1:
        return float(min(p - stage, micro))
    total = micro * v
    warmup = total if micro == p else min((p - stage - 1) * 2 + (v - 1) * p, total)
    return min(warmup + 1, total) / v


def _stage(m: TransformerModel, cfg: Config, micro: int, stage: int, flash: bool,
           fig: Figures | None = None) -> _Stage:
    """Parameters and activations of pipeline stage `stage`: with the program's `fig`,
    its blocks' saved bytes (the embedding's on the first stage, the head's and the loss's
    transient buffers on the last); without, the closed forms of the module docstring."""
    t, p, b, sp = cfg.tensor, cfg.pipeline, cfg.micro_batch_size, cfg.sequence_parallel
    s, h, e = m.seq_length, m.hidden_size, storage_bytes(m)
    per_stage = m.layers // p
    params = per_stage * layer_params(m, t)
    tokens = s * b / (t if sp else 1)  # tokens in the norm / dropout regions
    flight = _in_flight(cfg, micro, stage)
    counts = transformer_params(m, t, sp)
    if fig is not None:
        acts = flight * per_stage * fig.layer + fig.working
        if stage == 0:
            params += counts.embedding
            acts += min(flight, micro) * fig.embed
        if stage == p - 1:
            params += counts.head + (counts.output if p > 1 else 0)
            acts += fig.head + max(0.0, fig.transient - fig.working)
        return _Stage(params, acts)
    acts = flight * per_stage * layer_bytes(m, b, t, sp, cfg.recompute, flash)
    if cfg.recompute != "none":  # one layer's full set while it is recomputed
        full = layer_bytes(m, b, t, sp, "none", flash)
        acts += full - layer_bytes(m, b, t, sp, cfg.recompute, flash)
    if stage == 0:  # the position table is split over t with sequence parallelism
        params += counts.embedding
        acts += min(flight, micro) * (_MASK_BYTES if m.dropout > 0 else 0.0) * tokens * h
    if stage == p - 1:
        params += counts.head + (counts.output if p > 1 else 0)
        logits = s * b * (m.vocab_size // t)
        acts += e * tokens * h + e * s * b * h / (t if sp else 1) + 4.0 * logits
    return _Stage(params, acts)


def gather_bytes(w: Workload, cfg: Config) -> float:
    """Bytes per parameter element of the sharded optimizer's all-gather, as the lowering
    prices it (`lower.framework_apply.fp8_gather_bytes`): the model dtype's; an FP8 model's
    weights are bf16, but with `fp8_params` under a per-tensor recipe the FP8 GEMMs' travel
    in 1 byte (share x 1 + (1 - share) x 2)."""
    if w.model.dtype != "fp8":
        return float(DTYPE_BYTES[w.model.dtype])
    recipe = w.fp8_recipe
    if not w.fp8_params or recipe is None or recipe.dtype != "fp8" or recipe.mx:
        return 2.0
    return 2.0 - _fp8_share(w.model, cfg)


def _fp8_share(m: TransformerModel, cfg: Config) -> float:
    """Share of the model's parameters that feed FP8 GEMMs (the layers'), applied to each
    device's, as simulator/lower/framework_apply.py counts the FP8 weight copies."""
    counts = transformer_params(m, cfg.tensor, cfg.sequence_parallel)
    layers = counts.layers_params
    rest = counts.embedding + counts.head + (counts.output if cfg.pipeline > 1 else 0)
    return layers / (layers + rest)


def _dp_buffer(w: Workload, cfg: Config, stage_params: float, micro: int) -> float:
    """The data-parallel stream's transfer buffer: with ZeRO >= 2 a model chunk's gradients
    reduce-scattered after every micro-batch but the last, otherwise one gradient bucket
    (`parallel.comm_fusion`: `bucket_mb`, one layer per bucket with `index`)."""
    if cfg.data == 1:
        return 0.0
    chunk = stage_params / cfg.virtual_stages * w.grad_bytes
    layer = layer_params(w.model, cfg.tensor) * w.grad_bytes
    if cfg.optimizer_shard >= 3:
        return layer  # ZeRO-3 / FSDP reduce-scatters one unit at a time
    if cfg.optimizer_shard >= 2 and micro > 1:
        return chunk
    bucket = {"size": w.bucket_bytes, "auto": w.bucket_bytes, "index": layer}
    return min(chunk, bucket.get(w.fusion_mode, layer / 6))


def _pp_buffers(w: Workload, cfg: Config) -> float:
    """A pipeline send each way: the boundary activation, s b h elements (/t with sequence
    parallelism)."""
    if cfg.pipeline == 1:
        return 0.0
    m = w.model
    send = DTYPE_BYTES[m.dtype] * m.seq_length * cfg.micro_batch_size * m.hidden_size
    return 2 * send / (cfg.tensor if cfg.sequence_parallel else 1)


def _floor(w: Workload, params: float, rest: float, acts: float, dp: float) -> float:
    """The floor: what offloading moves to the host counts nothing (a lower bound)."""
    return ((0.0 if w.offload_parameters else params) + rest
            + max(0.0 if w.offload_activations else acts, dp))


def estimate_memory(w: Workload, cfg: Config) -> MemoryEstimate:
    """Peak memory of the most loaded device (the first or the last pipeline stage): model
    states, the activations in flight, the pipeline send buffers and the data-parallel
    buffer. That buffer adds to the activations only with ZeRO >= 2, whose per-micro-batch
    reduce-scatter runs under the next forwards; the buckets of the last micro-batch leave
    as its activations are freed, so otherwise the larger of the two counts."""
    m = w.model
    micro = w.global_batch // (cfg.micro_batch_size * cfg.data)
    e = storage_bytes(m)
    k = state_bytes_per_param(w.optimizer, "bf16" if m.dtype == "fp8" else m.dtype,
                              w.state_dtype, w.fp8_params)
    copies = w.fp8_copy_bytes * _fp8_share(m, cfg)
    d, z = cfg.data, cfg.optimizer_shard
    comms = sum(1 for n in (cfg.data, cfg.tensor, cfg.pipeline) if n > 1)
    overhead = framework_overhead_bytes(w.overheads, comms) if w.overheads else 0.0
    best = None
    for stage in sorted({0, cfg.pipeline - 1}):
        st = _stage(m, cfg, micro, stage, w.flash, figures(w, cfg))
        dp = _dp_buffer(w, cfg, st.params, micro)
        states = 0.0 if cfg.offload_optimizer or w.remote_optimizer else \
            st.params * k / (d if z >= 1 else 1)
        params = st.params * e / (d if z >= 3 else 1)
        # FSDP2's layout (lower.state): the fp32 shard is the master copy, the gradients
        # exist from the backward to the step (in the estimate, not in the floor)
        fsdp2 = fsdp2_layout(getattr(w.software, "state_layout", "zero"), z,
                             cfg.offload_optimizer or w.remote_optimizer)
        if fsdp2:
            shard, kept = fsdp2_bytes_per_param(w.optimizer, "bf16" if m.dtype == "fp8"
                                                else m.dtype, w.state_dtype, w.fp8_params)
            params, states = st.params * shard / d, st.params * kept / d
        # the FP8 weight copies, counted by the model's share of FP8-GEMM parameters as the
        # simulator does: in the estimate, not in the floor
        fp8_copies = st.params * copies / (d if z >= 3 else 1)
        # ZeRO-3 / FSDP holds the unit it computes whole and prefetches the next one
        # (simulator/lower/zero3.py, ShardedParameters): in the estimate, not in the
        # floor (a unit is freed when its compute ends, not always at the activation peak)
        unit = layer_params(m, cfg.tensor) * e if z >= 3 and d > 1 else 0.0
        grads = st.params * w.grad_bytes / (d if z >= 2 else 1)
        overlap = z >= 2 and micro > 1
        acts = st.activations if overlap else max(st.activations - dp, 0.0)
        est = MemoryEstimate(
            parameters=params + fp8_copies + 2 * unit, gradients=grads, optimizer_states=states,
            activations=acts, communication_buffers=dp + _pp_buffers(w, cfg),
            floor_bytes=_floor(w, params, (0.0 if fsdp2 else grads) + states + overhead,
                               st.activations, dp),
            framework_overhead=overhead)
        if best is None or est.peak_bytes > best.peak_bytes:
            best = est
    assert best is not None
    return best
