"""Where each rank sits: ONE named-axis device mesh for the whole cluster, the pipeline axis
`pp` outermost, then the model's own mesh (`dp`, `tp` for transformers, mlp and resnet; an
operator graph's declared axes). Rank order is row-major (`sharding.mesh.Mesh`), which for
(pp, dp, tp) is Megatron-LM's: tensor fastest, then data, then pipeline (Narayanan et al.
2021, Sec. 3.3: tensor parallelism inside a node, pipeline across).

Each axis's communication group, and so the links it crosses, follows from the mesh: an axis
of `size` devices `mesh.stride(axis)` ranks apart on nodes of `devices_per_node`
(`cost.specs.GroupSpec`). A new parallel axis (expert, context) is one more mesh axis here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.config.scenario.schema import Scenario
from simulator.cost.deepep import remote_share
from simulator.cost.specs import GroupSpec
from simulator.lower.dualpipe import mirror_stage
from simulator.sharding.mesh import Mesh

__all__ = ["RankMesh", "rank_mesh", "transformer_mesh"]

PIPELINE_AXIS = "pp"


@dataclass(frozen=True)
class RankMesh:
    """The cluster's device mesh with rank arithmetic. `data_axis` names the axis whose
    gradient reduction the lowering buckets and overlaps (None: reduced with the others, as
    part of the program's gradient synchronisation)."""

    mesh: Mesh
    chunks: int  # model chunks per device (virtual_stages of interleaved_1f1b; 2 DualPipe)
    devices_per_node: int
    data_axis: str | None = "dp"
    # DualPipe: virtual stage p + s is model stage s of the reverse direction, on device
    # p - 1 - s (`lower.dualpipe`)
    mirrored: bool = False
    # DeepEP's dispatcher (`parallel.expert_dispatcher: deepep`): the share of an expert
    # all-to-all's buffer crossing the NIC (cost.deepep); 0: a pairwise exchange
    ep_remote_share: float = 0.0

    def size(self, axis: str | None) -> int:
        return dict(self.mesh.axes).get(axis, 1) if axis else 1

    @property
    def pipeline(self) -> int:
        return self.size(PIPELINE_AXIS)

    @property
    def data(self) -> int:
        return self.size(self.data_axis)

    @property
    def devices(self) -> int:
        return self.mesh.size

    @property
    def virtual_stages(self) -> int:
        return self.pipeline * self.chunks

    def groups(self) -> dict[str, GroupSpec]:
        """GroupSpec of every mesh axis, by name."""
        return {name: GroupSpec(size, self.mesh.stride(a), self.devices_per_node,
                                self.ep_remote_share if name == "ep" else 0.0)
                for a, (name, size) in enumerate(self.mesh.axes)}

    def stage(self, rank: int) -> int:
        return self.mesh.coords(rank)[0]

    def with_stage(self, rank: int, stage: int) -> int:
        """The rank of pipeline stage `stage` with the same coordinates on every other axis."""
        coords = list(self.mesh.coords(rank))
        coords[0] = stage
        return self.mesh.rank(tuple(coords))

    def except_axis(self, rank: int, axis: str | None) -> tuple[int, ...]:
        """The rank's coordinates on every axis but `axis`: what the members of one
        `axis` group share."""
        names = self.mesh.names
        return tuple(c for n, c in zip(names, self.mesh.coords(rank)) if n != axis)

    def same_node(self, a: int, b: int) -> bool:
        return a // self.devices_per_node == b // self.devices_per_node

    def stage_of_virtual(self, vs: int) -> int:
        if self.mirrored:
            return mirror_stage(vs, self.pipeline)
        return vs % self.pipeline

    def simulated(self, fidelity: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(simulated ranks, how many real devices each stands for). 'representative' runs
        the first rank of each stage for all devices of that stage, which behave
        identically: same work, and collectives costed for their whole group."""
        if fidelity == "full":
            return tuple(range(self.devices)), (1,) * self.devices
        per_stage = self.devices // self.pipeline
        return (tuple(s * per_stage for s in range(self.pipeline)),
                (per_stage,) * self.pipeline)


def transformer_mesh(scenario: Scenario) -> Mesh:
    """A transformer's model mesh: (dp, tp), with 2-D tensor parallel (dp, tpx, tpy) (the
    x * y grid of `parallel.tensor_nd`, tpy fastest: its groups are consecutive ranks, the
    ones a node holds first), with 3-D tensor parallel (dp, tpx, tpy, tpz) (tpz fastest:
    the weight axis, whose all-gathers move every layer's weights), with context parallel
    (dp, cp, tp), or for a mixture of experts (dp, ep, tp) with data = dp * ep, expert
    ranks contiguous inside each data-parallel group (Megatron-Core's order tp-cp-ep-dp-pp,
    megatron/core/parallel_state.py)."""
    p = scenario.parallel
    if p.tensor_nd is not None and len(p.tensor_nd) == 3:
        x, y, z = p.tensor_nd
        return Mesh.of(dp=p.data, tpx=x, tpy=y, tpz=z)
    if p.tensor_nd is not None:
        x, y = p.tensor_nd
        return Mesh.of(dp=p.data, tpx=x, tpy=y)
    if p.context > 1:
        return Mesh.of(dp=p.data, cp=p.context, tp=p.tensor)
    if scenario.model.moe_spec() is None:
        return Mesh.of(dp=p.data, tp=p.tensor)
    return Mesh.of(dp=p.data // p.expert_axis, ep=p.expert_axis, tp=p.tensor)


def rank_mesh(scenario: Scenario, model_mesh: Mesh | None = None) -> RankMesh:
    """The cluster mesh of a scenario: (pp, dp, tp) or (pp, dp, ep, tp), or pp around an
    operator graph's mesh (whose `dp` axis the lowering reduces only when `parallel.data` >
    1). With experts the lowering's bucketed reduction runs on `dp` (the experts'
    data-parallel group); the dense gradients' reduction over `ep` is part of the
    program's gradient synchronisation."""
    p = scenario.parallel
    chunks = p.virtual_stages if p.schedule == "interleaved_1f1b" else 1
    mirrored = p.schedule == "dualpipe"
    if mirrored:
        chunks = 2  # a stage of each direction
    if model_mesh is None:
        model_mesh = transformer_mesh(scenario)
        data_axis: str | None = "dp"
    else:
        data_axis = "dp" if p.data > 1 and "dp" in model_mesh.names else None
    mesh = Mesh(((PIPELINE_AXIS, p.pipeline),) + model_mesh.axes)
    ranks = RankMesh(mesh, chunks, scenario.cluster.devices_per_node, data_axis, mirrored)
    return replace(ranks, ep_remote_share=_ep_remote_share(scenario, ranks))


def _ep_remote_share(scenario: Scenario, ranks: RankMesh) -> float:
    """The NIC share of an expert all-to-all under DeepEP (`cost.deepep`), over the nodes
    the `ep` group spans; 0 for the pairwise exchange or a group inside one node."""
    moe = getattr(scenario.model, "moe", None)
    if scenario.parallel.expert_dispatcher != "deepep" or moe is None or "ep" not in \
            ranks.mesh.names:
        return 0.0
    group = ranks.groups()["ep"]
    nodes = group.nodes_spanned
    if nodes <= 1:
        return 0.0
    return remote_share(moe.experts, moe.top_k, nodes, moe.groups, moe.group_top_k)
