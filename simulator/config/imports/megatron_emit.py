"""A scenario as a Megatron-LM launch (`shardsim plan --emit megatron`, issue 27): the
`torchrun ... pretrain_gpt.py` arguments that describe it, checked by importing them back
(`megatron.import_megatron`): a key the arguments cannot say is an error naming it, never a
launch that runs something else than what was simulated."""

from __future__ import annotations

from typing import Any

from simulator.config.imports.megatron import import_megatron
from simulator.config.imports.megatron_pattern import pattern_text
from simulator.config.imports.megatron_source import read_source
from simulator.config.scenario.load import parse_scenario
from simulator.errors import InputError

__all__ = ["emit_megatron", "resolved"]

_ATTENTION = {"auto": [], "flash": ["--use-flash-attn"], "cudnn": ["--attention-backend fused"],
              "standard": ["--attention-backend unfused"]}


def _vocab(m: Any, tp: int) -> list[str]:
    """`--vocab-size` with the padding that leaves it as it is."""
    for multiple in (128, 1):
        if m.vocab_size % (multiple * tp) == 0:
            return [f"--vocab-size {m.vocab_size}", f"--make-vocab-size-divisible-by {multiple}"]
    return [f"--vocab-size {m.vocab_size}"]  # the check below names model.vocab_size


def _model(s: Any) -> list[str]:
    m = s.model
    args = [f"--num-layers {m.layers}", f"--hidden-size {m.hidden_size}",
            f"--num-attention-heads {m.num_heads}",
            f"--ffn-hidden-size {m.ffn_hidden_size or 4 * m.hidden_size}",
            f"--seq-length {m.seq_length}", f"--max-position-embeddings {m.seq_length}",
            *_vocab(m, s.parallel.tensor)]
    if m.num_kv_heads is not None and m.num_kv_heads != m.num_heads:
        args += ["--group-query-attention", f"--num-query-groups {m.num_kv_heads}"]
    if m.ffn_activation != "gelu":
        args.append({"swiglu": "--swiglu", "relu2": "--squared-relu"}[m.ffn_activation])
    args += _shape(m)
    args += {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp8": ["--bf16", "--fp8-format hybrid"],
             "fp32": []}[m.dtype]
    args += [f"--hidden-dropout {m.dropout!r}", f"--attention-dropout {m.dropout!r}"]
    args += _ATTENTION.get(m.attention, [])
    if m.moe is not None:
        args += [f"--num-experts {m.moe.experts}", f"--moe-router-topk {m.moe.top_k}"]
        if m.moe.capacity_factor is not None:  # absent: dropless, Megatron's default
            args.append(f"--moe-expert-capacity-factor {m.moe.capacity_factor!r}")
        if m.moe.every > 1 or m.moe.first_dense:
            freq = pattern_text(m.layers, m.moe.first_dense, m.moe.every)
            args.append(f"--moe-layer-freq '{freq}'")
    return args


def _shape(m: Any) -> list[str]:
    """The head, positions and norm as resolved by architecture (`TransformerModel.tied`,
    `positions`, `norm_kind`), in Megatron-LM's flags."""
    args = [] if m.tied else ["--untie-embeddings-and-output-weights"]
    args.append("--position-embedding-type " + {"learned": "learned_absolute", "rope": "rope",
                                                 "none": "none"}[m.positions])
    if m.positions == "rope" and m.rope_theta != 10000.0:
        args.append(f"--rotary-base {m.rope_theta!r}")
    args.append("--normalization " + ("RMSNorm" if m.norm_kind == "rmsnorm" else "LayerNorm"))
    if m.head_dim is not None and m.head_dim != m.hidden_size // m.num_heads:
        args.append(f"--kv-channels {m.head_dim}")
    return args


def _training(s: Any) -> list[str]:
    t = s.training
    args = [f"--micro-batch-size {t.micro_batch_size}",
            f"--global-batch-size {t.global_batch_size}"]
    args += {"adam": ["--optimizer adam"], "momentum": ["--optimizer sgd"],
             "sgd": ["--optimizer sgd", "--sgd-momentum 0"]}[t.optimizer]
    if t.fp8_params:
        args.append("--fp8-param-gather")
    if t.fp8_scaling == "mxfp8":
        args.append("--fp8-recipe mxfp8")
    if t.cuda_graphs.impl != "none":
        args.append(f"--cuda-graph-impl {t.cuda_graphs.impl}")
        if t.cuda_graphs.scope:
            args.append(f"--cuda-graph-scope {' '.join(t.cuda_graphs.scope)}")
    return args


def _uneven(p: Any) -> list[str]:
    """`--decoder-first/last-pipeline-num-layers` of a `pipeline_layers` split (each rank's
    layers, chunk c of rank r being virtual stage c x PP + r); a split they cannot say is
    left to the import-back check, which names parallel.pipeline_layers."""
    if not p.pipeline_layers or p.pipeline < 2:
        return []
    chunks = len(p.pipeline_layers) // p.pipeline
    ranks = [sum(p.pipeline_layers[c * p.pipeline + r] for c in range(chunks))
             for r in range(p.pipeline)]
    return [f"--decoder-first-pipeline-num-layers {ranks[0]}",
            f"--decoder-last-pipeline-num-layers {ranks[-1]}"]


def _recompute(p: Any) -> list[str]:
    return {"none": [], "selective": ["--recompute-granularity selective"],
            "full": ["--recompute-granularity full", "--recompute-method uniform",
                     "--recompute-num-layers 1"]}[p.recompute]


def _parallel(s: Any, tp_comm_default: bool) -> list[str]:
    p = s.parallel
    args = [f"--tensor-model-parallel-size {p.tensor}",
            f"--pipeline-model-parallel-size {p.pipeline}"]
    args += [f"--{k}-parallel-size {v}" for k, v in (("context", p.context),
                                                     ("expert-model", p.expert)) if v > 1]
    if p.schedule == "interleaved_1f1b" and p.virtual_stages > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {p.virtual_stages}")
    args += _uneven(p)
    if p.sequence_parallel:
        args.append("--sequence-parallel")
    if p.optimizer_shard == 1:
        args.append("--use-distributed-optimizer")
    args += _recompute(p)
    if p.recompute_slice_activation:
        args.append("--distribute-saved-activations")
    if p.overlap.grad_reduce:
        args.append("--overlap-grad-reduce")
    if p.optimizer_shard and p.overlap.param_gather:
        args.append("--overlap-param-gather")
    tp_comm = tp_comm_default if p.overlap.tp_comm == "auto" else p.overlap.tp_comm
    if tp_comm and p.tensor > 1 and p.sequence_parallel:
        args.append("--tp-comm-overlap")
    if p.overlap.moe_a2a:
        args += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    if getattr(s.model, "moe", None) is not None:  # Megatron-LM's default is allgather
        args += ["--moe-token-dispatcher-type alltoall"] if p.expert_dispatcher == "alltoall" \
            else ["--moe-token-dispatcher-type flex",
                  f"--moe-flex-dispatcher-backend {p.expert_dispatcher}"]
    if p.comm_fusion.mode == "size":
        grad = 2 if s.model.dtype == "fp16" else 4  # fp32 gradients of bf16 (and fp8)
        args.append(f"--ddp-bucket-size {round(p.comm_fusion.bucket_mb * 1e6 / grad)}")
    return args


def resolved(section: Any) -> dict[str, Any]:
    """A scenario section's keys, a transformer's head, positions and norm as resolved by
    its architecture (a key left to its default and the same value stated are the same)."""
    out = section.model_dump()
    if "tie_embeddings" in out:
        out.update(tie_embeddings=section.tied, position=section.positions,
                   norm=section.norm_kind)
    return out


def _differences(want: Any, got: Any) -> list[str]:
    out = []
    for section in ("model", "training", "parallel", "cluster"):
        a = resolved(getattr(want, section))
        b = resolved(getattr(got, section))
        out += [f"{section}.{k}" for k in a if a[k] != b[k]]
    if want.framework != got.framework:
        out.append("framework")
    return out


def emit_megatron(scenario: Any, framework: str, tp_comm_default: bool) -> str:
    """The launch script of `scenario` (validated; it runs on the stack `framework`, whose
    `overlap.tp_comm: auto` is `tp_comm_default`); InputError naming the keys no Megatron-LM
    argument says."""
    c = scenario.cluster
    args = _model(scenario) + _training(scenario) + _parallel(scenario, tp_comm_default)
    text = "\n".join([
        f"# Megatron-LM launch of {scenario.name} (written by shardsim plan --emit megatron;",
        "# --vocab-size stands for the tokenizer: give yours with the paths of your data)",
        f"torchrun --nnodes {c.nodes} --nproc-per-node {c.devices_per_node} pretrain_gpt.py \\",
        *[f"    {a} \\" for a in args[:-1]], f"    {args[-1]}", ""])
    back = import_megatron(read_source(text, "<emitted>"), scenario.hardware, framework,
                           tp_comm_default)
    got = parse_scenario(dict(back.scenario), "<emitted>")
    wanted = scenario.model_copy(update={"framework": scenario.framework or framework})
    left = _differences(wanted, got)
    if left:
        raise InputError(scenario.source, left[0], "no Megatron-LM argument says it as the "
                         f"plan has it (keys Megatron-LM cannot express: {', '.join(left)})")
    return text
