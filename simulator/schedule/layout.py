"""Where each rank sits: Megatron-LM's rank order (tensor fastest, then data, then pipeline),
the communication groups of each axis, and which devices a simulation runs.

rank = stage * (t * d) + dp_rank * t + tp_rank, so the tensor-parallel group has stride 1,
the data-parallel group stride t, and consecutive pipeline stages are t * d ranks apart
(Narayanan et al. 2021, Sec. 3.3: tensor parallelism inside a node, pipeline across).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.specs import GroupSpec
from simulator.scenario.schema import Scenario

__all__ = ["Layout", "layout_of"]


@dataclass(frozen=True)
class Layout:
    """The parallel degrees and node size of a scenario, with rank arithmetic."""

    tensor: int
    data: int
    pipeline: int
    chunks: int  # model chunks per device (virtual_stages of interleaved_1f1b)
    devices_per_node: int
    extra_groups: tuple[tuple[str, GroupSpec], ...] = ()  # an operator graph's mesh axes

    @property
    def devices(self) -> int:
        return self.tensor * self.data * self.pipeline

    @property
    def virtual_stages(self) -> int:
        return self.pipeline * self.chunks

    def groups(self) -> dict[str, GroupSpec]:
        """GroupSpec of each mesh axis ('tp', 'dp', 'pp', and an operator graph's axes)."""
        n, t, d = self.devices_per_node, self.tensor, self.data
        return {"tp": GroupSpec(t, 1, n), "dp": GroupSpec(d, t, n),
                "pp": GroupSpec(self.pipeline, t * d, n), **dict(self.extra_groups)}

    def rank(self, stage: int, dp_rank: int = 0, tp_rank: int = 0) -> int:
        return stage * self.tensor * self.data + dp_rank * self.tensor + tp_rank

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(stage, dp_rank, tp_rank) of a global rank."""
        stage, rest = divmod(rank, self.tensor * self.data)
        dp_rank, tp_rank = divmod(rest, self.tensor)
        return stage, dp_rank, tp_rank

    def same_node(self, a: int, b: int) -> bool:
        return a // self.devices_per_node == b // self.devices_per_node

    def stage_of_virtual(self, vs: int) -> int:
        return vs % self.pipeline

    def simulated(self, fidelity: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(simulated ranks, how many real devices each stands for). 'representative' runs
        rank (stage, 0, 0) of each stage for all t*d devices of that stage, which behave
        identically: same work, and collectives costed for their whole group."""
        if fidelity == "full":
            return tuple(range(self.devices)), (1,) * self.devices
        reps = tuple(self.rank(i) for i in range(self.pipeline))
        return reps, (self.tensor * self.data,) * self.pipeline


def layout_of(scenario: Scenario, extra_groups: tuple[tuple[str, GroupSpec], ...] = ()
              ) -> Layout:
    p = scenario.parallel
    chunks = p.virtual_stages if p.schedule == "interleaved_1f1b" else 1
    return Layout(tensor=p.tensor, data=p.data, pipeline=p.pipeline, chunks=chunks,
                  devices_per_node=scenario.cluster.devices_per_node,
                  extra_groups=extra_groups)
