"""Offload is never free (issue 23): enabling ZeRO-Offload of the optimizer states makes no
bundled scenario faster unless the device's own optimizer step was longer than the host
step the offloaded run exposes (the host's Adam, its PCIe copies and the wait for them).
Each case prints both."""

from __future__ import annotations

import pytest

from benchmarks.golden import load
from simulator.api import check_supported, load_hardware, load_scenario
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
    if load_scenario(path).scenario.parallel.offload.optimizer_on_nvme:
        pytest.skip("its states are offloaded already (to NVMe: test_nvme_offload_is_not_free)")
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


@pytest.mark.parametrize("path", BUNDLED)
def test_nvme_offload_is_not_free(path):
    """ZeRO-Infinity's NVMe tier is never free either: on every bundled scenario whose
    profile has NVMe drives, the states on NVMe (under ZeRO-3, as DeepSpeed runs it) take
    longer than in host memory, by at least the exposed NVMe read and write."""
    entry = RUNS.get(path)
    if entry is None or entry["exit"] != 0:
        pytest.skip("run refuses this scenario")
    times = {}
    for where in ("true", "nvme"):
        try:
            loaded = load_scenario(path, ["parallel.optimizer_shard=3",
                                          f"parallel.offload.optimizer_states={where}"])
            hw = load_hardware(loaded)
            check_supported(loaded, hw)
        except InputError as err:
            pytest.skip(f"offload to {where} does not apply: {err.message[:120]}")
        times[where] = summary(simulate(loaded.scenario, hw))
    host, nvme = times["true"], times["nvme"]
    swap = nvme["breakdown_s"]["nvme_exposed"]
    print(f"{path}: host offload {host['iteration_time_s']:.6g} s, NVMe "
          f"{nvme['iteration_time_s']:.6g} s (exposed NVMe {swap:.6g} s)")
    assert swap > 0
    assert nvme["iteration_time_s"] >= host["iteration_time_s"] + swap * (1 - 1e-9)
