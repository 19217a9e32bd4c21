"""FP8 as a per-GEMM precision (issue 9 item 3): the GEMMs a framework's recipe runs in FP8,
and the casts it adds as memory-bound kernels. Everything else stays in bf16.

Transformer Engine (Megatron-Core, NeMo, llm-foundry with fc_type 'te') and torchao Float8
(torchtitan) run the linear layers of the transformer block in FP8 and keep the attention
core (QK^T, softmax, PV), norms, embedding, LM head and the optimizer in bf16/fp32
(framework profile `fp8.bf16_ops`). An FP8 GEMM needs its operands in FP8:

- forward: the input X (m x k) is cast and transposed in one kernel (TE cast_transpose:
  read 2 bytes, write the e4m3 X and X^T, 1 byte each, per element); X^T is the wgrad
  operand of the backward;
- backward: the output gradient dY (m x n) likewise (e5m2 in the HYBRID format), once per
  GEMM: dgrad and wgrad share it;
- the weight (k x n) likewise; with delayed scaling TE caches the FP8 weight across the
  micro-batches of a step (Megatron passes is_first_microbatch), so its cast runs once per
  step (its cost is spread over the micro-batches here); with dynamic (current) scaling
  (torchao tensorwise) it is cast every time it is used;
- the input an FP8 GEMM keeps for its backward is that FP8 copy (TE Linear saves the FP8
  X^T for wgrad), 1 byte instead of 2 where only FP8 GEMMs keep the tensor (`fp8_saved`);
- dynamic scaling reads each tensor once more for its amax before the cast (torchao
  `tensor_to_amax`, then the cast); delayed scaling takes the amax inside the cast kernel
  (TE fuses amax into cast_transpose) and updates the scales once per step (negligible);
- with Transformer Engine's tensor-parallel comm overlap (userbuffers) every all-gather
  that feeds a GEMM travels in FP8 (transformer_engine/pytorch/module/base.py
  initialize_ub: `fp8_buf = name in layers_all_gather_overlap`, buffer dtype uint8 under
  FP8): the sequence-parallel input of qkv and fc1 and the output gradient of proj and fc2
  are quantized on the local shard before the gather (forward: inside the LayerNorm kernel
  of LayerNormLinear / LayerNormMLP, no kernel of its own; backward: a cast of the shard,
  read 2 write 1) and the gathered FP8 tensor is transposed for the wgrad GEMM (read 1,
  write 1), so the gather moves 1 byte an element instead of 2 (`Fp8Recipe.gather_tp`;
  such a collective's name ends in `.fp8`).

Blackwell (issue 24): the data-centre parts' FP8 GEMMs take their operands in any layout, so
with one scale per tensor (delayed or current scaling) Transformer Engine writes no transpose:
a cast reads 2 and writes 1 byte an element, a gathered FP8 tensor is used as it arrives, and
the cached FP8 weight is 1 byte a parameter instead of 2 (`Fp8Recipe.transposes` false;
`HardwareProfile.fp8_gemm_any_layout` gives the rule and its source). MXFP8
(`training.fp8_scaling: mxfp8`, Blackwell's block scaling: one E8M0 scale per 32 elements
along the GEMM's reduction dimension, OCP Microscaling Formats v1.0) scales rows and columns
apart, so every operand has a rowwise and a columnwise copy: a cast reads 2 and writes
2 x (1 + 1/32) bytes, with no amax pass (the block scales come from the block itself).

FP4 (issue 22 item 6): the same recipe with the GEMMs in FP4 (`training.fp4_recipe`: NVFP4 or
MXFP4 on Blackwell, `Fp8Recipe.fp4`). Transformer Engine's NVFP4BlockScaling quantizes both
operands of all three GEMMs of a linear layer (fprop, dgrad, wgrad; Abecassis et al. 2025,
"Pretraining Large Language Models with NVFP4", arXiv 2509.25149, Sec. 4), each tensor in a
rowwise and a columnwise copy: a cast reads the bf16 tensor (2 bytes an element) and writes two
copies of 4-bit data plus their block scales (NVFP4: one E4M3 byte per 16 elements and an
fp32 per-tensor scale; MXFP4: one E8M0 byte per 32 elements; OCP Microscaling Formats v1.0).
NVFP4's per-tensor scale needs the tensor's amax first, an extra read (TE docs, "GEMM
Profiling Tutorial": "Per-tensor amax passes: Extra memory pass to compute scaling factors");
its 16x16 random Hadamard transform of the wgrad inputs and stochastic rounding of the
gradients run inside the cast kernel (no bytes of their own here). The weights are cast once
per step, as Transformer Engine caches a quantized weight across micro-batches; the inputs are
kept for the backward in bf16 (`saves_fp8` false: the FP4 copies are not counted as saved).

Sources: NVIDIA TransformerEngine docs (DelayedScaling, Format.HYBRID, fp8 weight caching);
pytorch/ao torchao/float8 (float8_linear.py, float8_scaling_utils.py); framework profiles'
`fp8` blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.cost.specs import CommSpec, ComputeSpec, Phase
from simulator.sharding.lower import Saved, kernel_of
from simulator.sharding.plan import ShardingPlan

__all__ = ["Fp8Recipe", "apply_fp8", "fp8_saved", "FP8_OPS", "FP4_SCALE_BYTES"]

# kernels of the planned GPT graph per role of `fp8.gemm_roles`
# (Megatron-Core builds every linear layer of a block from Transformer Engine modules, so an
# FP8 recipe covers them all: MLA's down and up projections as the qkv role
# (megatron/core/transformer/multi_latent_attention.py: linear_q_down_proj, linear_q_up_proj,
# linear_kv_down_proj, linear_kv_up_proj are TE linears), the routed experts' grouped GEMMs
# (TEGroupedMLP) and the shared experts' (SharedExpertMLP, an MLP) as fc1 / fc2; DeepSeek-V3
# runs the same GEMMs in FP8, arXiv:2412.19437 Sec. 3.3, Fig. 6)
FP8_OPS = {"qkv": ("qkv", "q_down", "kv_down", "q_up", "kv_up"), "proj": ("proj",),
           "fc1": ("fc1", "fc_gate", "fc_up", "expert_fc1", "shared_fc1"),
           "fc2": ("fc2", "expert_fc2", "shared_fc2"), "lm_head": ("lm_head",)}
_CAST_T_BYTES = 4.0   # cast + transpose: read bf16 (2), write FP8 and its transpose (1 + 1)
_AMAX_BYTES = 2.0     # a separate amax pass reads the bf16 tensor once more
_TRANSPOSE_BYTES = 2.0  # FP8 transpose of a gathered FP8 tensor: read 1, write 1
_SHARD_CAST_BYTES = 3.0  # cast of a local bf16 shard before an FP8 gather: read 2, write 1
_CAST_BYTES = 3.0  # cast without a transpose (Blackwell, per-tensor scale): read 2, write 1
MX_SCALE_BYTES = 1 / 32  # MXFP8: one E8M0 scale byte per 32 elements
# FP4 block scales, bytes per element: NVFP4 one E4M3 per 16, MXFP4 one E8M0 per 32
FP4_SCALE_BYTES = {"nvfp4": 1 / 16, "mxfp4": 1 / 32}


@dataclass(frozen=True)
class Fp8Recipe:
    """Which kernels run in FP8 and how the casts are paid."""

    kernels: frozenset[str]
    dynamic: bool            # current scaling: separate amax pass, weights cast per use
    micro_batches: int = 1   # delayed scaling casts the weights once per step
    # tensor-parallel degree when the operands all-gathered over 'tp' travel in FP8
    # (Transformer Engine userbuffers, module doc); 0: they are gathered in the model dtype
    gather_tp: int = 0
    # the FP8 GEMMs keep their inputs for the backward in FP8 (1 byte an element); false:
    # in the model dtype, cast again in the backward (framework fp8.saved_inputs)
    saves_fp8: bool = True
    # the GEMMs' dtype ('fp8', or 'fp4' for an FP4 recipe) and, for FP4, its format
    dtype: str = "fp8"
    fp4_format: str = ""
    # the FP8 GEMMs need transposed copies of their operands (Hopper / Ada: TN layouts only);
    # false on Blackwell with one scale per tensor (module doc)
    transposes: bool = True
    # MXFP8 block scaling: a rowwise and a columnwise copy of every operand with their scales
    mx: bool = False

    @staticmethod
    def fp4(roles: tuple[str, ...], fmt: str, micro_batches: int) -> Fp8Recipe:
        """The FP4 recipe `fmt` ('nvfp4' | 'mxfp4') over the GEMMs of `roles` (module doc)."""
        r = Fp8Recipe.of(roles, False, micro_batches, saves_fp8=False)
        return replace(r, dtype="fp4", fp4_format=fmt)

    @property
    def cast_bytes(self) -> float:
        """Bytes one element's cast moves: FP8 cast + transpose (read 2, write 1 + 1); FP4
        a rowwise and a columnwise copy of 4-bit data with their block scales (read 2, write
        2 x (0.5 + scale)); a separate amax pass (current scaling, NVFP4) reads 2 more."""
        if self.dtype == "fp4":
            base = 2.0 + 2 * (0.5 + FP4_SCALE_BYTES[self.fp4_format])
            return base + (_AMAX_BYTES if self.fp4_format == "nvfp4" else 0.0)
        if self.mx:
            return 2.0 + 2 * (1.0 + MX_SCALE_BYTES)
        return (_CAST_T_BYTES if self.transposes else _CAST_BYTES) + (
            _AMAX_BYTES if self.dynamic else 0.0)

    @property
    def weight_copy_factor(self) -> float:
        """The quantized weight copies' bytes against FP8's (data + transpose, 2 bytes a
        parameter): FP4's two 4-bit copies with their scales, MXFP8's two 8-bit copies with
        theirs, the FP8 data alone where no transpose is kept."""
        if self.dtype == "fp4":
            return (0.5 + FP4_SCALE_BYTES[self.fp4_format])
        if self.mx:
            return 1.0 + MX_SCALE_BYTES
        return 1.0 if self.transposes else 0.5

    @staticmethod
    def of(roles: tuple[str, ...], dynamic: bool, micro_batches: int,
           saves_fp8: bool = True) -> Fp8Recipe:
        kernels = frozenset(k for r in roles for k in FP8_OPS[r])
        return Fp8Recipe(kernels, dynamic, max(1, micro_batches), saves_fp8=saves_fp8)


def _cast(name: str, elems: float, per_elem: float, phase: Phase) -> ComputeSpec:
    return ComputeSpec(name, "elementwise", float(elems), per_elem * elems, "bf16", phase)


def _forward_casts(op: ComputeSpec, r: Fp8Recipe, gathered: bool) -> tuple[ComputeSpec, ...]:
    m, n, k = op.gemm_mnk or (0, 0, 0)
    b = max(1, op.gemm_batch)
    per = r.cast_bytes
    weight_share = 1.0 if r.dynamic else 1.0 / r.micro_batches
    weight = _cast(f"{op.name}.{r.dtype}_cast_weight", k * n * weight_share, per, op.phase)
    if gathered and not r.transposes:  # quantized inside the norm, used as gathered
        return (weight,)
    if gathered:  # quantized inside the norm on the shard; the gathered copy transposed
        return (_cast(f"{op.name}.fp8_transpose_input", b * m * k, _TRANSPOSE_BYTES, op.phase),
                weight)
    return (_cast(f"{op.name}.{r.dtype}_cast_input", b * m * k, per, op.phase), weight)


def _backward_casts(op: ComputeSpec, r: Fp8Recipe, gathered: bool) -> tuple[ComputeSpec, ...]:
    """Casts before a dgrad GEMM (m, k_fwd, n_fwd): dY is m x n_fwd."""
    m, _, n = op.gemm_mnk or (0, 0, 0)
    b = max(1, op.gemm_batch)
    per = r.cast_bytes
    if gathered:  # the shard cast before the FP8 gather, the gathered copy transposed
        out = [_cast(f"{op.name}.{r.dtype}_cast_grad", b * m * n,
                     _TRANSPOSE_BYTES * r.transposes + _SHARD_CAST_BYTES / r.gather_tp,
                     op.phase)]
    else:
        out = [_cast(f"{op.name}.{r.dtype}_cast_grad", b * m * n, per, op.phase)]
    if r.dynamic:  # the weight is cast again (transposed) for the dgrad GEMM
        out.append(_cast(f"{op.name}.{r.dtype}_cast_weight", op.gemm_mnk[1] * n if op.gemm_mnk
                         else 0.0, per, op.phase))
    return tuple(out)


def _fp8_part(op: object, r: Fp8Recipe) -> str | None:
    """'' (forward) or the backward part of an FP8 GEMM of the recipe; None otherwise."""
    if not isinstance(op, ComputeSpec) or op.kind != "gemm":
        return None
    base, _, part = op.name.partition(".")
    return part if base in r.kernels else None


def _gathered_in_fp8(ops: tuple, r: Fp8Recipe) -> dict[int, int]:
    """{index of a 'tp' all-gather: index of the FP8 GEMM (forward or dgrad) right after it,
    the consumer the TP-comm overlap pipelines it against}, when the recipe gathers in FP8;
    empty otherwise."""
    if r.gather_tp <= 1:
        return {}
    return {i: i + 1 for i, op in enumerate(ops[:-1])
            if isinstance(op, CommSpec) and op.axis == "tp" and op.collective == "all_gather"
            and _fp8_part(ops[i + 1], r) in ("", "dgrad")}


def apply_fp8(ops: tuple, r: Fp8Recipe) -> tuple:
    """`ops` (one block's forward or backward) with the recipe's GEMMs in FP8 and their
    casts in front of them; with `r.gather_tp`, the all-gathers that feed them in FP8."""
    feeds = _gathered_in_fp8(ops, r)
    gathered = set(feeds.values())
    out: list = []
    for i, op in enumerate(ops):
        part = _fp8_part(op, r)
        if part is None:
            # the model dtype is bf16 whenever a recipe applies (model_program): 2 -> 1 byte
            out.append(replace(op, name=f"{op.name}.fp8", bytes=op.bytes / 2) if i in feeds
                       else op)
            continue
        if part == "":
            casts = _forward_casts(op, r, i in gathered)
            # a SwiGLU layer's up projection reads the gate's input: TE's LayerNormMLP runs
            # them as one GEMM of one FP8 input, cast once (by the gate here)
            out += casts[1:] if op.name == "fc_up" and "fc_gate" in r.kernels else casts
        elif part == "dgrad":
            out += _backward_casts(op, r, i in gathered)
        out.append(replace(op, dtype=r.dtype))
    return tuple(out)


def fp8_saved(sv: Saved, plan: ShardingPlan, r: Fp8Recipe, itemsize: float = 2.0) -> Saved:
    """`sv` with the tensors kept only by FP8 GEMMs stored in FP8 (1 byte an element
    instead of `itemsize`)."""
    fp8_ops = {p.op.name for p in plan.ops if kernel_of(p) in r.kernels}
    tensors = {name: ((nbytes / itemsize) if all(k in fp8_ops for k in keepers) else nbytes,
                      producer, keepers)
               for name, (nbytes, producer, keepers) in sv.tensors.items()}
    return Saved(tensors, dict(sv.extra))
