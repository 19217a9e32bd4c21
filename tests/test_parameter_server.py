"""Parameter server training (`parallel.mode: parameter_server`, issue 10 item 9): the
closed forms of bytes per worker and per server and of the synchronous step, the servers as
the bottleneck, asynchronous staleness, the numeric proof that synchronous PS is data
parallel (and that a dropped push is caught), the asynchronous servers against one device
applying the same stale pushes in the same order, and the rules."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from model_kinds import refused_flat

from simulator.config.scenario import parse_scenario
from simulator.config.scenario.schema import Scenario
from simulator.models.cases import build_case
from simulator.numeric.optimizer import update, updates
from simulator.numeric.ps import PsRun, key_ranges
from simulator.numeric.verify import verify_case
from simulator.simulation.verify import verify_scenario

# a100-80gb: 8 x 200 Gb/s NICs per node for 8 GPUs, bus fraction 0.91, 14 us network step;
# cpu-x86 server host: one 200 Gb/s NIC, bus fraction 0.91, 2 sockets x 307.2 GB/s x 0.8
WORKER_BPS = 200e9 / 8 * 0.91
SERVER_BPS = 200e9 / 8 * 0.91
LATENCY_S = 14e-6
SERVER_MEM_BPS = 307.2e9 * 2 * 0.8


def _scenario(servers: int = 2, sync: bool = True, nodes: int = 2, **parallel) -> dict:
    return {
        "name": "ps", "hardware": "a100-80gb",
        "cluster": {"nodes": nodes, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 2, "hidden_size": 512, "num_heads": 8,
                  "seq_length": 256, "vocab_size": 4096, "dtype": "fp32"},
        "training": {"global_batch_size": 8 * nodes * 2, "micro_batch_size": 1,
                     "optimizer": "adam"},
        "parallel": {"data": 8 * nodes, "mode": "parameter_server",
                     "parameter_server": {"servers": servers, "sync": sync}, **parallel},
    }


def _run(invoke_cli, tmp_path, doc: dict, *sets: str) -> dict:
    path = tmp_path / "ps.json"
    path.write_text(json.dumps(doc))
    args = ["run", str(path), "--json"]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _params(out: dict) -> float:
    return out["memory"]["by_category_bytes"]["parameters"] / 4  # fp32


def test_bytes_per_worker_and_per_server(invoke_cli, tmp_path):
    out = _run(invoke_cli, tmp_path, _scenario(servers=4))
    ps, p = out["parameter_server"], _params(out)
    assert ps["workers"] == 16 and ps["servers"] == 4
    assert ps["push_bytes_per_worker"] == pytest.approx(4 * p)
    assert ps["pull_bytes_per_worker"] == pytest.approx(4 * p)
    assert ps["bytes_in_per_server"] == pytest.approx(16 * 4 * p / 4)
    assert out["communication"]["by_collective"] == {"ps_push": pytest.approx(4 * p, abs=1),
                                                     "ps_pull": pytest.approx(4 * p, abs=1)}
    # the workers hold no optimizer states: the servers do
    assert out["memory"]["by_category_bytes"]["optimizer_states"] == 0


def test_synchronous_step_closed_form(invoke_cli, tmp_path):
    """Without overlap and with one bucket, the step after the backward is: push (the
    servers' NICs take 16/2 workers' gradients), the servers' update (16 gradients read, Adam's
    fp32 weight and moments read and written), pull."""
    out = _run(invoke_cli, tmp_path, _scenario(servers=2),
               "parallel.overlap.grad_reduce=false", "parallel.comm_fusion.bucket_mb=100000")
    p = _params(out)
    m = 4 * p
    transfer = LATENCY_S + max(m / WORKER_BPS, 16 * m / (2 * SERVER_BPS))
    update = p / 2 * (16 * 4 + 24) / SERVER_MEM_BPS
    assert out["parameter_server"]["bottleneck"] == "server_nic"
    assert out["breakdown_s"]["comm_exposed"] == pytest.approx(2 * transfer, rel=1e-9)
    assert out["breakdown_s"]["optimizer"] == pytest.approx(update, rel=1e-9)
    assert out["parameter_server"]["server_update_s"] == pytest.approx(update, rel=1e-9)


def test_more_servers_relieve_the_server_bottleneck(invoke_cli, tmp_path):
    times = [_run(invoke_cli, tmp_path, _scenario(servers=k))["iteration_time_s"]
             for k in (1, 2, 8, 16)]
    assert times[0] > times[1] > times[2]
    # with 16 servers for 16 workers the worker's own NIC bounds the transfers
    assert _run(invoke_cli, tmp_path, _scenario(servers=16))["parameter_server"][
        "bottleneck"] == "worker_nic"
    assert times[2] >= times[3]


def test_asynchronous_staleness_and_the_servers_period(invoke_cli, tmp_path):
    sync = _run(invoke_cli, tmp_path, _scenario(servers=1))
    out = _run(invoke_cli, tmp_path, _scenario(servers=1, sync=False))
    ps = out["parameter_server"]
    assert ps["staleness_updates"] == 15 and sync["parameter_server"]["staleness_updates"] == 0
    p = _params(out)
    # one server takes 16 pushes and answers 16 pulls per period
    assert ps["server_round_s"] == pytest.approx(16 * 4 * p / SERVER_BPS, rel=1e-9)
    assert out["iteration_time_s"] >= ps["server_round_s"]
    assert out["iteration_time_s"] <= sync["iteration_time_s"]


def test_synchronous_ps_verifies_equal_to_one_device():
    for model in ({"type": "transformer", "layers": 2, "hidden_size": 16, "num_heads": 2,
                   "seq_length": 8, "vocab_size": 16, "dtype": "fp32"},
                  {"type": "mlp", "layers": 2, "hidden_size": 16, "input_size": 8,
                   "num_classes": 4, "dtype": "fp32"}):
        doc = {"name": "ps", "hardware": "cpu-x86", "cluster": {"nodes": 2,
                                                                 "devices_per_node": 2},
               "model": model, "training": {"global_batch_size": 8, "micro_batch_size": 1},
               "parallel": {"data": 4, "mode": "parameter_server",
                            "parameter_server": {"servers": 3}}}
        result = verify_scenario(parse_scenario(doc, "ps"))
        assert result.ok, [c for c in result.checks if not c.ok]
        assert any(c.tensor.endswith(".updated") for c in result.checks)
        assert result.collectives["ps_push"] > 0 and result.collectives["ps_pull"] > 0
        assert "all_reduce" not in result.collectives


def test_a_dropped_push_fails_verify():
    doc = {"name": "ps", "hardware": "cpu-x86", "cluster": {"nodes": 1, "devices_per_node": 4},
           "model": {"type": "mlp", "layers": 2, "hidden_size": 16, "input_size": 8,
                     "num_classes": 4, "dtype": "fp32"},
           "training": {"global_batch_size": 8, "micro_batch_size": 1},
           "parallel": {"data": 4, "mode": "parameter_server"}}
    s = parse_scenario(doc, "ps")
    case = build_case(s)
    good = verify_case(case, "adam", 1e-3, ps=PsRun(2))
    bad = verify_case(case, "adam", 1e-3, ps=PsRun(2, drop_push=1))
    assert good.ok and not bad.ok
    assert {c.tensor for c in bad.checks if not c.ok} >= {"fc0.w.grad", "fc0.w.updated"}


def _async_mlp(optimizer: str) -> Scenario:
    return parse_scenario({
        "name": "ps", "hardware": "cpu-x86", "cluster": {"nodes": 1, "devices_per_node": 4},
        "model": {"type": "mlp", "layers": 2, "hidden_size": 16, "input_size": 8,
                  "num_classes": 4, "dtype": "fp32"},
        "training": {"global_batch_size": 8, "micro_batch_size": 1, "optimizer": optimizer},
        "parallel": {"data": 4, "mode": "parameter_server",
                     "parameter_server": {"sync": False, "servers": 3}}}, "ps")


def test_asynchronous_updates_are_compared_with_the_stale_reference():
    result = verify_scenario(_async_mlp("adam"))
    assert result.ok and any(c.tensor.endswith(".updated") for c in result.checks)
    assert ("asynchronous parameter server: each push updates parameters other workers have "
            "moved since (staleness up to n - 1 updates), so the updates are not the "
            "single-device step: they were compared with one device applying the same stale "
            "pushes in the same order, and the pushes' sum with the single-device gradient"
            ) in result.notes


@pytest.mark.parametrize("optimizer, order_matters", [
    ("adam", True), ("momentum", True), ("sgd", False)])
def test_asynchronous_pushes_applied_out_of_order_fail_where_order_matters(
        optimizer, order_matters):
    """SGD's steps commute (p - lr * sum of the n pushes, n times each worker's share:
    n times the synchronous step), so its order cannot be seen; momentum and Adam carry
    state from push to push."""
    case = build_case(_async_mlp(optimizer))
    good = verify_case(case, optimizer, 1e-3, ps=PsRun(3, sync=False))
    bad = verify_case(case, optimizer, 1e-3, ps=PsRun(3, sync=False, reorder=True))
    assert good.ok
    failed = {c.tensor for c in bad.checks if not c.ok}
    assert failed == ({"fc0.w.updated", "fc1.w.updated", "out.w.updated"} if order_matters
                      else set())


def test_one_push_is_one_update_and_sgd_pushes_sum():
    rng = np.random.default_rng(0)
    p, g1, g2 = (rng.standard_normal(5) for _ in range(3))
    for kind in ("sgd", "momentum", "adam"):
        assert np.array_equal(updates(kind, p, [g1], 0.1), update(kind, p, g1, 0.1))
    assert np.allclose(updates("sgd", p, [g1, g2], 0.1), p - 0.1 * (g1 + g2))
    # momentum: v1 = g1, v2 = 0.9 g1 + g2
    assert np.allclose(updates("momentum", p, [g1, g2], 0.1),
                       p - 0.1 * g1 - 0.1 * (0.9 * g1 + g2))


def test_key_ranges_cover_every_element_once():
    for size, servers in ((10, 3), (2, 5), (7, 7), (1, 1)):
        ranges = key_ranges(size, servers)
        assert len(ranges) == servers
        covered = [i for r in ranges for i in range(size)[r]]
        assert covered == list(range(size))


@pytest.mark.parametrize("sets,key,message", [
    (["parallel.tensor=2", "parallel.data=8"], "parallel.tensor",
     "2 does not apply with parallel.mode: parameter_server, whose workers are data parallel "
     "and whose servers hold the optimizer (allowed: 1)"),
    (["parallel.optimizer_shard=1"], "parallel.optimizer_shard",
     "1 does not apply with parallel.mode: parameter_server, whose workers are data parallel "
     "and whose servers hold the optimizer (allowed: 0)"),
    (["parallel.mode=semi_auto"], "parallel.parameter_server",
     "applies only with parallel.mode: parameter_server (found mode semi_auto)"),
    (["parallel.parameter_server.server_hardware=nope"],
     "parallel.parameter_server.server_hardware", "unknown hardware profile 'nope'"),
])
def test_rules_name_the_key(invoke_cli, tmp_path, sets, key, message):
    path = tmp_path / "ps.json"
    path.write_text(json.dumps(_scenario()))
    args = ["run", str(path)]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    text = refused_flat(result)
    assert f": {key}: " in text and message in text, text


def test_the_scenario_without_the_mode_is_data_parallel(invoke_cli, tmp_path):
    doc = _scenario()
    del doc["parallel"]["mode"], doc["parallel"]["parameter_server"]
    out = _run(invoke_cli, tmp_path, doc)
    assert "parameter_server" not in out
    assert set(out["communication"]["by_collective"]) == {"all_reduce"}
    assert dataclasses.is_dataclass(PsRun)
