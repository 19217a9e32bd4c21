"""Host-bound MoE layer pairs under Megatron-Core's expert all-to-all overlap
(`simulator.lower.moe_pair_host`): the forward's dispatcher sync holds the host, so the
backward's launches fall between two syncs with the forward's."""

from __future__ import annotations

import pytest

from simulator.api.core import load_hardware, load_scenario
from simulator.config.framework.load import framework_for
from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.lower.costs import CostModel
from simulator.lower.host import host_costs
from simulator.lower.layout import rank_mesh
from simulator.lower.moe_host import MoeHost, launches, moe_host
from simulator.lower.moe_pair_host import pair_order, pair_segment_s, paired_layers_s
from simulator.lower.stages import stage_work
from simulator.simulation.simulate import run_costs, run_program

GROUPS = {"ep": GroupSpec(8, 1, 8)}


def _op(name: str, wgrad: bool = False, grouped: bool = False) -> ComputeSpec:
    return ComputeSpec(name, "gemm" if grouped else "elementwise", 1.0, 1.0, "bf16",
                       grouped=grouped, weight_grad=wgrad)


def _a2a(name: str) -> CommSpec:
    return CommSpec(name, "all_to_all", 1e6, "ep")


# one MoE layer as the program plans it: attention, dispatch, experts, combine
FWD = (_op("attn"), _a2a("dispatch"), _op("expert_fc", grouped=True), _a2a("combine"),
       _op("residual"))
BWD = (_op("residual.bwd"), _a2a("combine.bwd"), _op("expert_fc.dgrad", grouped=True),
       _op("expert_fc.wgrad", wgrad=True, grouped=True), _a2a("dispatch.bwd"),
       _op("attn.bwd"), _op("attn.wgrad", wgrad=True))


def test_the_pair_runs_in_megatron_cores_layer_order():
    """TransformerLayerSchedulePlan.run after the forward's sync: f dispatch, b mlp dw,
    b dispatch, f mlp and combine, b attention backward then its dw, and the next pair's
    b combine backward, f attention; the expert dgrad was queued before the sync."""
    queued, seq, before = pair_order(FWD, BWD)
    assert [op.name for op in queued] == ["expert_fc.dgrad"] == [op.name for op in before]
    assert [op.name for op in seq] == [
        "dispatch", "expert_fc.wgrad", "dispatch.bwd", "expert_fc", "combine", "residual",
        "attn.bwd", "attn.wgrad", "residual.bwd", "combine.bwd", "attn"]


def test_no_pair_without_both_all_to_alls():
    assert pair_order(FWD[:1], BWD) is None
    assert pair_segment_s(FWD, BWD[:1], _costs({}), GROUPS, MoeHost(1e-6, 2)) is None


def _costs(times: dict[str, float]) -> CostModel:
    return CostModel(compute_s=lambda spec: times[spec.name],
                     collective_s=lambda coll, nbytes, group: 1.0,
                     send_recv_s=lambda nbytes, intra: 0.0)


def test_the_segment_is_the_makespan_of_that_order():
    """Host 10 us a launch, 4 local experts (a grouped GEMM is 4 launches), 2 bookkeeping
    launches; device: the queued dgrad 30 us, the experts' wgrad and forward 1 us, the
    attention backward 400 us and forward 200 us, the rest 0. The attention backward is
    launched after the dispatch, wgrad, dispatch backward, experts, combine, residual and
    itself (1 + 4 + 1 + 4 + 1 + 1 + 1 = 13 launches, 130 us) and the device then runs it and
    the attention forward queued behind it: 130 + 400 + 200 = 730 us, more than the host's
    23 launches (230 us) or the device's 632 us alone. The all-to-alls take no
    compute-stream time (they are 1 s here)."""
    times = {"attn": 200e-6, "expert_fc": 1e-6, "residual": 0.0, "residual.bwd": 0.0,
             "expert_fc.dgrad": 30e-6, "expert_fc.wgrad": 1e-6, "attn.bwd": 400e-6,
             "attn.wgrad": 0.0}
    host = MoeHost(10e-6, 4, before_sync=2)
    assert pair_segment_s(FWD, BWD, _costs(times), GROUPS, host) == pytest.approx(730e-6)
    # a device-light pair is the host's: every launch of the pair, the bookkeeping too
    light = dict.fromkeys(times, 0.0)
    assert pair_segment_s(FWD, BWD, _costs(light), GROUPS, host) == pytest.approx(
        (17 + 2 + 4) * 10e-6)


def test_forward_layers_pair_with_as_many_backward_layers():
    assert paired_layers_s((1.0, 2.0, 3.0), (5.0, 5.0)) == 3.0
    assert paired_layers_s((1.0,), ()) == 0.0


ROW = "scenarios/validation/bridge2511-b200-qwen3-235b-a22b-64g.yaml"


def _work(*sets: str):
    loaded = load_scenario(ROW, list(sets))
    sc, hw = loaded.scenario, load_hardware(loaded)
    fw = framework_for(sc, hw)
    prog = run_program(sc, hw, fw).program
    costs = host_costs(run_costs(hw, fw), prog.host_kernels)
    return sc, prog, costs, stage_work(sc, prog, rank_mesh(sc), costs)


def test_a_host_bound_pair_takes_every_launch_of_its_layers():
    """The published B200 Qwen3-235B run (MXFP8, 16 local experts, MBS 1): priced alone,
    the forward and backward each subtract their all-to-alls from their launch time, which
    the pair then hides again; the pair's segment takes at least all of the layer's
    launches, so its delta adds back what that double count took."""
    sc, prog, costs, work = _work()
    layer = prog.block("layer")
    host = moe_host(sc, costs)
    launched = (sum(launches(op, host) for op in layer.fwd + layer.bwd) + host.before_sync) \
        * host.kernel_s
    seg = pair_segment_s(layer.fwd, layer.bwd, costs, rank_mesh(sc).groups(), host)
    assert seg >= launched
    assert work[1].pair_deltas == (pytest.approx(work[1].pair_deltas[0]),) * work[1].layers
    assert work[1].pair_deltas[0] > 0.0
    assert seg == pytest.approx(work[1].pair_deltas[0] + work[1].fwd.compute_s
                                / work[1].layers + work[1].bwd.compute_s / work[1].layers)


def test_without_the_overlap_there_is_no_pair():
    assert all(not w.pair_deltas for w in _work("parallel.overlap.moe_a2a=false")[3])
