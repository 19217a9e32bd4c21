"""A scenario as a torchtitan job config (`shardsim plan --emit torchtitan`, issue 27): the
TOML of the 2025 schema (`[model]`, `[training]`, `[parallelism]`, `[activation_checkpoint]`)
that describes it, checked by importing it back (`torchtitan.import_torchtitan`): a key the
job config cannot say is an error naming it, never a launch that runs something else than
what was simulated."""

from __future__ import annotations

from typing import Any

from simulator.config.imports.megatron_emit import resolved
from simulator.config.imports.torchtitan import import_torchtitan
from simulator.config.imports.torchtitan_model import FLAVORS, ffn_width
from simulator.config.imports.torchtitan_pipeline import SCHEDULES
from simulator.config.imports.torchtitan_source import parse_toml
from simulator.config.scenario.load import parse_scenario
from simulator.errors import InputError

__all__ = ["emit_torchtitan"]

_SHAPE = ("layers", "hidden_size", "num_heads", "ffn_hidden_size", "vocab_size", "rope_theta")


def _flavor(scenario: Any) -> tuple[str, str]:
    """The torchtitan model name and flavour whose shape the scenario's model has."""
    m = scenario.model
    for name, table in FLAVORS.items():
        for flavor, a in table.items():
            want = (a["n_layers"], a["dim"], a["n_heads"], ffn_width(a), a["vocab_size"],
                    a["rope_theta"])
            if tuple(getattr(m, k, None) for k in _SHAPE) == want:
                return name, flavor
    flavours = ", ".join(f"{n} {f}" for n, t in FLAVORS.items() for f in t)
    raise InputError(scenario.source, "model", "no torchtitan flavour has this model's shape "
                     f"(layers, hidden_size, heads, FFN, vocabulary, RoPE base); flavours: "
                     f"{flavours}")


def _lines(scenario: Any) -> list[str]:
    s, p, t = scenario, scenario.parallel, scenario.training
    name, flavor = _flavor(s)
    dp_key = "data_parallel_shard_degree" if p.optimizer_shard == 3 else \
        "data_parallel_replicate_degree"
    out = ["[model]", f'name = "{name}"', f'flavor = "{flavor}"']
    if s.model.dtype == "fp8":
        out.append('converters = ["float8"]')
    # the local batch: one micro-batch a step without a pipeline (gradient accumulation up
    # to the global batch), all of a rank's micro-batches with one
    local = t.global_batch_size // p.data if p.pipeline > 1 else t.micro_batch_size
    out += ["", "[optimizer]", 'name = "AdamW"', "", "[training]",
            f"local_batch_size = {local}",
            f"global_batch_size = {t.global_batch_size}", f"seq_len = {s.model.seq_length}",
            'mixed_precision_param = "%s"' % ("float32" if s.model.dtype == "fp32"
                                              else "bfloat16"),
            "", "[parallelism]", f"{dp_key} = {p.data}",
            f"tensor_parallel_degree = {p.tensor}",
            f"pipeline_parallel_degree = {p.pipeline}",
            f"context_parallel_degree = {p.context}"]
    if p.expert > 1:
        out.append(f"expert_parallel_degree = {p.expert}")
    if p.tensor > 1 and p.overlap.tp_comm is True:
        out.append("enable_async_tensor_parallel = true")
    if p.pipeline > 1:
        schedule = {v: k for k, v in SCHEDULES.items()}.get(p.schedule, p.schedule)
        out += [f'pipeline_parallel_schedule = "{schedule}"',
                f"pipeline_parallel_microbatch_size = {t.micro_batch_size}"]
    mode = {"none": '"none"', "full": '"full"', "selective": '"selective"'}[p.recompute]
    out += ["", "[activation_checkpoint]", f"mode = {mode}"]
    if p.recompute == "selective":
        out.append('selective_ac_option = "op"')
    if s.model.dtype == "fp8" and t.fp8_params:
        out += ["", "[quantize.linear.float8]", "enable_fsdp_float8_all_gather = true"]
    return out


def _differences(want: Any, got: Any) -> list[str]:
    out = []
    for section in ("model", "training", "parallel", "cluster"):
        a, b = resolved(getattr(want, section)), resolved(getattr(got, section))
        out += [f"{section}.{k}" for k in a if a[k] != b[k]]
    return out + (["framework"] if want.framework != got.framework else [])


def emit_torchtitan(scenario: Any, framework: str) -> str:
    """The job config of `scenario` (validated; its stack `framework`); InputError naming
    the keys no torchtitan job config says."""
    c = scenario.cluster
    text = "\n".join([
        f"# torchtitan job config of {scenario.name} (written by shardsim plan --emit "
        "torchtitan;",
        f"# launch on {c.nodes} node(s) x {c.devices_per_node} GPUs: torchrun --nnodes "
        f"{c.nodes} --nproc-per-node {c.devices_per_node} -m torchtitan.train "
        "--job.config_file THIS_FILE)", "", *_lines(scenario), ""])
    toml = parse_toml(text, "<emitted>")
    back = import_torchtitan(toml, scenario.hardware, c.nodes, c.devices_per_node)
    got = parse_scenario(dict(back.scenario), "<emitted>")
    wanted = scenario.model_copy(update={"framework": scenario.framework or framework})
    left = _differences(wanted, got)
    if left:
        raise InputError(scenario.source, left[0], "no torchtitan job-config key says it as "
                         f"the plan has it (keys torchtitan cannot express: {', '.join(left)})")
    return text
