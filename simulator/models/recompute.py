"""What is recomputed: the choice `run` times and `verify` executes (the costs are
`program.recompute_policy` and `program.graph_recompute`).

Transformers: which ops of a layer `parallel.recompute` drops after the forward and runs
again before the backward, by the stack's policy:
- `full`: every op of the layer (Megatron-LM --recompute-granularity full; PyTorch
  checkpoint_wrapper around each block).
- `selective`, policy `attention_core`: the attention core (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", Sec. 5; Megatron's
  --recompute-granularity selective).
- `selective`, policy `every_second_mm`: torchtitan's op-level selective checkpointing
  (pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py, `_custom_policy`:
  "Saves output of all compute ops, except every second mm"): the outputs of the matmuls
  counted 1, 3, 5, ... in forward order and of the fused attention (SDPA) are kept; every
  other op runs again.

Operator graphs (mlp, resnet, `type: graph`): `parallel.recompute: full` checkpoints at the
unit boundaries (Chen et al. 2016, arXiv 1604.06174, Sec. 3 and Alg. 1; a `type: graph`
model's blocks are its cells, the operators sharing a dotted name prefix, as MindSpore's
`Cell.recompute()` on every cell); `attrs.recompute: true` on an operator (MindSpore
`Primitive.recompute()`) re-runs that operator before the first backward that reads its
output. Consecutive recomputed operators form one run; a run whose re-run would make
nothing the backward reads is left out (or refused).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.models.opgraph import graph_model
from simulator.models.registry import family

__all__ = ["Select", "SelectivePolicy", "CORE_ROLES", "MODULE_ROLES", "DISCARDING",
           "discarding", "MM_ORDER",
           "layer_role",
           "saved_mms", "recomputed_ops", "Recomputed", "Recomputing", "recomputing",
           "recomputed", "verify_runs"]

Select = Callable[[str], bool]
SelectivePolicy = Literal["attention_core", "every_second_mm"]
CORE_ROLES = ("scores", "scale", "mask", "softmax", "attn_drop", "context", "attn")
# the layer's matmuls in forward order (the GPT graph's op roles); fc3_mm only when gated
MM_ORDER = ("q_mm", "k_mm", "v_mm", "proj", "fc1_mm", "fc3_mm", "fc2")
# kernels (ComputeSpec names) of those matmuls; q, k and v share the fused `qkv` kernel
def layer_role(name: str) -> str:
    """A name without its layer prefix (`l3.ln1.g` -> `ln1.g`)."""
    return re.sub(r"^l\d+\.", "", name)


def saved_mms(gated: bool) -> frozenset[str]:
    order = [r for r in MM_ORDER if gated or r != "fc3_mm"]
    return frozenset(r for i, r in enumerate(order) if i % 2 == 0)


# Megatron-Core's fine-grained recompute modules (TransformerConfig.recompute_modules,
# megatron/core/transformer/transformer_config.py) as the GPT graph's op roles: core_attn
# checkpoints the attention core; layernorm ("the input_layernorm and pre_mlp_layernorm"),
# mla_up_proj ("the MLA up projection and RoPE applying parts": in
# multi_latent_attention.py the latent q/kv layernorms run inside it, before the up
# projections) and moe_act ("the MoE MLP activation function"; here the shared experts'
# too, as DeepSeek-V3 recomputes "the SwiGLU operator in MoE", arXiv:2412.19437 Sec. 3.3.3)
# are output-discarding: their outputs are not kept, made again before the backward
MODULE_ROLES: dict[str, frozenset[str]] = {
    "core_attn": frozenset(CORE_ROLES),
    "layernorm": frozenset({"ln1", "ln2"}),
    "mla_up_proj": frozenset({"q_norm", "kv_norm", "q_nope", "q_rope_mm", "q_rope", "q_cat",
                              "k_rope", "k_nope", "v_up", "k_cat"}),
    "moe_act": frozenset({"eact", "eglu", "sact", "sglu"}),
}
DISCARDING = ("layernorm", "mla_up_proj", "moe_act")  # output-discarding checkpointing


def discarding(modules: Sequence[str]) -> list[str]:
    """The output-discarding ones of `modules` (`DISCARDING`)."""
    return [m for m in modules if m in DISCARDING]


def recomputed_ops(mode: str, policy: SelectivePolicy = "attention_core",
                   gated: bool = False, modules: Sequence[str] | None = None
                   ) -> Select | None:
    """The GPT graph's ops (by name) recomputed under `mode` and the stack's selective
    `policy` (`gated`: the MLP has a gate matrix, SwiGLU), or under `selective` the
    `modules` (`parallel.recompute_modules`, `MODULE_ROLES`) where given; None for
    `none`."""
    def layer(n: str) -> bool:
        return re.match(r"l\d+\.", n) is not None

    if mode == "full":
        return layer
    if mode == "selective" and modules is not None:
        roles = frozenset().union(*(MODULE_ROLES[m] for m in modules))
        return lambda n: layer(n) and layer_role(n) in roles
    if mode == "selective" and policy == "every_second_mm":
        kept = saved_mms(gated) | {"attn"}
        return lambda n: layer(n) and layer_role(n) not in kept
    if mode == "selective":
        return lambda n: layer(n) and layer_role(n) in CORE_ROLES
    return None


@dataclass(frozen=True)
class Recomputed:
    """The recomputed operators (by name) and the run each belongs to (a run re-runs
    together: under `full` a unit, or a `type: graph` model's cell; per operator, a chain
    of consecutive recomputed operators)."""

    run_of: dict[str, int]

    def __contains__(self, name: object) -> bool:
        return name in self.run_of


@dataclass(frozen=True)
class Recomputing:
    """What a scenario recomputes: every operator (`full`) or the `chosen` ones
    (`attrs.recompute`); `scenario` for `parallel.recompute_comm`."""

    full: bool
    chosen: frozenset[str]
    scenario: Scenario

    def ops(self, graph: Graph, units: Sequence[Sequence[str]],
            stage_of: dict[str, int] | None = None) -> Recomputed:
        """The recomputed operators of `graph` (its `units` in order) and their runs:
        consecutive recomputed operators of one block (`full`: a unit, or a `type: graph`
        model's cell; per operator: any) on one pipeline stage (`stage_of`), keeping only
        the runs whose re-run makes something the backward reads (`_useful`)."""
        names = [o for u in units for o in u]
        if self.full:
            chosen = frozenset(names)
            graph_cells = self.scenario.model.type == "graph"
            block = {op: _cell(op) if graph_cells else u
                     for u, ns in enumerate(units) for op in ns}
        else:
            chosen, block = self.chosen, {}
        run_of: dict[str, int] = {}
        run, before = -1, None
        for op in names:
            key = (block.get(op), None if stage_of is None else stage_of[op])
            if op in chosen:
                if before is None or before[0] not in chosen or before[1] != key:
                    run += 1
                run_of[op] = run
            before = (op, key)
        kept = _useful(graph, run_of)
        if not kept or (not self.full and len(kept) < len(run_of)):
            raise InputError(self.scenario.source, *self._inert(run_of, kept))
        return Recomputed(kept)

    def _inert(self, run_of: dict[str, int], kept: dict[str, int]) -> tuple[str, str]:
        """(key, message) of a recompute that would make nothing the backward reads."""
        if self.full:
            return "parallel.recompute", (
                f"full finds nothing to recompute in this model of type "
                f"'{self.scenario.model.type}': no block's re-run would make a tensor its "
                f"backward reads (its operators keep only their inputs from other blocks; "
                f"allowed: none, or attrs.recompute: true on the operators whose outputs "
                f"are kept)")
        ops = getattr(self.scenario.model, "ops", ())
        i, op = next((i, op) for i, op in enumerate(ops)
                     if op.name in run_of and op.name not in kept)
        return f"model.ops[{i}].attrs.recompute", (
            f"true: no operator's backward reads what {op.name} makes (it is kept by no "
            f"one, or by a recomputed operator of another run), so its re-run would change "
            f"nothing (allowed: false)")


def _cell(op: str) -> str:
    """The cell an operator of a `type: graph` model belongs to: its dotted name's prefix
    (`ffn.mapping` -> `ffn`, MindSpore's parameter and operator naming by cell path), or
    the operator itself."""
    return op.rsplit(".", 1)[0] if "." in op else op


def _useful(graph: Graph, run_of: dict[str, int]) -> dict[str, int]:
    """`run_of` without the runs whose re-run would make nothing the backward reads: a run
    is kept when it drops a tensor some operator saves (`OpFamily.saves`; dropped: no
    recomputed operator of another run keeps it, the storage rule of `recompute_saved`).
    Extras alone (a softmax's probabilities) do not count: re-making them would store the
    inputs they are made from instead. Repeated until no run is left out (leaving one out
    can make another's outputs dropped or kept)."""
    made = {op.output: op.name for op in graph.ops}
    keepers: dict[str, list[str]] = {}
    for op in graph.ops:
        idx = op.family.saves if op.family.saves is not None else range(len(op.inputs))
        for i in idx:
            name = op.output if i == -1 else op.inputs[i]
            if name in made and graph.tensors[name].kind == "activation":
                keepers.setdefault(name, []).append(op.name)
    while True:
        keep: set[int] = set()
        for name, ks in keepers.items():
            r = run_of.get(made[name])
            if r is not None and not any(run_of.get(k, r) != r for k in ks):
                keep.add(r)
        out = {op: r for op, r in run_of.items() if r in keep}
        if len(out) == len(run_of):
            return out
        run_of = out


def recomputing(scenario: Scenario) -> Recomputing | None:
    """What an operator graph scenario recomputes; None where nothing."""
    m = scenario.model
    chosen = frozenset(op.name for op in graph_model(m).ops
                       if op.attrs.get("recompute") is True) \
        if family(m).writes_ops else frozenset()
    full = scenario.parallel.recompute == "full"
    return Recomputing(full, chosen, scenario) if full or chosen else None


def recomputed(scenario: Scenario, graph: Graph, units: Sequence[Sequence[str]],
               stage_of: dict[str, int] | None = None) -> Recomputed | None:
    """The operators `scenario` recomputes (None: none), `Recomputing.ops`."""
    how = recomputing(scenario)
    return None if how is None else how.ops(graph, units, stage_of)


def verify_runs(names: Sequence[str], consumers: dict[str, tuple[str, ...]],
                outputs: dict[str, str], rc: Recomputed,
                stage_of: dict[str, int] | None = None
                ) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """{op index that triggers a re-run: (the run's op indices, the indices of operators
    outside it whose saved inputs the re-run refreshes)} for `numeric.execute.Recompute`:
    the run re-runs before the backward of its last operator, or earlier where a
    non-recomputed operator on the same stage reads its output (per-operator recompute:
    the output was not stored; runs one operator triggers re-run together, in order).
    `names`: the operators in plan order; `consumers`:
    {tensor: operators reading it}; `outputs`: {operator: its output tensor}."""
    index = {n: k for k, n in enumerate(names)}
    runs: dict[int, list[int]] = {}
    for n in names:
        if n in rc:
            runs.setdefault(rc.run_of[n], []).append(index[n])
    out: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for members in runs.values():
        stage = None if stage_of is None else stage_of[names[members[0]]]
        readers = sorted({index[c] for k in members for c in consumers.get(
            outputs[names[k]], ()) if c not in rc
            and (stage_of is None or stage_of[c] == stage)})
        at = max([members[-1], *readers])
        before = out.get(at, ((), ()))  # runs one reader triggers re-run together
        out[at] = (tuple(sorted((*before[0], *members))),
                   tuple(sorted({*before[1], *readers})))
    return out
