"""Small immutable descriptions of work, the currency between the plan, the cost model and the
schedule. A plan (sharding layer) describes one device's share of a layer as a tuple of these;
`cost` prices them; `schedule` strings them into task streams.

Byte conventions follow nccl-tests: `CommSpec.bytes` is the size of the whole buffer the
collective works on (for all_gather the gathered output, for reduce_scatter the input before
scattering, for all_reduce and broadcast the buffer, for all_to_all the send buffer, for
send_recv the message).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ComputeSpec", "CommSpec", "GroupSpec", "Phase", "ComputeKind", "Collective",
           "COLLECTIVES"]

Phase = Literal["fwd", "bwd", "recompute", "optimizer"]
ComputeKind = Literal["gemm", "elementwise", "reduction", "norm", "softmax", "gather",
                      "attention", "optimizer", "copy"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
                     "send_recv"]
COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                "broadcast", "send_recv")


@dataclass(frozen=True)
class ComputeSpec:
    """One kernel on one device: FLOPs, bytes moved to and from memory, and for GEMMs the
    local problem shape (batch x m x k times k x n), which the efficiency model needs.

    `saved_bytes` is what this op keeps alive for the backward pass (activation memory).
    `weight_grad`: the kernel computes (or accumulates) a parameter's gradient and nothing on
    the activation-gradient path reads its output, so a schedule may run it later than the
    rest of the backward (the W pass of Qi et al. 2023, "Zero Bubble Pipeline Parallelism",
    Sec. 2).
    """

    name: str
    kind: ComputeKind
    flops: float
    bytes_accessed: float
    dtype: str
    phase: Phase = "fwd"
    gemm_mnk: tuple[int, int, int] | None = None
    gemm_batch: int = 1
    saved_bytes: float = 0.0
    executed_fraction: float = 1.0  # share of `flops` the kernel really executes (a fused
    #                                 causal attention skips the masked half; its backward
    #                                 recomputes the scores): prices time, not model FLOPs
    grouped: bool = False  # a grouped GEMM (a mixture of experts' expert GEMMs, one kernel
    #                        over their token groups), priced at `grouped_gemm_fraction`
    impl: str = ""  # the kernel implementation where the profile prices them apart (fused
    #                 attention: the framework's fa1 / fa2 / fa3 / cudnn / te); "" = the generic one
    seq: int = 0  # fused attention: the keys each query row runs over (its local key length),
    #               which sets how well the kernel's tiles amortise; 0: not an attention kernel
    head_dim: int = 0  # fused attention: the width of one query/key head, over which each
    #                    score's softmax work amortises; 0: not an attention kernel
    window: int = 0  # fused attention: the sliding window W each query row sees where it is
    #                  shorter than its `seq` keys (its tiles still run over the whole query
    #                  length, W plus one diagonal tile of keys each); 0: none
    weight_grad: bool = False

    def __str__(self) -> str:
        shape = f" {self.gemm_batch}x{self.gemm_mnk}" if self.gemm_mnk else ""
        return f"{self.phase}:{self.name}[{self.kind}{shape}]"


@dataclass(frozen=True)
class GroupSpec:
    """Which devices a collective spans: `size` members, `stride` apart in global rank order,
    on a cluster of `devices_per_node` devices a node. Members of a group whose span
    (size*stride) fits in one node all sit in one node.
    """

    size: int
    stride: int
    devices_per_node: int
    # an all-to-all over the group sends each token once a node and forwards it there over
    # NVLink (DeepEP, `cost.deepep`): the share of the send buffer crossing the NIC; 0: a
    # pairwise exchange of the buffer
    remote_share: float = 0.0

    @property
    def members_per_node(self) -> int:
        if self.size == 1:
            return 1
        if self.stride >= self.devices_per_node:
            return 1
        return max(1, min(self.size, self.devices_per_node // self.stride))

    @property
    def nodes_spanned(self) -> int:
        return -(-self.size // self.members_per_node)

    @property
    def crosses_nodes(self) -> bool:
        return self.nodes_spanned > 1


@dataclass(frozen=True)
class CommSpec:
    """One collective on a mesh axis ('dp', 'tp', 'pp', or a graph mesh axis name)."""

    name: str
    collective: Collective
    bytes: float
    axis: str
    phase: Phase = "fwd"

    def __str__(self) -> str:
        return f"{self.phase}:{self.name}[{self.collective} {self.bytes:.3g}B on {self.axis}]"
