"""Pure cost functions: seconds and bytes from specs and a hardware profile. No state, no I/O."""

from simulator.cost.collectives import (
    ALGORITHMS,
    PROTOCOLS,
    Choice,
    busbw_factor,
    choose_algorithm,
    collective_choice,
    collective_cost,
    collective_time_s,
    comm_benchmark,
    link_kind,
    send_recv_time_s,
)
from simulator.cost.compute import compute_time_s, gemm_efficiency
from simulator.cost.specs import COLLECTIVES, CommSpec, ComputeSpec, GroupSpec

__all__ = ["compute_time_s", "gemm_efficiency", "collective_time_s", "collective_cost",
           "collective_choice", "Choice", "PROTOCOLS",
           "choose_algorithm", "send_recv_time_s", "link_kind", "comm_benchmark",
           "busbw_factor", "ALGORITHMS", "COLLECTIVES", "ComputeSpec", "CommSpec", "GroupSpec"]
