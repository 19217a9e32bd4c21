"""What a model family gives the rest of shardsim (`models.registry.FAMILIES`), and the
verification case a family shrinks a scenario into."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.graph.graph import Graph
from simulator.sharding.mesh import Mesh

__all__ = ["ModelFamily", "VerifyCase"]


@dataclass(frozen=True, eq=False)
class VerifyCase:
    """`sharded`: the graph of one micro-batch (global across data parallel) with its
    strategies, on `mesh`; `whole`: the graph of the global batch for the single-device
    reference; `micro_reference`: one micro-batch unsharded; `notes`: how the scenario was
    shrunk."""

    sharded: Graph
    whole: Graph
    micro_reference: Graph
    mesh: Mesh
    micro_batches: int
    notes: tuple[str, ...]
    dtype: type
    # True: each micro-batch is `whole` with data of its own (an operator graph's
    # parallel.micro_batches), and the reference accumulates them on one device
    separate: bool = False
    # multi-copy of an operator graph: `sharded` and `micro_reference` hold 1/slices of the
    # batch of `whole`; each reference batch runs sharded as its `slices` slices, one after
    # another, gradients summed (`models.multicopy`)
    slices: int = 1


@dataclass(frozen=True)
class ModelFamily:
    """One `model.type`.

    layered: its program repeats one block per layer (`program.model_program`'s transformer
        program); else its program is the operator graph cut into units.
    unplanned(scenario, batch): its operator graph for `batch` samples, no strategies.
    written(scenario): (graph with the strategies the family builds in or the scenario
        writes, mesh); None where the plan comes from the sharding algebra (`case`).
    unit_start(op name): the operator starts a new unit (a block the pipeline and
        recompute cut at); the others join the unit before.
    case(scenario, fused_attention): its own verification case (shrunk where large); None:
        the operator graph as planned (`models.cases`).
    writes_ops: the scenario lists the operators (and their batch is in their input
        tensors' shapes, not `training.micro_batch_size`).
    block_layers(model): model layers one repeated block of its program stands for (a
        mixture of experts every k layers repeats in blocks of k).
    """

    name: str
    layered: bool
    unplanned: Callable[[Any, int], Graph]
    unit_start: Callable[[str], bool]
    written: Callable[[Any], tuple[Graph, Mesh]] | None = None
    case: Callable[[Any, bool], VerifyCase] | None = None
    writes_ops: bool = False
    block_layers: Callable[[Any], int] = lambda model: 1
