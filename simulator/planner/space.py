"""The search space of a transformer scenario on N devices: every parallel configuration the
model allows, as small frozen values, and the scenario each one stands for.

A configuration fixes the three degrees (data x tensor x pipeline = N: every factorisation
with tensor dividing the attention heads, the key/value heads and the FFN width, and
pipeline x virtual stages dividing the layers, as `scenario.transformer_rules` requires), the
micro-batch size (a divisor of the per-replica batch), the schedule (1f1b, or Megatron-LM's
interleaved 1f1b with v > 1 model chunks, which needs the micro-batch count to be a multiple
of the pipeline degree, Narayanan et al. 2021, Sec. 2.2.2), sequence parallelism (only with
tensor > 1; Korthikanti et al. 2022, Sec. 4.2.2), recompute (none | selective | full),
ZeRO stage (0..3, only with data > 1: with one replica there is nothing to shard) and
ZeRO-Offload of the optimizer states.

Left out on purpose, because they are dominated: GPipe (the same bubble as 1f1b,
Narayanan et al. 2021 Sec. 2.2.1, with all m micro-batches in flight instead of p), and
selective recompute under a fused attention kernel (there is no score matrix to drop, so
it equals `none`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from simulator.config.scenario.comm_rules import keeps_gathered_params, keeps_tensor_outputs
from simulator.config.scenario.rule_helpers import fused_collectives
from simulator.config.scenario.rules import check_rules
from simulator.config.scenario.schema import CommFusionSpec, Scenario, TransformerModel
from simulator.errors import InputError
from simulator.models.transformer import transformer_model

__all__ = ["Config", "SpaceLimits", "enumerate_space", "apply_config", "divisors_of",
           "config_of", "RECOMPUTE"]

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True, order=True)
class Config:
    """One parallel configuration (the `parallel` and `training.micro_batch_size` keys)."""

    data: int
    tensor: int
    pipeline: int
    micro_batch_size: int
    schedule: str = "1f1b"
    virtual_stages: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    optimizer_shard: int = 0
    offload_optimizer: bool = False
    # with offload_optimizer: the states on NVMe (ZeRO-Infinity), not in host memory
    offload_nvme: bool = False

    def __str__(self) -> str:
        sched = (f"il{self.virtual_stages}" if self.schedule == "interleaved_1f1b" else "1f1b")
        parts = [f"d{self.data} t{self.tensor} p{self.pipeline}", f"mb{self.micro_batch_size}",
                 sched]
        if self.sequence_parallel:
            parts.append("sp")
        if self.recompute != "none":
            parts.append(f"rc={self.recompute}")
        if self.optimizer_shard:
            parts.append(f"zero{self.optimizer_shard}")
        if self.offload_optimizer:
            parts.append("offload=nvme" if self.offload_nvme else "offload")
        return " ".join(parts)

    def overrides(self) -> list[str]:
        """The same configuration as `--set KEY=VALUE` items (what `shardsim run` takes)."""
        return [f"parallel.data={self.data}", f"parallel.tensor={self.tensor}",
                f"parallel.pipeline={self.pipeline}",
                f"training.micro_batch_size={self.micro_batch_size}",
                f"parallel.schedule={self.schedule}",
                f"parallel.virtual_stages={self.virtual_stages}",
                f"parallel.sequence_parallel={str(self.sequence_parallel).lower()}",
                f"parallel.recompute={self.recompute}",
                f"parallel.optimizer_shard={self.optimizer_shard}",
                f"parallel.offload.optimizer_states={self.offload_value()}"]

    def offload_value(self) -> str:
        """parallel.offload.optimizer_states as --set writes it: false, true or nvme."""
        return "nvme" if self.offload_nvme else str(self.offload_optimizer).lower()

    def to_dict(self) -> dict[str, object]:
        return {"data": self.data, "tensor": self.tensor, "pipeline": self.pipeline,
                "micro_batch_size": self.micro_batch_size, "schedule": self.schedule,
                "virtual_stages": self.virtual_stages,
                "sequence_parallel": self.sequence_parallel, "recompute": self.recompute,
                "optimizer_shard": self.optimizer_shard,
                "offload_optimizer_states": "nvme" if self.offload_nvme
                else self.offload_optimizer}


@dataclass(frozen=True)
class SpaceLimits:
    """Bounds on the knobs: the largest micro-batch size, the most model chunks per device
    and the highest ZeRO stage that are tried."""

    max_micro_batch: int = 8
    max_virtual_stages: int = 8
    max_optimizer_shard: int = 3


def divisors_of(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _tensor_degrees(m: TransformerModel, devices: int) -> list[int]:
    """Tensor degrees the model allows (scenario.transformer_rules: t | heads, kv heads, FFN
    width and vocabulary)."""
    return [t for t in divisors_of(devices)
            if m.num_heads % t == 0 and m.kv_heads % t == 0 and m.ffn % t == 0
            and m.vocab_size % t == 0]


def _schedules(m: TransformerModel, p: int, micro: int, limits: SpaceLimits
               ) -> Iterator[tuple[str, int]]:
    yield "1f1b", 1
    if p == 1 or micro % p:
        return
    for v in divisors_of(m.layers // p):
        if 1 < v <= limits.max_virtual_stages:
            yield "interleaved_1f1b", v


def _memory_knobs(t: int, d: int, seq: int, flash: bool, max_shard: int, nvme: bool = False
                  ) -> Iterator[tuple[bool, str, int, bool, bool]]:
    sps = (False, True) if t > 1 and seq % t == 0 else (False,)
    recomputes = tuple(r for r in RECOMPUTE if not (flash and r == "selective"))
    shards = range(min(max_shard, 3) + 1) if d > 1 else range(1)
    for sp in sps:
        for rc in recomputes:
            for z in shards:
                # the NVMe tier (ZeRO-Infinity) where the profile has drives, under ZeRO-3
                offs = ((False, False), (True, False), (True, True)) if nvme and z == 3 \
                    else ((False, False), (True, False))
                for off, on_nvme in offs:
                    yield sp, rc, z, off, on_nvme


def _offload_allows(scenario: Scenario, recompute: str, shard: int) -> bool:
    """The scenario's parameter / activation offload runs without recompute, and parameter
    offload without optimizer sharding (scenario.rules `_offload`)."""
    off = scenario.parallel.offload
    if (off.parameters or off.activations) and recompute != "none":
        return False
    return not (off.parameters and shard != 0)


def enumerate_space(scenario: Scenario, devices: int, flash: bool = False,
                    limits: SpaceLimits = SpaceLimits(), nvme: bool = False) -> list[Config]:
    """Every configuration of `scenario`'s model and global batch on `devices` devices, in
    a fixed order. `flash`: attention runs as one fused kernel (drops selective recompute);
    `nvme`: the hardware has NVMe drives, so ZeRO-3 candidates also keep their optimizer
    states there (`parallel.offload.optimizer_states: nvme`)."""
    m = transformer_model(scenario.model)
    gb = scenario.training.global_batch_size
    out = []
    for t in _tensor_degrees(m, devices):
        for p in divisors_of(devices // t):
            d = devices // (t * p)
            if m.layers % p or gb % d:
                continue
            for b in divisors_of(gb // d):
                if b > limits.max_micro_batch:
                    break
                for sched, v in _schedules(m, p, gb // (d * b), limits):
                    for sp, rc, z, off, on_nvme in _memory_knobs(
                            t, d, m.seq_length, flash, limits.max_optimizer_shard, nvme):
                        if _offload_allows(scenario, rc, z):
                            out.append(Config(d, t, p, b, sched, v, sp, rc, z, off, on_nvme))
    return out


def apply_config(scenario: Scenario, cfg: Config, devices_per_node: int | None = None
                 ) -> Scenario:
    """`scenario` run with configuration `cfg` (the cluster resized to its devices, nodes of
    `devices_per_node`, default the scenario's). Validated as a scenario file would be."""

    per_node = devices_per_node or scenario.cluster.devices_per_node
    if not isinstance(cfg, Config):  # a generic.GenericConfig: its own --set items
        return cfg.apply(scenario, per_node)
    devices = cfg.data * cfg.tensor * cfg.pipeline
    per_node = min(per_node, devices)
    data = scenario.model_dump()
    cluster = {"nodes": max(1, devices // per_node), "devices_per_node": per_node}
    same = cluster == {"nodes": scenario.cluster.nodes,
                       "devices_per_node": scenario.cluster.devices_per_node}
    if not scenario.cluster.uniform and not same:

        raise InputError(scenario.source, "cluster", "node_types, slow and jitter describe "
                         f"this cluster's {scenario.cluster.devices} devices; a plan on "
                         f"{devices} devices in nodes of {per_node} cannot keep them (plan "
                         f"on the scenario's own devices and nodes, or remove them)")
    # the same cluster keeps its device kinds, stragglers and jitter
    data["cluster"] = data["cluster"] if same else cluster
    data["training"]["micro_batch_size"] = cfg.micro_batch_size
    par = data["parallel"]
    par.update(data=cfg.data, tensor=cfg.tensor, pipeline=cfg.pipeline, schedule=cfg.schedule,
               virtual_stages=cfg.virtual_stages, sequence_parallel=cfg.sequence_parallel,
               recompute=cfg.recompute, optimizer_shard=cfg.optimizer_shard)
    par["offload"] = {**par["offload"], "optimizer_states":
                      "nvme" if cfg.offload_nvme else cfg.offload_optimizer}
    if "comm_subgraph" not in scenario.parallel.model_fields_set:
        del par["comm_subgraph"]  # unset stays unset (comm_rules refuses it on one device)
    _comm_options_for(par, cfg, scenario)
    out = Scenario.model_validate(data)
    check_rules(out)
    return out


def _comm_options_for(par: dict[str, Any], cfg: Config, scenario: Scenario) -> None:
    """MindSpore's communication options act on what a candidate may not have: the kept
    collective outputs of a recomputed region, the re-gather of sharded parameters under full
    recompute, an all-to-all (the MoE dispatch); a candidate without it keeps the default
    (scenario.comm_rules refuses the option where it has nothing to act on)."""
    rc = par["recompute_comm"]
    if not keeps_tensor_outputs(cfg.recompute):
        rc["tensor"] = True
    if not keeps_gathered_params(cfg.recompute, cfg.optimizer_shard, cfg.data):
        rc["optimizer"] = True
    if scenario.model.moe_spec() is None:
        par["enable_alltoall"] = True
    _fusion_for(par, cfg.optimizer_shard)


def _fusion_for(par: dict[str, Any], shard: int) -> None:
    """`parallel.comm_fusion` as a candidate of ZeRO stage `shard` can use it: the entries
    of a collective that stage does not run are dropped, and under ZeRO-3 (one unit at a
    time, nothing to fuse) a size or index rule becomes the default (scenario.rules
    refuses both where a scenario file states them)."""
    fusion = par["comm_fusion"]
    for kind, ok in fused_collectives(shard).items():
        if not ok:
            fusion[kind] = None
    if shard == 3 and fusion["mode"] != "auto":
        par["comm_fusion"] = CommFusionSpec().model_dump()


def config_of(scenario: Scenario) -> Config:
    """The configuration a scenario file states."""
    p = scenario.parallel
    return Config(p.data, p.tensor, p.pipeline, scenario.training.micro_batch_size,
                  p.schedule, p.virtual_stages, p.sequence_parallel, p.recompute,
                  p.optimizer_shard, bool(p.offload.optimizer_states),
                  p.offload.optimizer_on_nvme)
