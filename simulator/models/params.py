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
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from simulator.config.scenario.schema import TransformerModel
from simulator.graph.decoder import LayerKind
from simulator.models.layers import layer_kinds, layer_plan
from simulator.models.transformer_plan import model_dims, planned_transformer
from simulator.sharding.placement import Shard
from simulator.sharding.plan import ShardingPlan, build_plan

__all__ = ["block_params", "expert_params", "param_names", "embed_op", "head_op", "ParamCounts",
           "transformer_params"]

_LAYER = re.compile(r"l\d+\.")


def embed_op(name: str) -> bool:
    """An operator of a transformer's embedding (`graph.builders.build_gpt`: `embed*`)."""
    return name.startswith("embed")


def head_op(name: str) -> bool:
    """An operator of a transformer's head: after its last layer (neither the embedding's
    nor a layer's `lN.*`)."""
    return not embed_op(name) and _LAYER.match(name) is None


def param_names(plan: ShardingPlan, select: Callable[[str], bool]) -> set[str]:
    """The parameters the selected operators read."""
    return {n for p in plan.ops if select(p.op.name) for n in p.op.inputs
            if plan.graph.tensors[n].kind == "parameter"}


def block_params(plan: ShardingPlan, select: Callable[[str], bool],
                 besides: Callable[[str], bool] | None = None, shared: bool = False
                 ) -> tuple[int, int]:
    """(elements per device, tensors) of the parameters the selected operators read; with
    `besides`, of those the operators it selects do not read (`shared`: of those they read
    too, a tied LM head's table)."""
    graph = plan.graph
    names = param_names(plan, select)
    if besides is not None:
        other = param_names(plan, besides)
        names = names & other if shared else names - other
    elems = sum(math.prod(plan.layouts[n].local_shape(graph.tensors[n].shape, plan.mesh))
                for n in names)
    return elems, len(names)


def expert_params(plan: ShardingPlan, select: Callable[[str], bool]) -> int:
    """Elements per device of the parameters the selected operators read that are split on
    the expert-parallel axis `ep` (a mixture of experts' expert FFNs); 0 without one."""
    if "ep" not in plan.mesh.names:
        return 0
    axis = plan.mesh.axis_index("ep")
    tensors = plan.graph.tensors
    return sum(math.prod(plan.layouts[n].local_shape(tensors[n].shape, plan.mesh))
               for n in param_names(plan, select)
               if isinstance(plan.layouts[n].placements[axis], Shard))


@dataclass(frozen=True)
class ParamCounts:
    """Parameter elements one device holds of a transformer at a tensor degree: the
    embedding (token table, and a learned position table), its layers (`layers_params`, all
    of them; `layer`: one group of `block_layers` layers of its layer plan, the largest
    where the groups differ, `models.layers`), the head's own (the final norm, and an
    output matrix of its own), and the LM-head matrix tied to the token table (held a
    second time only on a later pipeline stage); `blocks`: groups of the layer plan in the
    model."""

    embedding: int
    layer: int
    head: int
    output: int
    blocks: int
    block_layers: int
    layers_params: int

    @property
    def per_layer(self) -> float:
        """The layers' parameters per model layer."""
        return self.layers_params / (self.blocks * self.block_layers)

    @property
    def total(self) -> int:
        """The whole model on one device of the tensor group, the tied table once."""
        return self.embedding + self.layers_params + self.head


def _prefixed(prefixes: tuple[str, ...]) -> Callable[[str], bool]:
    return lambda n: n.startswith(prefixes)


def transformer_params(m: TransformerModel, tensor: int = 1, sequence_parallel: bool = False,
                       expert: int = 1, tensor_nd: tuple[int, ...] | None = None
                       ) -> ParamCounts:
    """`ParamCounts` of transformer `m` under tensor degree `tensor` (2-D / 3-D:
    `tensor_nd`), sequence parallelism and expert degree `expert`, from its planned
    graph's layouts (cached per distinct model and degrees)."""
    return _counts(type(m), m.model_dump_json(), tensor, sequence_parallel, expert,
                   tuple(tensor_nd) if tensor_nd else None)


@lru_cache(maxsize=256)
def _counts(cls: type[TransformerModel], model_json: str, tensor: int, sp: bool, expert: int,
            tensor_nd: tuple[int, ...] | None) -> ParamCounts:
    m = cls.model_validate_json(model_json)
    lp = layer_plan(layer_kinds(m))
    # one copy of each group of the layer plan, in a row (a layer's parameters do not
    # depend on its neighbours)
    kinds: tuple[LayerKind, ...] = sum((g for g, _ in lp.groups), ())
    graph, mesh = planned_transformer(model_dims(m, kinds, expert), expert, tensor, sp, expert,
                                      tensor_nd)
    plan = build_plan(graph, mesh, 2)
    own, at = [], 0
    for g, _ in lp.groups:
        prefixes = tuple(f"l{i}." for i in range(at, at + len(g)))
        own.append(block_params(plan, _prefixed(prefixes))[0])
        at += len(g)
    return ParamCounts(embedding=block_params(plan, embed_op)[0], layer=max(own),
                       head=block_params(plan, head_op, embed_op)[0],
                       output=block_params(plan, head_op, embed_op, shared=True)[0],
                       blocks=m.layers // lp.unit, block_layers=lp.unit,
                       layers_params=sum(own[i] * n for i, n in lp.runs))
