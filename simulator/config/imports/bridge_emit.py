"""A scenario as Megatron-Bridge overrides (`shardsim plan --emit bridge`, alias `nemo`;
issue 27): the dotted Hydra-style `KEY=VALUE` overrides of a Megatron-Bridge ConfigContainer
(`python scripts/training/run_recipe.py --recipe NAME OVERRIDES`) that describe it, checked
by importing them back (`bridge.import_bridge`): a key the overrides cannot say is an error
naming it, never a launch that runs something else than what was simulated."""

from __future__ import annotations

from typing import Any

from simulator.config.imports.bridge import import_bridge
from simulator.config.imports.bridge_source import parse_bridge
from simulator.config.imports.megatron_emit import resolved
from simulator.config.scenario.load import parse_scenario
from simulator.errors import InputError

__all__ = ["emit_bridge", "BRIDGE_STACKS"]

# the stacks whose runs Bridge overrides describe: Megatron-Bridge itself (what `import
# bridge` gives) and NeMo (`--emit nemo`: its current launch), read back on the same stack
BRIDGE_STACKS = ("megatron-bridge", "nemo")

_PRECISION = {"bf16": ["mixed_precision.bf16=true"], "fp16": ["mixed_precision.fp16=true"],
              "fp32": [],
              "fp8": ["mixed_precision.bf16=true", "mixed_precision.fp8=hybrid",
                      "mixed_precision.first_last_layers_bf16=false"]}


def _model(m: Any) -> list[str]:
    out = [f"model.num_layers={m.layers}", f"model.hidden_size={m.hidden_size}",
           f"model.ffn_hidden_size={m.ffn_hidden_size or 4 * m.hidden_size}",
           f"model.num_attention_heads={m.num_heads}",
           f"model.num_query_groups={m.num_kv_heads or m.num_heads}",
           f"model.seq_length={m.seq_length}", f"dataset.sequence_length={m.seq_length}",
           f"model.vocab_size={m.vocab_size}",
           "model.normalization=" + ("RMSNorm" if m.norm_kind == "rmsnorm" else "LayerNorm"),
           f"model.gated_linear_unit={str(m.ffn_activation == 'swiglu').lower()}",
           "model.activation_func=torch.nn.functional." + {
               "swiglu": "silu", "gelu": "gelu", "relu2": "squared_relu"}[m.ffn_activation],
           "model.position_embedding_type=" + {"rope": "rope", "learned": "learned_absolute"}
           .get(m.positions, str(m.positions)),
           f"model.share_embeddings_and_output_weights={str(bool(m.tied)).lower()}",
           f"model.hidden_dropout={m.dropout!r}", f"model.attention_dropout={m.dropout!r}"]
    if m.positions == "rope":
        out.append(f"model.rotary_base={m.rope_theta!r}")
    return out + _PRECISION[m.dtype]


def _fp8_params(s: Any) -> list[str]:
    """An fp8 model's scaling recipe and FP8 weights (Bridge's fp8_param_gather, which keeps
    fp8_param equal; with MXFP8 Bridge asserts its all-gather reuses the gradient buffer)."""
    if s.model.dtype != "fp8":
        return []
    t = s.training
    mx = t.fp8_scaling == "mxfp8"
    return [f"mixed_precision.fp8_recipe={'mxfp8' if mx else 'tensorwise'}",
            f"mixed_precision.fp8_param_gather={str(t.fp8_params).lower()}",
            *(["mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=true"]
              if mx and t.fp8_params else [])]


def _parallel(s: Any, tp_comm_default: bool) -> list[str]:
    p, t = s.parallel, s.training
    vp = p.virtual_stages if p.schedule == "interleaved_1f1b" and p.virtual_stages > 1 \
        else "null"
    shard = str(p.optimizer_shard == 1).lower()
    out = [f"model.tensor_model_parallel_size={p.tensor}",
           f"model.pipeline_model_parallel_size={p.pipeline}",
           f"model.virtual_pipeline_model_parallel_size={vp}",
           f"model.context_parallel_size={p.context}",
           f"model.expert_model_parallel_size={p.expert}",
           f"model.sequence_parallel={str(p.sequence_parallel).lower()}",
           f"train.global_batch_size={t.global_batch_size}",
           f"train.micro_batch_size={t.micro_batch_size}", "optimizer.optimizer=adam",
           f"optimizer.use_distributed_optimizer={shard}",
           f"ddp.use_distributed_optimizer={shard}"]
    out += {"none": ["model.recompute_granularity=null"],
            "selective": ["model.recompute_granularity=selective"],
            "full": ["model.recompute_granularity=full", "model.recompute_method=uniform",
                     "model.recompute_num_layers=1"]}[p.recompute]
    if p.recompute == "selective" and p.recompute_modules:
        out.append(f"model.recompute_modules=[{','.join(p.recompute_modules)}]")
    if p.tensor > 1:
        tp_comm = tp_comm_default if p.overlap.tp_comm == "auto" else p.overlap.tp_comm
        out.append(f"comm_overlap.tp_comm_overlap={str(bool(tp_comm)).lower()}")
    if p.expert_dispatcher != "alltoall":  # Bridge's MoE providers: alltoall
        out += ["model.moe_token_dispatcher_type=flex",
                f"model.moe_flex_dispatcher_backend={p.expert_dispatcher}"]
    g = t.cuda_graphs
    if g.impl != "none":  # Megatron-Core's cuda_graph_impl / cuda_graph_scope
        out += [f"model.cuda_graph_impl={g.impl}",
                f"model.cuda_graph_scope=[{','.join(g.scope)}]"]
    return out


def _differences(want: Any, got: Any) -> list[str]:
    out = []
    for section in ("model", "training", "parallel", "cluster"):
        a, b = resolved(getattr(want, section)), resolved(getattr(got, section))
        out += [f"{section}.{k}" for k in a if a[k] != b[k]]
    return out + (["framework"] if want.framework != got.framework else [])


def _wanted(scenario: Any, framework: str, tp_comm_default: bool) -> Any:
    """`scenario` as its import back states it: its stack named, a tensor-parallel overlap
    equal to the stack's left `auto`."""
    p = scenario.parallel
    if p.overlap.tp_comm == tp_comm_default or p.tensor == 1:
        overlap = p.overlap.model_copy(update={"tp_comm": "auto"})
        p = p.model_copy(update={"overlap": overlap})
    return scenario.model_copy(update={"framework": scenario.framework or framework,
                                       "parallel": p})


def emit_bridge(scenario: Any, framework: str, tp_comm_default: bool) -> str:
    """The overrides of `scenario` (validated; its stack `framework`, whose `overlap.tp_comm:
    auto` is `tp_comm_default`); InputError naming the keys no Bridge override says."""
    c = scenario.cluster
    lines = [f"# Megatron-Bridge overrides of {scenario.name} (written by shardsim plan --emit "
             "bridge;", f"# {c.nodes} node(s) x {c.devices_per_node} GPUs: torchrun --nnodes "
             f"{c.nodes} --nproc-per-node {c.devices_per_node} scripts/training/run_recipe.py "
             "--recipe NAME with these; add your data and tokenizer)",
             *_model(scenario.model), *_fp8_params(scenario),
             *_parallel(scenario, tp_comm_default)]
    text = "\n".join(lines) + "\n"
    stack = framework if framework in BRIDGE_STACKS else BRIDGE_STACKS[0]
    try:
        back = import_bridge(parse_bridge(text, "<emitted>"), scenario.hardware, c.nodes,
                             c.devices_per_node, framework=stack)
        got = parse_scenario(dict(back.scenario), "<emitted>")
    except InputError as err:
        raise InputError(scenario.source, "model" if err.key.startswith("model.") else
                         "parallel", f"no Megatron-Bridge override says it ({err.message})"
                         ) from None
    left = _differences(_wanted(scenario, framework, tp_comm_default), got)
    if left:
        raise InputError(scenario.source, left[0], "no Megatron-Bridge override says it as "
                         f"the plan has it (keys Bridge cannot express: {', '.join(left)})")
    return text
