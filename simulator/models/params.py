"""Parameter counts: the one source `run`, the work budget and the planner take them from.

`block_params` counts the parameters a set of operators reads, per device, from a planned
graph's layouts; the program (`program.model_program`) counts its blocks with it, and
`transformer_params` counts a transformer's embedding, layer block and head with it on the
same Megatron plan (`models.transformer_plan.planned_transformer`) for any tensor degree,
which the planner's closed forms and the budget's estimates use instead of formulas of
their own. The closed forms they reduce to are tests: 12h^2 + 13h per GPT layer at t = 1
(Narayanan et al. 2021, Sec. 5.1, Eq. 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from simulator.config.scenario.schema import TransformerModel
from simulator.graph.builders import GptDims
from simulator.models.transformer_plan import planned_transformer, with_moe
from simulator.sharding.plan import ShardingPlan, build_plan

__all__ = ["block_params", "ParamCounts", "transformer_params"]


def block_params(plan: ShardingPlan, select: Callable[[str], bool]) -> tuple[int, int]:
    """(elements per device, tensors) of the parameters the selected operators read."""
    graph = plan.graph
    names = {n for p in plan.ops if select(p.op.name) for n in p.op.inputs
             if graph.tensors[n].kind == "parameter"}
    elems = sum(math.prod(plan.layouts[n].local_shape(graph.tensors[n].shape, plan.mesh))
                for n in names)
    return elems, len(names)


@dataclass(frozen=True)
class ParamCounts:
    """Parameter elements one device holds of a transformer at a tensor degree: the
    embedding (token table, and a learned position table), one block of `block_layers`
    layers (a mixture of experts every k layers repeats in blocks of k), the final norm,
    and the LM-head matrix (tied to the token table: held a second time only on a later
    pipeline stage); `blocks`: copies of the layer block."""

    embedding: int
    layer: int
    head: int
    output: int
    blocks: int
    block_layers: int

    @property
    def per_layer(self) -> float:
        """A block's parameters per model layer."""
        return self.layer / self.block_layers

    @property
    def total(self) -> int:
        """The whole model on one device of the tensor group, the tied table once."""
        return self.embedding + self.blocks * self.layer + self.head


def transformer_params(m: TransformerModel, tensor: int = 1, sequence_parallel: bool = False,
                       expert: int = 1, tensor_nd: tuple[int, ...] | None = None
                       ) -> ParamCounts:
    """`ParamCounts` of transformer `m` under tensor degree `tensor` (2-D / 3-D:
    `tensor_nd`), sequence parallelism and expert degree `expert`, from its planned
    graph's layouts (cached per distinct model and degrees)."""
    return _counts(m.model_dump_json(), tensor, sequence_parallel, expert,
                   tuple(tensor_nd) if tensor_nd else None)


@lru_cache(maxsize=256)
def _counts(model_json: str, tensor: int, sp: bool, expert: int,
            tensor_nd: tuple[int, ...] | None) -> ParamCounts:
    m = TransformerModel.model_validate_json(model_json)
    unit = m.moe.every if m.moe else 1
    swiglu = m.ffn_activation == "swiglu"
    dims = with_moe(GptDims(layers=unit, hidden=m.hidden_size, heads=m.num_heads,
                            kv_heads=m.kv_heads, ffn=m.ffn, seq=m.seq_length,
                            vocab=m.vocab_size, batch=expert, swiglu=swiglu, bias=not swiglu,
                            dropout=m.dropout), m.moe)
    graph, mesh = planned_transformer(dims, expert, tensor, sp, expert, tensor_nd)
    plan = build_plan(graph, mesh, 2)
    prefixes = tuple(f"l{i}." for i in range(unit))
    count = lambda select: block_params(plan, select)[0]  # noqa: E731
    return ParamCounts(embedding=count(lambda n: n.startswith("embed")),
                       layer=count(lambda n: n.startswith(prefixes)),
                       head=count(lambda n: n == "lnf"), output=count(lambda n: n == "head"),
                       blocks=m.layers // unit, block_layers=unit)
