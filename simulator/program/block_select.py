"""Which of the planned graph's operators make each Block of a transformer's program
(`program.model_program`): the selection of a block by operator name, the parameters it
reads, the gradient reductions it owns, the parameters gathered before use in its backward,
and the representative layers of each group of the layer plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from simulator.cost.specs import CommSpec
from simulator.graph.graph import Graph
from simulator.models.layers import LayerPlan
from simulator.models.params import block_params, param_names
from simulator.program.program import Op
from simulator.sharding.lower import param_gathers
from simulator.sharding.plan import ShardingPlan

__all__ = ["Select", "SelectedBlock", "gathered_params", "group_blocks", "head_elements",
           "small_params", "sync_steps"]

Select = Callable[[str], bool]


@dataclass(frozen=True)
class SelectedBlock:
    """Ops of one block (by name) and how they are selected."""

    select: Select

    def params(self, plan: ShardingPlan, graph: Graph) -> tuple[int, int]:
        """(local elements, tensors) of the parameters the block's ops read."""
        return block_params(plan, self.select)


def sync_steps(plan: ShardingPlan, steps: tuple[CommSpec, ...], select: Select,
          besides: Select | None = None) -> tuple[CommSpec, ...]:
    """The gradient reductions (`steps`, from `gradient_steps`) of the parameters the
    selected ops read, except those `besides` also reads (a tied LM head's table is the
    embedding's: reduced once, with it)."""
    params = param_names(plan, select) - (param_names(plan, besides) if besides else set())
    return tuple(c for c in steps if c.name.split(".grad.")[0] in params
                 or c.name.rsplit(".", 1)[0] in params)


def gathered_params(plan: ShardingPlan, blocks: dict[str, tuple[Select, Select | None]],
                     bwd: dict[str, tuple[Op, ...]], steps: tuple[CommSpec, ...]
                     ) -> tuple[dict[str, tuple[Op, ...]], tuple[CommSpec, ...]]:
    """Parameters kept split on an axis and gathered before use (`TensorDef.gathered`: 3-D
    tensor parallel's weight axis) in each block's backward: all-gathered again before it
    (the forward's gathered copies are not kept, so weights stay 1/(x*y*z) per device) and
    their gradients reduce-scattered there after it, every micro-batch, as Colossal-AI's
    `_Linear3D.backward` does (colossalai/legacy/nn/layer/parallel_3d/_operation.py) and
    `numeric.execute` runs them. `blocks`: name -> (its ops, ops whose parameters another
    block reduces). Returns (backward per block, the gradient steps left for once per
    iteration)."""
    axes = {a for t in plan.graph.of_kind("parameter") for a in t.gathered}
    if not axes:
        return bwd, steps
    out = dict(bwd)
    for name, (select, besides) in blocks.items():
        reduced = tuple(replace(c, name=f"{c.name}.per_micro_batch")
                        for c in sync_steps(plan, steps, select, besides) if c.axis in axes)
        out[name] = param_gathers(plan, select) + bwd[name] + reduced
    return out, tuple(c for c in steps if c.axis not in axes)


def head_elements(plan: ShardingPlan, head: SelectedBlock, embed: SelectedBlock) -> tuple[int, int]:
    """(elements of the head's own parameters, of those it shares with the embedding: a
    tied LM head's table)."""
    return (block_params(plan, head.select, embed.select)[0],
            block_params(plan, head.select, embed.select, shared=True)[0])


def small_params(plan: ShardingPlan, select: Select, small: dict[str, int],
                 besides: Select | None = None) -> int:
    """Elements of the `small` parameters read by the selected ops (except those the ops
    `besides` selects read too)."""
    names = param_names(plan, select) - (param_names(plan, besides) if besides else set())
    return sum(small[n] for n in names if n in small)


def prefixed(prefixes: tuple[str, ...]) -> Select:
    return lambda n: n.startswith(prefixes)


def group_blocks(lp: LayerPlan) -> dict[str, SelectedBlock]:
    """The ops of each group of the layer plan in its representative graph, by block name:
    `layer` for a model of one group (every layer alike, or a mixture of experts every k
    layers: its k - 1 dense layers and the MoE layer that ends it), `layer0`, `layer1`, ...
    in the order the groups first come otherwise."""
    out = {}
    for i, (group, first) in enumerate(lp.groups):
        prefixes = tuple(f"l{j}." for j in range(first, first + len(group)))
        name = "layer" if len(lp.groups) == 1 else f"layer{i}"
        out[name] = SelectedBlock(prefixed(prefixes))
    return out
