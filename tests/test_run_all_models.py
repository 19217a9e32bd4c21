"""`run --json` holds its contract on every bundled scenario, operator graphs included, and
a graph model's run prices exactly the collectives its sharding plan inserts."""

import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import list_bundled, resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.dataset import dataset_choice
from simulator.program.graph_program import graph_program
from simulator.report import summary
from simulator.simulation.simulate import simulate

KEYS = {"scenario", "devices", "iteration_time_s", "samples_per_s", "tokens_per_s",
        "model_flops_per_iteration", "tflops_per_device", "mfu", "hfu", "breakdown_s",
        "memory", "communication", "simulation", "config", "pipeline_layers", "critical_path",
        "notes", "uncertainty"}
FAST = [n for n in list_bundled("scenarios")
        if not n.startswith("validation/")]


def _load(name, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


@pytest.mark.parametrize("name", FAST)
def test_run_contract_on_every_bundled_scenario(name):
    s = _load(name)
    out = summary(simulate(s, load_profile(s.hardware)))
    # a parameter-server run adds its figures (servers, bytes, staleness)
    ps = {"parameter_server"} if s.parallel.mode == "parameter_server" else set()
    # offloaded parameters / activations add the host-link bytes per device
    off = s.parallel.offload
    ps |= {"offload_bytes_per_device"} if off.parameters or off.activations else set()
    # a given parallel.comm_subgraph adds the compiled graph's communication operators
    ps |= {"comm_subgraph"} if "comm_subgraph" in s.parallel.model_fields_set else set()
    # a dataset strategy adds the bytes each device loads
    ps |= {"dataset"} if dataset_choice(s.parallel) else set()
    assert set(out) == KEYS | ps
    # an error bar from the group's published runs, or none with the reason in `basis`
    u = out["uncertainty"]
    assert u["basis"] and (u["low_s"] is None) == (u["high_s"] is None)
    assert u["low_s"] is None or u["low_s"] < u["high_s"]
    assert out["iteration_time_s"] > 0
    assert sum(out["breakdown_s"].values()) == pytest.approx(out["iteration_time_s"], rel=0.01)
    assert out["devices"] == s.devices


def test_graph_run_prices_the_plans_collectives():
    """The SBP chain: one forward all-reduce on mp (the Partial Y made whole for the loss);
    the replicated loss takes its gradient whole, so the backward moves nothing; once per
    iteration V's gradient (Partial on dp) is all-reduced and W's (Partial on dp and mp)
    takes the minimal route: reduce-scatter on mp, all-reduce of its half on dp, all-gather
    on mp (576 B moved where two all-reduces move 768 B); coalesced per collective."""
    s = _load("seed-sbp-partial-chain")
    prog = graph_program(s).program
    comms = sorted((op.name, op.collective, op.bytes, op.axis)
                   for op in prog.block("graph").fwd + prog.block("graph").bwd
                   + prog.block("graph").grad_sync
                   if hasattr(op, "collective"))
    y = 4 * 6 * 4  # local Y block [8/2, 6] in float32
    v, w = 12 * 16 // 2 * 4, 16 * 6 * 4  # V split on mp, W whole
    assert comms == [("ce.all_reduce", "all_reduce", y, "mp"),
                     ("grad_sync.all_gather", "all_gather", w, "mp"),
                     ("grad_sync.all_reduce", "all_reduce", v + w / 2, "dp"),
                     ("grad_sync.reduce_scatter", "reduce_scatter", w, "mp")]
    out = summary(simulate(s, load_profile(s.hardware)))
    volumes: dict[str, float] = {}
    for _, kind, nbytes, _ in comms:
        volumes[kind] = volumes.get(kind, 0.0) + nbytes
    assert out["communication"]["by_collective"] == volumes


def test_graph_model_flops_count_contractions_forward_and_backward():
    s = _load("seed-sbp-partial-chain")
    gemm = 2 * 8 * 12 * 16 + 2 * 8 * 16 * 6  # U.V and (UV).W on the whole batch
    assert graph_program(s).model_flops == 3 * gemm
