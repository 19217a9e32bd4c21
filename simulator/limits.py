"""How much work a command may do: the default limits, an estimate of work (count, the
key that drives it, why), the refusal when an estimate is over its limit, and the work
estimates of sharding propagation. The estimates of a whole run or verify, which read the
scenario, are `simulator.simulation.budget`'s."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import InputError

__all__ = ["Estimate", "check_budget", "estimate_signatures", "estimate_propagation",
           "DEFAULT_MAX_EVENTS", "DEFAULT_MAX_VERIFY_DEVICES", "DEFAULT_MAX_VERIFY_GFLOP",
           "DEFAULT_MAX_VERIFY_GB", "DEFAULT_MAX_LAYOUT_PAIRS", "DEFAULT_MAX_SIGNATURES"]

# 5e5 events simulate in 10-20 s on one core (issue 13: 4.4e6 events in 135 s; 1.7e6 in
# 59 s for gpt3-175b-1024-a100 --fidelity full on a loaded 2-core machine)
DEFAULT_MAX_EVENTS = 500_000
# numpy devices of `verify`: each holds its own blocks of every tensor and runs every kernel;
# 512 data-parallel devices take about a minute (benchmarks/verify_speed.py)
DEFAULT_MAX_VERIFY_DEVICES = 1024
# matrix GFLOP `verify` executes for an operator graph (forward and backward, the sharded run
# and the single-device reference; a graph is run at the shapes it gives, not shrunk): float64
# numpy reaches about 15 GFLOP/s on one core at best (benchmarks/verify_speed.py)
DEFAULT_MAX_VERIFY_GFLOP = 20
# GB of tensors `verify` holds for an operator graph (`estimate_verify_gb`): a graph of
# elementwise operators on large tensors has no matrix GFLOP but ran out of memory after
# two minutes (issue 25); the bundled graphs need at most 0.1 GB
DEFAULT_MAX_VERIFY_GB = 4
# Layouts sharding propagation's searches may visit (`estimate_propagation`): seed (c) on 16
# devices (a 2x2x2x2 mesh) counts 5.0e5 and propagates in about 2.3 s of CPU; on 32 (five
# axes) 9.9e6, and ran over a minute in 1.2 GB (issue 13)
DEFAULT_MAX_LAYOUT_PAIRS = 1_000_000
# N-D signatures it enumerates first (`estimate_signatures`), about 9 us each: seed (c)
# counts 1.3e4 on 16 devices, 6.6e5 on 64 (six axes, 5.9 s)
DEFAULT_MAX_SIGNATURES = 200_000


@dataclass(frozen=True)
class Estimate:
    """`count` units of work (events or devices), the key that drives it and why."""

    count: int
    key: str
    detail: str


def estimate_signatures(mesh_key: tuple[str, str], per_axis: list[int],
                        mesh_shape: tuple[int, ...]) -> Estimate:
    """N-D signatures sharding propagation enumerates (`rules.signatures`): each
    unconfigured op's one-axis signatures (`per_axis`) to the power of the mesh axes.
    `mesh_key`: the key that sets the mesh, and the mesh in words."""
    key, why = mesh_key
    count = sum(n ** len(mesh_shape) for n in per_axis)
    return Estimate(count, key, f"{why}: each of {len(per_axis)} operators' one-axis "
                    f"signatures to the power {len(mesh_shape)}")


def estimate_propagation(mesh_key: tuple[str, str], sources: dict[tuple[int, ...], int],
                         mesh_shape: tuple[int, ...]) -> Estimate:
    """Layouts the redistribution searches of sharding propagation may visit
    (`planner/propagate.py`, `sharding/redistribute.py`): one search per distinct source
    layout of each tensor shape (`sources`, `propagate.search_sources`), each visiting at
    most the (r + 2)^k layouts of a rank-r tensor on k mesh axes of more than one device
    (B, P or a split of one of its dims on each axis). Both factors grow with the number
    of mesh axes, which the device count sets (one axis per prime factor) unless
    model.mesh names them."""
    k = sum(1 for n in mesh_shape if n > 1)
    count = sum(n * (len(sh) + 2) ** k for sh, n in sources.items())
    key, why = mesh_key
    return Estimate(count, key, f"{why}: {k} axes of more than one device; "
                    f"{sum(sources.values()):,} searches over the tensors' (rank + 2)^{k} "
                    "layouts")


def check_budget(est: Estimate, limit: int, source: str, unit: str, flag: str) -> None:
    """InputError when `est` exceeds `limit`, saying the estimate, its driver and the flag."""
    if est.count <= limit:
        return
    raise InputError(source, est.key, f"about {est.count:,} {unit} "
                     f"({est.detail}), above the limit of {limit:,}; change {est.key} or "
                     f"raise the limit with {flag} {est.count}")
