"""A strategy checkpoint (MindSpore's `strategy_ckpt_save_file` / `strategy_ckpt_load_file`,
`mindspore.set_auto_parallel_context`): the plan a search chose, operator by operator, in a
form another run loads back. Each operator's signature is written as the SBP `placements`
of a `type: graph` operator (one placement per mesh axis for each input tensor and for the
output, `out`), so that loading it is writing those placements into the scenario
(`config.scenario.strategy_ckpt`). An operator whose first input's dim 0 is cut into explicit
blocks (a Gather's `manual_split`, `Shard.sizes`) also carries them, `manual_split`: the rows
of each slice, as MindSpore's own checkpoint keeps a manually split parameter's slice shapes
(`ParallelLayouts.param_split_shape` and `indices_offset` of its node_strategy.proto)."""

from __future__ import annotations

from typing import Any

from simulator.sharding.propagate.search import Propagation

__all__ = ["FORMAT", "checkpoint"]

FORMAT = "shardsim strategy checkpoint 1"


def checkpoint(prop: Propagation, scenario: str) -> dict[str, Any]:
    """{format, scenario, mesh, ops: {operator: {input tensor: [placements], out: [...],
    manual_split: [rows, ...] where its first input has explicit blocks}}} of every
    operator of the propagated plan, configured or chosen."""
    ops: dict[str, dict[str, list[Any]]] = {}
    for v, op in enumerate(prop.problem.graph.ops):
        sig = prop.signature(v)
        row: dict[str, list[Any]] = {
            name: [str(p) for p in sig.input_layout(i).placements]
            for i, name in enumerate(op.inputs)}
        row["out"] = [str(p) for p in sig.output_layout.placements]
        blocks = sig.input_layout(0).sizes(0) if op.inputs else ()
        if blocks:
            row["manual_split"] = list(blocks)
        ops[op.name] = row
    return {"format": FORMAT, "scenario": scenario, "mesh": str(prop.problem.mesh),
            "ops": ops}
