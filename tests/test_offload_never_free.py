"""Offload is never free (issue 23): enabling ZeRO-Offload of the optimizer states makes no
bundled scenario faster unless the device's own optimizer step was longer than the host
step the offloaded run exposes (the host's Adam, its PCIe copies and the wait for them).
Each case prints both."""

from __future__ import annotations

import pytest

from benchmarks.golden import load
from simulator.api import load_hardware, load_scenario
from simulator.errors import InputError
from simulator.report import summary
from simulator.simulation.simulate import simulate
from tests.conftest import REPO

RUNS = load("run")
BUNDLED = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", BUNDLED)
def test_optimizer_offload_is_not_free(path):
    entry = RUNS.get(path)
    if entry is None or entry["exit"] != 0:
        pytest.skip("run refuses this scenario")
    try:
        loaded = load_scenario(path, ["parallel.offload.optimizer_states=true"])
    except InputError as err:
        pytest.skip(f"offload does not apply: {err.message[:120]}")
    off = summary(simulate(loaded.scenario, load_hardware(loaded)))
    plain = entry["stdout"]
    device_step = plain["breakdown_s"]["optimizer"]
    host_step = off["breakdown_s"]["optimizer"] + off["breakdown_s"]["offload_exposed"]
    print(f"{path}: device optimizer step {device_step:.6g} s, exposed host step "
          f"{host_step:.6g} s; iteration {plain['iteration_time_s']:.6g} -> "
          f"{off['iteration_time_s']:.6g} s")
    if off["iteration_time_s"] < plain["iteration_time_s"] * (1 - 1e-9):
        assert device_step > host_step
