"""Readers of Megatron-Core TransformerConfig names (`model.*_model_parallel_size`,
`model.hidden_dropout` / `attention_dropout`) that a NeMo launcher config and a
Megatron-Bridge ConfigContainer both carry: one reading serves `import nemo` and
`import bridge`."""

from __future__ import annotations

from simulator.config.imports.mindformers_source import MfConfig

__all__ = ["degrees", "read_dropout", "batch_sizes"]

_DEGREES = ("tensor", "pipeline", "context", "expert")


def degrees(cfg: MfConfig, world: int) -> dict[str, int]:
    d = {k: cfg.integer(f"model.{k}_model_parallel_size", 1) or 1 for k in _DEGREES}
    d["context"] = cfg.integer("model.context_parallel_size", 1) or 1
    model = d["tensor"] * d["pipeline"] * d["context"]
    if world % model:
        raise cfg.error("model.tensor_model_parallel_size", f"tensor {d['tensor']} x pipeline "
                        f"{d['pipeline']} x context {d['context']} = {model} does not divide "
                        f"the {world} devices")
    d["data"] = world // model
    if d["data"] * d["context"] % d["expert"]:
        raise cfg.error("model.expert_model_parallel_size", f"{d['expert']} does not divide "
                        f"data x context parallel {d['data'] * d['context']}")
    return d


def read_dropout(cfg: MfConfig) -> float:
    values = []
    for key in ("model.hidden_dropout", "model.attention_dropout"):
        value = cfg.get(key, 0.1)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
            raise cfg.error(key, f"found {value!r}; expected a probability from 0 to 1")
        values.append(float(value))
    if values[0] != values[1]:
        raise cfg.error("model.attention_dropout", f"{values[1]:g} with hidden_dropout "
                        f"{values[0]:g}: the scenario has one dropout probability")
    return values[0]


def batch_sizes(cfg: MfConfig, d: dict[str, int], section: str) -> tuple[int, int]:
    """(global, micro) batch sizes under `section` (NeMo's `model`, Megatron-Bridge's
    `train`): the global one a whole number of micro-batches on every data-parallel rank."""
    micro = cfg.integer(f"{section}.micro_batch_size", 1) or 1
    per_step = micro * d["data"]
    gbs = cfg.integer(f"{section}.global_batch_size", per_step) or per_step
    if gbs % per_step:
        raise cfg.error(f"{section}.global_batch_size", f"{gbs} is not a multiple of "
                        f"micro_batch_size {micro} x data parallel {d['data']} = {per_step}")
    return gbs, micro
