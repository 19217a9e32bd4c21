"""The cheapest change that makes a scenario fit (for `run --strict`): in device memory, and in
host memory or on the NVMe drives where it offloads there.

Each candidate is one `--set` of the memory levers the frameworks offer: shard the optimizer
states (ZeRO stages 1-3, Rajbhandari et al. 2020, sec. 5), offload them to the host, recompute
activations (Korthikanti et al. 2022, sec. 4), or trade data parallelism for more tensor or
pipeline parallelism (Narayanan et al. 2021, sec. 3). Every candidate that is a valid
scenario is simulated; the one that fits with the shortest iteration is the cheapest.
"""

from __future__ import annotations

from typing import Any

from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.report import summary
from simulator.simulation.budget import estimate_run
from simulator.simulation.simulate import simulate

__all__ = ["candidates", "cheapest_remedy"]

_MAX_EVENTS = 1_000_000


def candidates(scenario: Any) -> list[list[str]]:
    """The `--set` lists to try, each changing one lever."""
    p = scenario.parallel
    out: list[list[str]] = []
    if p.data > 1:
        out += [[f"parallel.optimizer_shard={k}"] for k in range(p.optimizer_shard + 1, 4)]
    if not p.offload.optimizer_states or p.offload.optimizer_on_nvme:
        out.append(["parallel.offload.optimizer_states=true"])
    levels = ["none", "selective", "full"]
    out += [[f"parallel.recompute={r}"] for r in levels[levels.index(p.recompute) + 1:]]
    if p.data % 2 == 0:
        out.append([f"parallel.tensor={p.tensor * 2}", f"parallel.data={p.data // 2}"])
        out.append([f"parallel.pipeline={p.pipeline * 2}", f"parallel.data={p.data // 2}"])
    return out


def _try(loaded: Any, hw: Any, sets: list[str], fidelity: str) -> tuple[float, float] | None:
    """(iteration seconds, peak bytes) with `sets` applied, when it is valid and fits."""
    data = loaded.scenario.model_dump(exclude={"source"})
    try:
        s = parse_scenario(data, loaded.scenario.source, sets)
        if estimate_run(s, fidelity).count > _MAX_EVENTS:
            return None
        result = simulate(s, hw, fidelity=fidelity)
    except InputError:
        return None
    peak = result.memory.peak_bytes
    # `run`'s verdict: device memory, and host memory or NVMe drives where states go there
    fits = summary(result)["memory"]["fits"]
    return (result.iteration_time_s, peak) if fits else None


def cheapest_remedy(loaded: Any, hw: Any, fidelity: str) -> str:
    """'cheapest remedy: --set K=V (iteration X s, peak Y GB)', or that none was found."""
    best: tuple[float, float, list[str]] | None = None
    for sets in candidates(loaded.scenario):
        got = _try(loaded, hw, sets, fidelity)
        if got is not None and (best is None or got[0] < best[0]):
            best = (got[0], got[1], sets)
    if best is None:
        return ("no single change of optimizer_shard, offload.optimizer_states, recompute, "
                "tensor or pipeline makes it fit; use more devices or a larger device")
    flags = " ".join(f"--set {s}" for s in best[2])
    return (f"cheapest remedy: {flags} (iteration {best[0]:.4g} s, peak "
            f"{best[1] / 1e9:.3g} GB)")
