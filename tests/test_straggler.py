"""Stragglers and mixed clusters (`cluster.slow`, `cluster.node_types`, `cluster.jitter`):
the closed forms of a data-parallel step with one slowed device, the slower kind on the
critical path of a mixed pipeline, representative == full fidelity, seeded jitter, and the
cluster rules' messages."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import simulator
from simulator.cli import app
from simulator.config.hardware.cluster import with_nic
from simulator.config.hardware.load import load_profile
from simulator.cost import collective_time_s, send_recv_time_s

STRAGGLER = "straggler-dp16-a100"
MIXED = "mixed-a100-h100-pp2"


def sim(name: str, *sets: str, fidelity: str = "representative"):
    return simulator.simulate(simulator.load_scenario(name, list(sets)), fidelity=fidelity)


def kernel_s(result, device: int) -> float:
    """Seconds of kernels (compute stream, optimizer included) of one simulated device."""
    return sum(t.duration_s - t.comm_s for t in result.plan.tasks
               if t.device == device and t.stream == "compute")


def test_slowed_device_adds_its_kernel_time_over_the_factor_without_overlap():
    # no overlap: T = kernels + all-reduce of every bucket + optimizer on each replica, and
    # the slowest replica's kernels take 1/0.8 as long: dT = kernels * (1/0.8 - 1)
    off = "parallel.overlap.grad_reduce=false"
    base, slow = sim(STRAGGLER, off, "cluster.slow=[]"), sim(STRAGGLER, off)
    want = kernel_s(base, 0) * (1 / 0.8 - 1)
    assert slow.iteration_time_s - base.iteration_time_s == pytest.approx(want, rel=1e-9)
    assert kernel_s(slow, 0) == pytest.approx(kernel_s(base, 0) / 0.8, rel=1e-12)


def ddp_step_s(result, device: int = 0) -> float:
    """A DDP step by its closed form (Li et al. 2020, "PyTorch Distributed", VLDB, Sec. 3.2:
    buckets all-reduced in order as the backward makes them ready): kernels back to back;
    bucket j's all-reduce ends at e_j = max(ready_j, e_{j-1}) + t_j; the optimizer step
    follows the last one."""
    tasks = [t for t in result.plan.tasks if t.device == device]
    compute = [t for t in tasks if t.stream == "compute"]
    assert compute[-1].name == "opt"
    clock, done = 0.0, {}
    for t in compute[:-1]:
        clock += t.duration_s
        done[t.tid] = clock
    free = 0.0
    for b in (t for t in tasks if t.name == "grad_bucket"):
        free = max(done[b.deps[0]], free) + b.duration_s
    return max(free, clock) + compute[-1].duration_s


def test_bundled_straggler_step_follows_the_ddp_closed_form():
    # the closed form overlaps the buckets for free (engine.core's overlap slowdown off)
    free = "hardware.efficiency.overlap_compute_slowdown=0"
    base, slow = sim(STRAGGLER, "cluster.slow=[]", free), sim(STRAGGLER, free)
    assert base.iteration_time_s == pytest.approx(ddp_step_s(base), rel=1e-12)
    assert slow.iteration_time_s == pytest.approx(ddp_step_s(slow), rel=1e-12)
    # the slow replica's kernels, not the healthy ones', are the step's
    assert kernel_s(slow, 0) == pytest.approx(kernel_s(base, 0) / 0.8, rel=1e-12)
    # the backward hides more of the buckets: the rise is at most kernels x (1/0.8 - 1)
    rise = slow.iteration_time_s - base.iteration_time_s
    assert 0.95 * kernel_s(base, 0) * 0.25 < rise <= kernel_s(base, 0) * 0.25 * (1 + 1e-12)
    pace = slow.critical_path
    assert (pace["device"], pace["node"], pace["compute_factor"]) == (11, 1, 0.8)
    assert base.critical_path["device"] == 0 and base.critical_path["compute_factor"] == 1.0


def test_full_fidelity_waits_for_the_straggler_at_the_collective():
    rep, full = sim(STRAGGLER), sim(STRAGGLER, fidelity="full")
    assert full.iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-12)
    assert full.critical_path["simulated_device"] == 11
    assert full.critical_path["device"] == 11
    # the healthy replicas run at full speed and wait at the all-reduce
    assert kernel_s(full, 0) == pytest.approx(kernel_s(full, 11) * 0.8, rel=1e-12)


def test_slow_nic_adds_the_all_reduce_difference():
    off = "parallel.overlap.grad_reduce=false"
    base = sim(STRAGGLER, off, "cluster.slow=[]")
    slow = sim(STRAGGLER, off, "cluster.slow=[{devices: [3], nic: 0.5}]")
    hw, group = load_profile("a100-80gb"), None
    from simulator.lower.layout import rank_mesh

    group = rank_mesh(base.scenario).groups()["dp"]
    half = with_nic(hw, hw.inter_node.nic_bandwidth_Gbps * 0.5)
    sizes = [t.comm[0][1] for t in base.plan.tasks if t.name == "grad_bucket"]
    want = sum(collective_time_s("all_reduce", b, group, half)
               - collective_time_s("all_reduce", b, group, hw) for b in sizes)
    assert want > 0
    assert slow.iteration_time_s - base.iteration_time_s == pytest.approx(want, rel=1e-9)
    assert slow.critical_path["device"] == 3 and slow.critical_path["nic_factor"] == 0.5


def test_factors_of_one_reproduce_the_uniform_cluster_exactly():
    base = sim(STRAGGLER, "cluster.slow=[]")
    same = sim(STRAGGLER, "cluster.slow=[{nodes: [0, 1], compute: 1.0, nic: 1.0}]")
    assert same.iteration_time_s == base.iteration_time_s
    assert same.trace.end == base.trace.end


def test_tensor_group_runs_at_its_slowest_member():
    sets = ("parallel.data=8", "parallel.tensor=2", "cluster.slow=[{devices: [5], compute: 0.5}]")
    full = sim(STRAGGLER, *sets, fidelity="full")
    rep = sim(STRAGGLER, *sets)
    # ranks 4 and 5 form one tensor group: both run at half speed, rank 2 does not
    assert kernel_s(full, 4) == pytest.approx(kernel_s(full, 5), rel=1e-12)
    assert kernel_s(full, 4) > 1.9 * kernel_s(full, 2)
    assert full.iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-12)
    assert rep.critical_path["device"] == 5


def test_mixed_pipeline_puts_the_slower_kind_on_the_critical_path():
    mixed = sim(MIXED)
    fw = f"framework={mixed.framework.name}"
    a100 = sim(MIXED, "cluster.node_types=null", "hardware=a100-80gb", fw)
    h100 = sim(MIXED, "cluster.node_types=null")
    pace = mixed.critical_path
    assert (pace["hardware"], pace["stage"]) == ("a100-80gb", 0) and pace["device"] < 16
    assert h100.iteration_time_s < mixed.iteration_time_s < a100.iteration_time_s
    # the slower stage sets the pace: the mixed step is within 10% of the all-A100 step
    assert mixed.iteration_time_s > 0.9 * a100.iteration_time_s
    swapped = sim(MIXED, "cluster.node_types=[{hardware: h100-sxm, nodes: 2}, "
                  "{hardware: a100-80gb, nodes: 2}]")
    assert (swapped.critical_path["hardware"], swapped.critical_path["stage"]) == \
        ("a100-80gb", 1)
    full = sim(MIXED, fidelity="full")
    assert full.iteration_time_s == pytest.approx(mixed.iteration_time_s, rel=1e-12)


def test_cross_kind_send_is_priced_at_the_slower_nic():
    mixed = sim(MIXED)
    a100, h100 = load_profile("a100-80gb"), load_profile("h100-sxm")
    nbytes = mixed.program.block("layer").send_fwd_bytes
    slower = min(a100.inter_node.nic_bandwidth_Gbps, h100.inter_node.nic_bandwidth_Gbps)
    want = max(send_recv_time_s(nbytes, False, with_nic(p, slower), 8) for p in (a100, h100))
    sends = [t.duration_s for t in mixed.plan.tasks if t.name.startswith("send_")]
    assert sends and sends == [pytest.approx(want, rel=1e-12)] * len(sends)
    assert want > send_recv_time_s(nbytes, False, h100, 8)


def test_jitter_gives_a_seeded_distribution():
    jit = "cluster.jitter={compute_cv: 0.05, seed: 7, samples: 6}"
    a, b = sim(STRAGGLER, jit, "cluster.slow=[]"), sim(STRAGGLER, jit, "cluster.slow=[]")
    ja, jb = a.jitter, b.jitter
    assert ja == jb and len(ja["iteration_times_s"]) == 6
    assert ja["min_s"] <= ja["p50_s"] <= ja["p99_s"] <= ja["max_s"]
    # the step waits for the slowest of 16 draws: slower than the jitter-free step
    assert ja["min_s"] > a.iteration_time_s
    other = sim(STRAGGLER, jit.replace("seed: 7", "seed: 8"), "cluster.slow=[]").jitter
    assert other["iteration_times_s"] != ja["iteration_times_s"]
    flat = sim(STRAGGLER, "cluster.jitter={compute_cv: 0.0, samples: 2}", "cluster.slow=[]")
    assert flat.jitter["iteration_times_s"] == [pytest.approx(flat.iteration_time_s,
                                                              rel=1e-12)] * 2


def test_run_json_and_table_name_the_pace_setter():
    res = CliRunner().invoke(app, ["run", STRAGGLER, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["critical_path"]["device"] == 11 and doc["notes"] == []
    table = CliRunner().invoke(app, ["run", STRAGGLER, "--out", "/tmp/straggler-test"])
    assert "pace set by              device 11 (node 1, stage 0, a100-80gb, compute x0.8)" \
        in table.stdout


@pytest.mark.parametrize("value, key, message", [
    ("cluster.node_types=[{hardware: a100-80gb, nodes: 1}]", "cluster.node_types",
     "nodes add up to 1 = 1; expected cluster.nodes = 2"),
    ("cluster.slow=[{devices: [16]}]", "cluster.slow[0].devices",
     "16 is out of range (allowed: 0..15)"),
    ("cluster.slow=[{compute: 0.5}]", "cluster.slow[0]",
     "names no device; give devices: [ranks] or nodes: [indices]"),
    ("cluster.node_types=[{hardware: a100-90gb, nodes: 2}]", "cluster.node_types[0].hardware",
     "unknown hardware profile 'a100-90gb'"),
])
def test_cluster_rules(value, key, message):
    res = CliRunner().invoke(app, ["run", STRAGGLER, "--json", "--set", value])
    assert res.exit_code == 2
    assert f"{key}: " in res.stderr and message in res.stderr
    assert "Traceback" not in res.stderr


def test_plan_keeps_the_stragglers_of_its_own_cluster():
    """The planner's configurations keep `cluster.slow` (and node kinds, jitter) on the
    scenario's own devices, and refuse a resized cluster by name rather than drop them."""
    from simulator.api import load_scenario
    from simulator.errors import InputError
    from simulator.planner.space import Config, apply_config, config_of

    sc = load_scenario("straggler-dp16-a100", []).scenario
    same = apply_config(sc, config_of(sc))
    assert same.cluster.slow == sc.cluster.slow and same.cluster.slow
    smaller = Config(8, 1, 1, 1, "1f1b", 1, False, "none", 0, False)
    with pytest.raises(InputError) as err:
        apply_config(sc, smaller)
    assert err.value.key == "cluster" and "16 devices" in err.value.message
