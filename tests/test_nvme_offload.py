"""ZeRO-Infinity's NVMe tier (`parallel.offload.optimizer_states: nvme`, simulator/lower/nvme.py):
the NVMe time in closed form (the states' bytes over the node's read and write bandwidth,
shared by its devices), its own breakdown line and trace lane, host memory down to the
swapper's buffers, the drives' capacity checked, and the refusals (no NVMe in the profile,
ZeRO stage below 3)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from typer.testing import CliRunner

from simulator.api import load_hardware, load_scenario
from simulator.api import plan as api_plan
from simulator.cli import app
from simulator.config.loaded import check_supported
from simulator.errors import InputError
from simulator.lower.nvme import BUFFER_COUNT, SUB_GROUP_SIZE, SWAP_ELEMENT_BYTES, sub_groups
from simulator.planner.estimate import Probes, estimate_time
from simulator.planner.memory import layer_params, workload_of
from simulator.planner.space import apply_config, enumerate_space
from simulator.report import summary
from simulator.simulation.simulate import simulate

DEVICES = 8  # one DGX H100 node


def _scenario(states: Any = "nvme", shard: int = 3, hardware: str = "h100-sxm") -> dict:
    return {
        "name": "nvme", "hardware": hardware,
        "cluster": {"nodes": 1, "devices_per_node": DEVICES},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 1024, "num_heads": 16,
                  "seq_length": 1024, "vocab_size": 8192, "dtype": "bf16"},
        "training": {"global_batch_size": 2 * DEVICES, "micro_batch_size": 1,
                     "optimizer": "adam"},
        "parallel": {"data": DEVICES, "tensor": 1, "pipeline": 1, "optimizer_shard": shard,
                     "offload": {"optimizer_states": states}},
    }


def _run(data: dict, overrides: tuple[str, ...] = ()) -> tuple[Any, dict]:
    loaded = load_scenario(data, list(overrides))
    hw = load_hardware(loaded)
    check_supported(loaded, hw)
    result = simulate(loaded.scenario, hw)
    return result, summary(result)


def _lane(result: Any, stream: str) -> list[Any]:
    """Device 0's tasks on `stream`, in the order the stream runs them."""
    tids = next(t for d, name, t in result.plan.streams if d == 0 and name == stream)
    return [result.plan.tasks[tid] for tid in tids]


@pytest.fixture(scope="module")
def nvme_run() -> tuple[Any, dict]:
    return _run(_scenario())


def test_nvme_time_is_the_states_over_the_node_bandwidth(nvme_run):
    """Each device's fp32 states (12 bytes per parameter with Adam, its 1/8 ZeRO-3 shard) are
    read and written back; the node's 8 devices share its drives (DGX H100: 8 x 6.4 GB/s
    read, 8 x 3.8 GB/s write), and the device waits for the whole chain: the exposed NVMe
    time is 8 x S / R + 8 x S / W, i.e. 12 P / R + 12 P / W."""
    result, s = nvme_run
    params = result.program.params
    states_per_device = 12 * params / DEVICES
    read, write = 8 * 6.4e9, 8 * 3.8e9
    expect = DEVICES * states_per_device / read + DEVICES * states_per_device / write
    assert s["breakdown_s"]["nvme_exposed"] == pytest.approx(expect, rel=1e-9)
    assert s["memory"]["nvme_peak_bytes"] == round(12 * params)
    assert s["memory"]["nvme_capacity_bytes"] == 30720e9  # 8 x 3.84 TB
    # its own lane in the trace: the read and the write; the host steps between them on the
    # offload lane, after the gradients come down and before the parameters go up
    lane = _lane(result, "nvme")
    assert [(t.name, t.phase) for t in lane] == [("nvme_read", "nvme"), ("nvme_write", "nvme")]
    assert lane[0].duration_s == pytest.approx(DEVICES * states_per_device / read)
    assert lane[1].duration_s == pytest.approx(DEVICES * states_per_device / write)
    host = _lane(result, "offload")
    assert [t.name for t in host] == ["grad_d2h", "host_opt", "param_h2d"]
    assert lane[0].deps == (host[0].tid,) and host[1].deps == (lane[0].tid,)
    assert lane[1].deps == (host[1].tid,)
    assert sum(s["breakdown_s"].values()) == pytest.approx(s["iteration_time_s"], rel=1e-2)


def test_nvme_adds_its_swap_to_the_host_offload(nvme_run):
    """Against ZeRO-Offload to host memory (optimizer_states true) the only change on the
    critical path is the swap: the iteration is longer by the read and the write; the host
    keeps the swapper's buffers instead of the states and the gradient shard."""
    result, s = nvme_run
    cpu_result, cpu = _run(_scenario(states=True))
    assert cpu["breakdown_s"]["nvme_exposed"] == 0.0 and cpu["memory"]["nvme_peak_bytes"] == 0
    assert s["iteration_time_s"] - cpu["iteration_time_s"] == pytest.approx(
        s["breakdown_s"]["nvme_exposed"], rel=1e-9)
    local = result.program.params / DEVICES
    buffers = BUFFER_COUNT * min(local, SUB_GROUP_SIZE) * SWAP_ELEMENT_BYTES
    assert s["memory"]["host_peak_bytes"] == pytest.approx(DEVICES * buffers, abs=DEVICES)
    # the states and the gradient shard (fp32 on h100-sxm's stack, megatron-core's main_grad)
    assert cpu["memory"]["host_peak_bytes"] == pytest.approx(DEVICES * local * (12 + 4),
                                                             abs=DEVICES)
    assert s["memory"]["peak_bytes"] == cpu["memory"]["peak_bytes"]  # the device is the same


def test_nvme_capacity_is_checked_per_node(nvme_run):
    """The node's drives hold the states of its devices: a 0.1 GB volume does not."""
    _, s = nvme_run
    _, small = _run(_scenario(), ("hardware.host.nvme_GB=0.1",))
    assert s["memory"]["fits"] and not small["memory"]["fits"]
    assert small["memory"]["nvme_capacity_bytes"] == 0.1e9
    assert small["memory"]["nvme_peak_bytes"] == s["memory"]["nvme_peak_bytes"]
    assert small["memory"]["peak_bytes"] == s["memory"]["peak_bytes"]


def test_a_profile_without_nvme_refuses_it():
    with pytest.raises(InputError) as err:
        _run(_scenario(hardware="h800-sxm"))
    assert err.value.key == "parallel.offload.optimizer_states"
    assert err.value.message == (
        "nvme needs the node's NVMe drives; 'h800-sxm' gives no host.nvme_GB, "
        "host.nvme_read_GBps, host.nvme_write_GBps (set them with --set "
        "hardware.host.nvme_GB=... etc., or offload to host memory: optimizer_states true); "
        "profiles with NVMe: a100-40gb, a100-80gb, h100-sxm, h200-sxm, b200-sxm")
    # given the figures with --set, the same profile runs it
    result, s = _run(_scenario(hardware="h800-sxm"), (
        "hardware.host.nvme_GB=1000", "hardware.host.nvme_read_GBps=10",
        "hardware.host.nvme_write_GBps=5"))
    states = 12 * result.program.params
    assert s["breakdown_s"]["nvme_exposed"] == pytest.approx(states / 10e9 + states / 5e9)


def test_nvme_needs_zero3_and_a_known_value():
    """DeepSpeed swaps optimizer states to NVMe only under ZeRO-3; anything but true, false
    and nvme is refused naming the key (exit 2)."""
    with pytest.raises(InputError) as err:
        load_scenario(_scenario(shard=1))
    assert err.value.message == (
        "nvme with parallel.optimizer_shard 1: DeepSpeed swaps optimizer states to NVMe only "
        "under ZeRO-3 (allowed: optimizer_shard 3, or optimizer_states true for host memory)")
    res = CliRunner().invoke(app, ["run", "tiny-cpu", "--set",
                                   "parallel.offload.optimizer_states=disk"])
    assert res.exit_code == 2
    assert res.stderr.endswith("parallel.offload.optimizer_states: found 'disk'; allowed: "
                               "true, false, nvme\n")


def test_plan_space_has_the_nvme_tier_under_zero3():
    """Where the profile has drives, every ZeRO-3 candidate that offloads its optimizer also
    comes with the states on NVMe; the estimate prices it as the lowering does (the host
    offload's estimate plus the states read and written at the node's bandwidth)."""
    loaded = load_scenario(_scenario())
    sc, hw = loaded.scenario, load_hardware(loaded)
    plain = enumerate_space(sc, DEVICES)
    tiered = enumerate_space(sc, DEVICES, nvme=True)
    extra = [c for c in tiered if c not in plain]
    assert extra and all(c.offload_nvme and c.offload_optimizer and c.optimizer_shard == 3
                         for c in extra)
    assert {replace(c, offload_nvme=False) for c in extra} == {
        c for c in plain if c.optimizer_shard == 3 and c.offload_optimizer}
    assert all(apply_config(sc, c).parallel.offload.optimizer_on_nvme for c in extra[:3])
    w, probes = workload_of(sc, hw), Probes(sc, hw, DEVICES)
    cfg = extra[0]
    local = sum(layer_params(w.model, cfg.tensor) for _ in range(w.model.layers)) / cfg.data
    states = 12 * local * DEVICES
    swap = states / hw.nvme_read_bytes_per_s + states / hw.nvme_write_bytes_per_s
    cpu = estimate_time(w, replace(cfg, offload_nvme=False), probes)
    assert estimate_time(w, cfg, probes) - cpu == pytest.approx(swap, rel=1e-9)


def test_plan_picks_nvme_when_host_memory_cannot_hold_the_states():
    """A 13B GPT on one DGX H100 node whose devices are cut to 20 GB and its host to 150 GB:
    the states must leave the device (ZeRO-3 alone needs ~29 GB), host memory cannot hold
    them (16 bytes per parameter, 208 GB), the swapper's buffers can (4 x 1e9 fp32 elements
    per device, 128 GB): the plan's best is ZeRO-3 with the states on NVMe, and it fits."""
    data = _scenario()
    data["model"].update(layers=40, hidden_size=5120, num_heads=40, vocab_size=32000)
    loaded = load_scenario(data, ["hardware.memory_GB=20", "hardware.host.memory_GB=150"])
    result = api_plan(loaded)
    best = result.best
    assert best.config.offload_nvme and best.config.optimizer_shard == 3
    assert best.evaluation.fits
    # every fitting plan keeps its states on NVMe (a refinement of the best: its own items)
    assert all("parallel.offload.optimizer_states=nvme" in c.config.overrides()
               for c in result.ranked if c.evaluation.fits)


def test_run_says_the_drives_are_short_and_the_remedy(tmp_path):
    """`run --strict` on states that overflow the drives: exit 1, the message names
    hardware.host.nvme_GB, and the cheapest remedy is the host tier (which fits)."""
    path = tmp_path / "nvme.json"
    path.write_text(json.dumps(_scenario()))  # JSON is YAML
    res = CliRunner().invoke(app, ["run", str(path), "--strict", "--set",
                                   "hardware.host.nvme_GB=0.1"])
    assert res.exit_code == 1
    assert res.stderr.startswith("the scenario does not fit on the nodes' NVMe drives: the "
                                 "optimizer states take ")
    assert "GB per node > 0.1 GB (hardware.host.nvme_GB); cheapest remedy: --set " \
        "parallel.offload.optimizer_states=true (" in res.stderr


def test_sub_groups_are_deepspeeds_tiles():
    assert sub_groups(5e8) == [1.0]
    assert sub_groups(2.5e9) == [0.4, 0.4, 0.2]


@pytest.fixture(scope="module")
def bundled_175b() -> dict:
    """zero-infinity-nvme-gpt3-175b-16-h100 serial and pipelined (its 175B / 16 shard is
    11 sub-groups of 1e9 elements, the last 0.94e9)."""
    name = "zero-infinity-nvme-gpt3-175b-16-h100"
    out = {}
    for label, sets in (("serial", ()),
                        ("read", ("parallel.offload.nvme_pipeline_read=true",)),
                        ("both", ("parallel.offload.nvme_pipeline_read=true",
                                  "parallel.offload.nvme_pipeline_write=true"))):
        loaded = load_scenario(name, list(sets))
        result = simulate(loaded.scenario, load_hardware(loaded))
        out[label] = (result, summary(result))
    return out


def test_pipelined_swap_hides_the_host_step_under_the_drives(bundled_175b):
    """The drives are the bottleneck (1048 GB per node read and written, 55 s, against a
    5 s host step): pipelining overlaps the host's steps with the reads and writes of other
    sub-groups, never the reads with the writes (one drive queue), so the NVMe time stays
    whole and the host step disappears from the critical path, all of it with both reads
    and writes pipelined, all but the last sub-group's with reads only (its step waits for
    its own read and nothing follows it on the drives but its write)."""
    serial, read, both = (bundled_175b[k][1] for k in ("serial", "read", "both"))
    result = bundled_175b["serial"][0]
    step = serial["breakdown_s"]["optimizer"]  # the host's step; the device's is 0
    last = sub_groups(result.program.params / 16)[-1]
    for s in (read, both):
        assert s["breakdown_s"]["nvme_exposed"] == pytest.approx(
            serial["breakdown_s"]["nvme_exposed"], rel=1e-12)
    assert serial["iteration_time_s"] - both["iteration_time_s"] == pytest.approx(step,
                                                                                rel=1e-9)
    assert serial["iteration_time_s"] - read["iteration_time_s"] == pytest.approx(
        step * (1 - last), rel=1e-9)
    lane = [t.name for t in _lane(bundled_175b["both"][0], "nvme")]
    assert lane[:4] == ["nvme_read", "nvme_read", "nvme_write", "nvme_read"]
    assert lane.count("nvme_read") == lane.count("nvme_write") == 11


def test_pipelining_needs_the_nvme_tier():
    with pytest.raises(InputError) as err:
        load_scenario(_scenario(states=True), ["parallel.offload.nvme_pipeline_read=true"])
    assert (err.value.key, err.value.message) == (
        "parallel.offload.nvme_pipeline_read",
        "true applies only with parallel.offload.optimizer_states nvme (found true)")
