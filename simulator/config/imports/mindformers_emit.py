"""A scenario as a MindFormers run config (`shardsim plan --emit mindformers`, issue 27): the
YAML of a Llama model with its parallel_config, parallel context, recompute_config and
runner_config, checked by importing it back (`mindformers.import_mindformers`): a key the
config cannot say is an error naming it, never a launch that runs something else than what
was simulated."""

from __future__ import annotations

from typing import Any

import yaml

from simulator.config.imports.megatron_emit import resolved
from simulator.config.imports.mindformers import import_mindformers
from simulator.config.imports.mindformers_source import parse_mf
from simulator.config.scenario.load import parse_scenario
from simulator.errors import InputError

__all__ = ["emit_mindformers"]

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _model(m: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "type": "LlamaConfig", "seq_length": m.seq_length, "hidden_size": m.hidden_size,
        "num_layers": m.layers, "num_heads": m.num_heads, "vocab_size": m.vocab_size,
        "intermediate_size": m.ffn_hidden_size or 4 * m.hidden_size,
        "theta": m.rope_theta, "compute_dtype": _DTYPES.get(m.dtype, m.dtype),
        "param_init_type": _DTYPES.get(m.param_dtype or m.dtype, m.dtype),
        "use_flash_attention": m.attention != "standard",
        "tie_word_embeddings": bool(m.tied)}
    if m.num_kv_heads is not None and m.num_kv_heads != m.num_heads:
        config["n_kv_heads"] = m.num_kv_heads
    if m.dtype == "fp8":
        config["compute_dtype"] = "fp8"  # no MindFormers dtype: the check names model.dtype
    return {"model_config": config, "arch": {"type": "LlamaForCausalLM"}}


def _parallel(s: Any) -> dict[str, Any]:
    p, t = s.parallel, s.training
    steps = t.global_batch_size // (t.micro_batch_size * p.data)
    out: dict[str, Any] = {
        "runner_config": {"batch_size": t.micro_batch_size,
                          "gradient_accumulation_steps": 1 if p.pipeline > 1 else steps},
        "parallel": {"parallel_mode": 1, "enable_parallel_optimizer": p.optimizer_shard > 0,
                     "parallel_optimizer_config": {
                         "parallel_optimizer_threshold": int(p.optimizer_threshold_kb)}},
        "parallel_config": {"data_parallel": p.data, "model_parallel": p.tensor,
                            "pipeline_stage": p.pipeline, "context_parallel": p.context,
                            "use_seq_parallel": p.sequence_parallel,
                            "micro_batch_num": steps if p.pipeline > 1 else 1},
        "recompute_config": {"recompute": p.recompute == "full",
                             "select_recompute": p.recompute == "selective",
                             "recompute_slice_activation": p.recompute_slice_activation}}
    if p.expert > 1:
        out["parallel_config"]["expert_parallel"] = p.expert
    return out


def _differences(want: Any, got: Any) -> list[str]:
    out = []
    for section in ("model", "training", "parallel", "cluster"):
        a, b = resolved(getattr(want, section)), resolved(getattr(got, section))
        out += [f"{section}.{k}" for k in a if a[k] != b[k]]
    return out + (["framework"] if want.framework != got.framework else [])


def emit_mindformers(scenario: Any, framework: str) -> str:
    """The run config of `scenario` (validated; its stack `framework`); InputError naming
    the keys no MindFormers config says."""
    c = scenario.cluster
    data = {"run_mode": "train", "optimizer": {"type": "FP32StateAdamWeightDecay"},
            "use_parallel": True, "context": {"mode": 0},
            **_parallel(scenario), "model": _model(scenario.model)}
    if scenario.parallel.schedule == "interleaved_1f1b":
        data["model"]["model_config"]["pp_interleave_num"] = scenario.parallel.virtual_stages
    head = (f"# MindFormers run config of {scenario.name} (written by shardsim plan --emit "
            f"mindformers;\n# {c.nodes} node(s) x {c.devices_per_node} devices; add your "
            "dataset, tokenizer and callbacks)\n")
    text = head + yaml.safe_dump(data, sort_keys=False)
    try:
        back = import_mindformers(parse_mf(text, "<emitted>"), scenario.hardware, c.nodes,
                                  c.devices_per_node)
        got = parse_scenario(dict(back.scenario), "<emitted>")
    except InputError as err:
        raise InputError(scenario.source, "model" if err.key.startswith("model.") else
                         "parallel", f"no MindFormers config says it ({err.message})") from None
    wanted = scenario.model_copy(update={"framework": scenario.framework or framework})
    left = _differences(wanted, got)
    if left:
        raise InputError(scenario.source, left[0], "no MindFormers config key says it as the "
                         f"plan has it (keys MindFormers cannot express: {', '.join(left)})")
    return text
