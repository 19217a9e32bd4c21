"""`transformer_program(scenario)`: one device's work for one micro-batch of a GPT-style model
under Megatron-LM tensor parallelism (Shoeybi et al. 2019, "Megatron-LM", Sec. 3, Fig. 3)
and, optionally, sequence parallelism (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", Sec. 4.2.2, Fig. 5).

Per layer: QKV column-parallel GEMM (grouped-query attention: kv_heads key/value heads),
attention core as batched GEMMs per local head (scores QK^T, context PV) with softmax and
dropout, output row-parallel GEMM, FFN column- then row-parallel (swiglu: gate, up and down
matrices), two layernorms, dropout + residual adds. Two TP all-reduces forward (after the
row-parallel GEMMs, Megatron's `g`) and two backward (Megatron's `f`); with sequence
parallelism each becomes all-gather (`g`) / reduce-scatter (`g-bar`), and the norm and
dropout regions work on s/t tokens.

Backward GEMMs cost twice the forward (dgrad + wgrad). `saved_bytes` follows Korthikanti
et al. 2022, Sec. 4.1 and Table 2, so that per layer, in 16-bit training:
  no TP: sbh(34 + 5as/h); TP t: sbh(10 + 24/t + 5as/(ht)); TP+SP: sbh(34/t + 5as/(ht));
  selective recompute drops the 5as/(ht) term; full recompute keeps 2sbh (the layer input,
  divided by t with SP, where Megatron checkpoints the sequence-sharded input).
Dropout masks are 1 byte per element; other saved tensors are in the model dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.hardware.schema import Software
from simulator.scenario.schema import DTYPE_BYTES, Scenario, TransformerModel
from simulator.schedule.program import Op, TpOverlap, TransformerProgram, saved_bytes

__all__ = ["transformer_program", "ATTENTION_CORE"]

ATTENTION_CORE = ("scores", "softmax", "attn_dropout", "context")
_MASK_BYTES = 1  # dropout masks are stored as bytes (Korthikanti et al. 2022, Sec. 4.1)
_NORM_FLOPS = 8.0  # per element: mean, variance, normalise, scale, shift
_Pair = tuple[tuple[Op, ...], tuple[Op, ...]]  # (forward ops, backward ops) of one block


@dataclass(frozen=True)
class _Dims:
    """Local sizes of one micro-batch on one device (s sequence, b micro-batch, h hidden)."""

    s: int
    b: int
    h: int
    a: int  # attention heads
    kv: int  # key/value heads
    d: int  # head dimension
    f: int  # FFN hidden size
    v: int  # vocabulary
    t: int  # tensor-parallel degree
    sp: bool  # sequence parallel
    e: int  # bytes per element of the model dtype
    dtype: str
    swiglu: bool
    flash: bool = False  # fused attention kernel (no s x s scores in memory)

    @property
    def tokens(self) -> int:
        return self.s * self.b

    @property
    def seq_tokens(self) -> int:
        """Tokens in the norm/dropout regions: split over t under sequence parallelism."""
        return self.tokens // self.t if self.sp else self.tokens


def uses_flash(scenario: Scenario, fused_default: bool = False) -> bool:
    """Whether attention runs fused: `model.attention`, with `auto` taking the hardware
    profile's `software.fused_attention`."""
    mode = getattr(scenario.model, "attention", "standard")
    return fused_default if mode == "auto" else mode == "flash"


def _dims(scenario: Scenario, flash: bool = False) -> _Dims:
    m = scenario.model
    assert isinstance(m, TransformerModel), "transformer_program needs a transformer model"
    p = scenario.parallel
    return _Dims(s=m.seq_length, b=scenario.training.micro_batch_size, h=m.hidden_size,
                 a=m.num_heads, kv=m.kv_heads, d=m.head_dim, f=m.ffn, v=m.vocab_size,
                 t=p.tensor, sp=p.sequence_parallel and p.tensor > 1, e=DTYPE_BYTES[m.dtype],
                 dtype=m.dtype, swiglu=m.ffn_activation == "swiglu", flash=flash)


def _gemm(x: _Dims, name: str, m: int, n: int, k: int, batch: int = 1,
          saved: float = 0.0) -> _Pair:
    """A GEMM batch x (m,k)@(k,n) forward, and its backward dgrad (m,k)=(m,n)@(n,k) plus
    wgrad (k,n)=(k,m)@(m,n): twice the forward FLOPs."""
    def spec(nm: str, mm: int, nn: int, kk: int, phase: str, sv: float = 0.0) -> ComputeSpec:
        return ComputeSpec(nm, "gemm", 2.0 * batch * mm * nn * kk,
                           float(x.e * batch * (mm * kk + kk * nn + mm * nn)), x.dtype, phase,
                           (mm, nn, kk), batch, sv)
    fwd = spec(name, m, n, k, "fwd", saved)
    bwd = (spec(name + ".dgrad", m, k, n, "bwd"), spec(name + ".wgrad", k, n, m, "bwd"))
    return (fwd,), bwd


def _vector(x: _Dims, name: str, kind: str, elements: float, flops_per: float,
            saved: float = 0.0) -> _Pair:
    """A memory-bound kernel over `elements` (read + write); its backward reads the output
    gradient and the saved input and writes the input gradient (1.5x the bytes, 2x FLOPs)."""
    fwd = ComputeSpec(name, kind, flops_per * elements, 2.0 * x.e * elements, x.dtype, "fwd",
                      saved_bytes=saved)
    bwd = ComputeSpec(name + ".bwd", kind, 2.0 * flops_per * elements, 3.0 * x.e * elements,
                      x.dtype, "bwd")
    return (fwd,), (bwd,)


def _comm(name: str, fwd: str | None, bwd: str | None, nbytes: float) -> _Pair:
    """A tensor-parallel conjugate pair on axis 'tp' (Megatron's f/g operators)."""
    f = (CommSpec(name, fwd, nbytes, "tp", "fwd"),) if fwd else ()
    b = (CommSpec(name + ".bwd", bwd, nbytes, "tp", "bwd"),) if bwd else ()
    return f, b


def _enter_tp(x: _Dims, name: str) -> _Pair:
    """Entering a column-parallel region: identity / all-reduce (f), or with sequence
    parallelism all-gather / reduce-scatter (g)."""
    nbytes = float(x.e * x.tokens * x.h)
    if x.sp:
        return _comm(name, "all_gather", "reduce_scatter", nbytes)
    return _comm(name, None, "all_reduce", nbytes) if x.t > 1 else ((), ())


def _leave_tp(x: _Dims, name: str) -> _Pair:
    """Leaving a row-parallel region: all-reduce / identity (g), or with sequence
    parallelism reduce-scatter / all-gather (g-bar)."""
    nbytes = float(x.e * x.tokens * x.h)
    if x.sp:
        return _comm(name, "reduce_scatter", "all_gather", nbytes)
    return _comm(name, "all_reduce", None, nbytes) if x.t > 1 else ((), ())


def _fused_attention(x: _Dims) -> list[_Pair]:
    """One fused causal attention kernel (FlashAttention, Dao et al. 2022; FA-2, Dao 2023).

    FLOPs are the model's (QK^T and PV, 4*b*s^2*d per head, backward twice that), so MFU
    counts as for unfused attention; the kernel executes half of them (causal blocks above
    the diagonal are skipped) and its backward recomputes the scores (5 GEMM-sized passes
    against the forward's 2, FA-2 Sec. 3.1.2). Memory traffic is Q, K, V and O; it keeps
    Q, K, V and the fp32 row log-sum-exp for the backward, no s x s tensor."""
    heads, kv_dim, T, e = x.a // x.t, x.kv * x.d // x.t, x.tokens, x.e
    flops = 4.0 * x.b * heads * x.s * x.s * x.d
    io = float(e * T * (2 * heads * x.d + 2 * kv_dim))
    saved = float(e * T * (heads * x.d + 2 * kv_dim) + 4 * x.b * heads * x.s)
    fwd = ComputeSpec("flash_attention", "attention", flops, io, x.dtype, "fwd",
                      saved_bytes=saved, executed_fraction=0.5)
    bwd = ComputeSpec("flash_attention.bwd", "attention", 2.0 * flops, 2.0 * io, x.dtype,
                      "bwd", executed_fraction=0.5 * 2.5 / 2.0)
    return [((fwd,), (bwd,))]


def _attention_core(x: _Dims) -> list[_Pair]:
    """Scores, softmax, dropout and context as separate kernels, scores in memory."""
    if x.flash:
        return _fused_attention(x)
    heads, kv_dim, T, e = x.a // x.t, x.kv * x.d // x.t, x.tokens, x.e
    probs = x.b * heads * x.s * x.s  # elements of the local attention matrix
    return [
        _gemm(x, "scores", x.s, x.s, x.d, x.b * heads, saved=e * T * (heads * x.d + kv_dim)),
        _vector(x, "softmax", "softmax", probs, 5.0, e * probs),
        _vector(x, "attn_dropout", "elementwise", probs, 2.0, (_MASK_BYTES + e) * probs),
        _gemm(x, "context", x.s, x.d, x.s, x.b * heads, saved=e * T * kv_dim),
    ]


def _attention(x: _Dims) -> list[_Pair]:
    t, T, e = x.t, x.tokens, x.e
    kv_dim = x.kv * x.d // t
    qkv_in = e * T * x.h / (t if x.sp else 1)
    return [
        _vector(x, "ln1", "norm", x.seq_tokens * x.h, _NORM_FLOPS, e * x.seq_tokens * x.h),
        _enter_tp(x, "tp_enter_attn"),
        _gemm(x, "qkv", T, (x.a // t) * x.d + 2 * kv_dim, x.h, saved=qkv_in),
        *_attention_core(x),
        _gemm(x, "proj", T, x.h, x.h // t, saved=e * T * x.h / t),
        _leave_tp(x, "tp_leave_attn"),
        _vector(x, "dropout_residual1", "elementwise", x.seq_tokens * x.h, 3.0,
                _MASK_BYTES * x.seq_tokens * x.h),
    ]


def _ffn(x: _Dims) -> list[_Pair]:
    t, T, e = x.t, x.tokens, x.e
    f = x.f // t
    fc_in = e * T * x.h / (t if x.sp else 1)
    if x.swiglu:
        up = [_gemm(x, "fc_gate", T, f, x.h, saved=fc_in), _gemm(x, "fc_up", T, f, x.h),
              _vector(x, "swiglu", "elementwise", T * f, 6.0, 2 * e * T * f)]
    else:
        up = [_gemm(x, "fc1", T, f, x.h, saved=fc_in),
              _vector(x, "gelu", "elementwise", T * f, 8.0, e * T * f)]
    return [
        _vector(x, "ln2", "norm", x.seq_tokens * x.h, _NORM_FLOPS, e * x.seq_tokens * x.h),
        _enter_tp(x, "tp_enter_ffn"),
        *up,
        _gemm(x, "fc2", T, x.h, f, saved=e * T * f),
        _leave_tp(x, "tp_leave_ffn"),
        _vector(x, "dropout_residual2", "elementwise", x.seq_tokens * x.h, 3.0,
                _MASK_BYTES * x.seq_tokens * x.h),
    ]


def _flatten(pairs: list[_Pair]) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """Forward ops in order; backward ops in reverse block order."""
    fwd = tuple(op for f, _ in pairs for op in f)
    bwd = tuple(op for _, b in reversed(pairs) for op in b)
    return fwd, bwd


def _embedding(x: _Dims) -> _Pair:
    """Vocabulary-parallel embedding lookup + position add + dropout; partial sums over tp
    are all-reduced (reduce-scattered under sequence parallelism)."""
    T, h = x.tokens, x.h
    pairs = [
        _vector(x, "embed_lookup", "gather", T * h, 1.0),
        _leave_tp(x, "tp_embed"),
        _vector(x, "embed_dropout", "elementwise", x.seq_tokens * h, 2.0,
                _MASK_BYTES * x.seq_tokens * h),
    ]
    return _flatten(pairs)


def _cross_entropy(x: _Dims, logits: float) -> _Pair:
    """Megatron-LM's vocab_parallel_cross_entropy (megatron/core/tensor_parallel/
    cross_entropy.py), pass by pass over the fp32 logits. Forward: cast to fp32 (read e,
    write 4), max (read 4), subtract the max (4 + 4), exp (4 + 4), sum (4), divide into the
    softmax kept for the backward (4 + 4): e + 36 bytes per logit. Backward: scale the
    saved softmax by the incoming gradient (4 + 4), cast for the head's GEMM (4 + e)."""
    fwd = ComputeSpec("cross_entropy", "softmax", 5.0 * logits, (x.e + 36.0) * logits,
                      x.dtype, "fwd", saved_bytes=4.0 * logits)
    bwd = ComputeSpec("cross_entropy.bwd", "softmax", 2.0 * logits, (12.0 + x.e) * logits,
                      x.dtype, "bwd")
    return (fwd,), (bwd,)


def _head(x: _Dims) -> _Pair:
    """Final norm, vocabulary-parallel LM head and cross-entropy (Megatron's
    vocab_parallel_cross_entropy: all-reduces of max, sum-exp and target logit, fp32)."""
    T, v = x.tokens, x.v // x.t
    ce_fwd, ce_bwd = _cross_entropy(x, T * v)
    stats = tuple(CommSpec(f"ce_{nm}", "all_reduce", 4.0 * T, "tp", "fwd")
                  for nm in ("max", "sumexp", "target")) if x.t > 1 else ()
    pairs = [
        _vector(x, "ln_final", "norm", x.seq_tokens * x.h, _NORM_FLOPS,
                x.e * x.seq_tokens * x.h),
        _enter_tp(x, "tp_enter_head"),
        _gemm(x, "lm_head", T, v, x.h, saved=x.e * T * x.h / (x.t if x.sp else 1)),
        (ce_fwd + stats, ce_bwd),
    ]
    return _flatten(pairs)


def _layer_params(x: _Dims) -> tuple[int, int]:
    """(elements, tensors) of one layer's parameters on one device (GPT: 12h^2 + 13h at
    t=1; swiglu without biases)."""
    h, t, d = x.h, x.t, x.d
    qkv_out = (x.a + 2 * x.kv) * d // t
    attn = h * qkv_out + qkv_out + (h // t) * h + h
    f = x.f // t
    ffn = 3 * h * f if x.swiglu else h * f + f + f * h + h
    norms = 4 * h
    return attn + ffn + norms, (4 if x.swiglu else 6) + 4 + 2


def _recompute(scenario: Scenario, layer_fwd: tuple[Op, ...]) -> tuple[Op, ...]:
    mode = scenario.parallel.recompute
    if mode == "full":
        ops = layer_fwd
    elif mode == "selective":
        ops = tuple(op for op in layer_fwd if op.name in ATTENTION_CORE)
    else:
        ops = ()
    return tuple(replace(op, phase="recompute", saved_bytes=0.0) if isinstance(op, ComputeSpec)
                 else replace(op, phase="recompute") for op in ops)


def _layer_activation_bytes(scenario: Scenario, x: _Dims, layer_fwd: tuple[Op, ...]) -> float:
    mode = scenario.parallel.recompute
    if mode == "full":
        return float(x.e * x.seq_tokens * x.h)
    if mode == "selective":
        core = ("softmax", "attn_dropout")  # the 5as^2b/t term (scores/context keep Q,K,V)
        return saved_bytes(tuple(op for op in layer_fwd if op.name not in core))
    return saved_bytes(layer_fwd)


def _main_grad(x: _Dims, name: str, params: float) -> tuple[Op, ...]:
    """Mixed precision keeps fp32 main gradients (Micikevicius et al. 2018, Sec. 3.1): after
    each micro-batch's backward the 16-bit weight gradients are added into them (Megatron-LM
    LocalDDP's main_grad.add_, PyTorch AMP's AccumulateGrad): read e, read 4, write 4 bytes
    per parameter. None in fp32 training, where the gradient is the main gradient."""
    if x.e >= 4 or params <= 0:
        return ()
    return (ComputeSpec(name, "elementwise", float(params), (x.e + 8.0) * params, x.dtype,
                        "bwd"),)


def _tp_overlap(scenario: Scenario, software: Software, compute_units: int
                ) -> TpOverlap | None:
    """`parallel.overlap.tp_comm` (auto: the software stack's): each TP collective in
    tensor-degree chunks (Transformer Engine's default ring-exchange method steps once per
    peer), its kernels on software.tp_comm_sms of the compute units."""
    mode = scenario.parallel.overlap.tp_comm
    on = software.tp_comm_overlap if mode == "auto" else mode
    t = scenario.parallel.tensor
    if not on or t <= 1:
        return None
    return TpOverlap(chunks=t, sm_fraction=min(0.5, software.tp_comm_sms / compute_units))


def transformer_program(scenario: Scenario, software: Software | None = None,
                        compute_units: int = 132) -> TransformerProgram:
    """One device's work for one micro-batch of `scenario` (a transformer model). `software`
    is the hardware profile's reference stack: it resolves `model.attention: auto`, says
    whether gradient accumulation into fp32 runs inside the wgrad GEMMs, whether bf16
    gradients are kept and reduced in fp32, and whether TP collectives overlap their GEMMs
    (`compute_units`: the device's SMs / AI cores, for the share the collectives take)."""
    software = software or Software()
    x = _dims(scenario, uses_flash(scenario, software.fused_attention))
    layer_fwd, layer_bwd = _flatten(_attention(x) + _ffn(x))
    embed_fwd, embed_bwd = _embedding(x)
    head_fwd, head_bwd = _head(x)
    params, tensors = _layer_params(x)
    if not software.fused_grad_accumulation:
        layer_bwd += _main_grad(x, "main_grad_add", params)
        embed_bwd += _main_grad(x, "main_grad_add_embed", x.v // x.t * x.h + x.s * x.h)
        head_bwd += _main_grad(x, "main_grad_add_head", 2 * x.h + x.v // x.t * x.h)
    return TransformerProgram(
        layer_fwd=layer_fwd, layer_bwd=layer_bwd,
        layer_recompute=_recompute(scenario, layer_fwd),
        embed_fwd=embed_fwd, embed_bwd=embed_bwd, head_fwd=head_fwd, head_bwd=head_bwd,
        params_per_layer=params, params_embedding=x.v // x.t * x.h + x.s * x.h,
        params_head=2 * x.h, params_output=x.v // x.t * x.h, param_tensors_per_layer=tensors,
        activation_bytes_per_layer=_layer_activation_bytes(scenario, x, layer_fwd),
        embed_activation_bytes=saved_bytes(embed_fwd),
        head_activation_bytes=saved_bytes(head_fwd),
        layer_working_bytes=saved_bytes(layer_fwd),
        boundary_bytes=float(x.e * x.seq_tokens * x.h), dtype=x.dtype,
        grad_elem_bytes=4.0 if software.bf16_grads_fp32 and x.dtype == "bf16" else None,
        tp_overlap=_tp_overlap(scenario, software, compute_units),
    )
