"""The zero-bubble schedule zb_h1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism",
arXiv 2401.10241): its order, its bubble against the paper's closed form, its memory,
which kernels its W pass defers, its refusals, and `verify` of a scenario under it."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import zb_bubble
from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.lower import pipeline
from simulator.lower.costs import CostModel
from simulator.lower.layout import rank_mesh
from simulator.lower.pipeline import schedule_steps
from simulator.lower.stages import split_backward, stage_work
from simulator.numeric.pipeline import SendFaults
from simulator.program.model_program import transformer_program
from simulator.report.metrics import memory_timeline
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario

A100 = load_profile("a100-80gb")


_gpt = zb_bubble.scenario  # the 8-layer GPT of the benchmark, the same setting


# ---- the order ---------------------------------------------------------------------------
def test_stage_i_defers_its_first_i_weight_passes_to_the_end():
    """Qi et al. 2023, Fig. 3 top (ZB-H1), p = 4: 1F1B's F/B order; W_j follows B_{j+i}."""
    order = [" ".join(k + str(j) for k, j, _ in schedule_steps("zb_h1", i, 4, 6, 1))
             for i in range(4)]
    assert order == [
        "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5",
        "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 B4 W3 B5 W4 W5",
        "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 B5 W3 W4 W5",
        "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5"]


@pytest.mark.parametrize("stage", [0, 1, 3])
@pytest.mark.parametrize("m", [2, 4, 9])
def test_every_pass_once_and_w_after_its_b(stage: int, m: int):
    steps = schedule_steps("zb_h1", stage, 4, m, 1)
    assert sorted(steps) == sorted((k, j, stage) for k in "FBW" for j in range(m))
    no_w = [(k, j) for k, j, _ in steps if k != "W"]
    assert no_w == [(k, j) for k, j, _ in schedule_steps("1f1b", stage, 4, m, 1)]
    for j in range(m):
        assert steps.index(("B", j, stage)) < steps.index(("W", j, stage))


# ---- the bubble: the paper's closed form ---------------------------------------------------
# T_F, T_B, T_W and the bubble as benchmarks/zb_bubble.py prints them: a layer's kernels at
# the profile's roofline, nothing else costing time (Qi et al. 2023, Sec. 3.1's setting)
_t_fbw = zb_bubble.stage_times
_bubble = zb_bubble.bubble


@pytest.mark.parametrize("p,m", [(2, 2), (2, 5), (4, 4), (4, 8), (8, 8), (8, 12)])
def test_bubble_is_p_minus_1_times_tf_plus_tb_minus_tw(p: int, m: int):
    """Qi et al. 2023, Sec. 3.1: ZB-H1's bubble is (p-1)(T_F + T_B - T_W) where 1F1B's is
    (p-1)(T_F + T_B + T_W) (uniform stages, free communication, T_W <= T_F, T_B)."""
    tf, tb, tw = _t_fbw(_gpt(p, m))
    assert 0 < tw <= min(tf, tb)
    assert _bubble(_gpt(p, m)) == pytest.approx((p - 1) * (tf + tb - tw), rel=1e-9)
    assert _bubble(_gpt(p, m, "1f1b")) == pytest.approx((p - 1) * (tf + tb + tw), rel=1e-9)


def _eager(stage: int, stages: int, micro: int, chunks: int) -> list[pipeline.Step]:
    """Mutation: each W right after its B (nothing deferred)."""
    steps: list[pipeline.Step] = []
    for kind, j, vs in schedule_steps("1f1b", stage, stages, micro, chunks):
        steps += [(kind, j, vs)] + ([("W", j, vs)] if kind == "B" else [])
    return steps


def test_w_passes_not_deferred_miss_the_closed_form(monkeypatch: pytest.MonkeyPatch):
    """The closed form tells ZB-H1 apart: with every W right after its B, the previous
    stage still waits for B alone, but no W fills a cool-down slot: the bubble is
    (p-1)(T_F + T_B), T_W per stage more than ZB-H1's."""
    p, m = 4, 8
    tf, tb, tw = _t_fbw(_gpt(p, m))
    monkeypatch.setitem(pipeline.SCHEDULES, "zb_h1", _eager)
    bubble = _bubble(_gpt(p, m), steady=False)
    assert bubble != pytest.approx((p - 1) * (tf + tb - tw), rel=1e-3)
    assert bubble == pytest.approx((p - 1) * (tf + tb), rel=1e-9)


# ---- memory ------------------------------------------------------------------------------
def _peaks(sc: Scenario) -> list[float]:
    r = simulate(sc, A100)
    return [max(s["activations"] for s in memory_timeline(r.plan, r.trace, d)[1])
            for d in r.plan.devices]


def test_a_deferred_w_keeps_its_inputs_and_output_gradients():
    """1F1B's stage i holds p - i micro-batches' activations A (Narayanan et al. 2021,
    Sec. 2.2.1); under ZB-H1 its i deferred W's keep their GEMMs' saved inputs X and output
    gradients dY (Qi et al. 2023, Sec. 3.1: W's memory), and a running B holds its dY:
    (p - i) A + i (X + dY) + dY."""
    p, m = 4, 8
    sc = _gpt(p, m)
    work = stage_work(sc, transformer_program(sc), rank_mesh(sc), CostModel.from_hardware(A100))
    expected = [(p - i) * w.activation_bytes + i * (w.w_input_bytes + w.w_grad_bytes)
                + w.w_grad_bytes for i, w in enumerate(work)]
    assert _peaks(sc) == pytest.approx(expected, rel=1e-12)
    assert _peaks(_gpt(p, m, "1f1b")) == pytest.approx(
        [(p - i) * w.activation_bytes for i, w in enumerate(work)], rel=1e-12)
    assert all(0 < w.w_input_bytes < w.activation_bytes for w in work)


# ---- what W runs -------------------------------------------------------------------------
def test_w_holds_the_parameter_gradients_only():
    """Attention's scores / context GEMMs differentiate K and V (activations) in their
    `.wgrad`: those stay in B, which the previous stage waits for; W holds the weight
    GEMMs' gradients and the fp32 main-gradient add."""
    prog = transformer_program(_gpt(2, 2))
    b_ops, w_ops, x, dy = split_backward(prog.block("layer").fwd, prog.block("layer").bwd)
    assert {op.name for op in w_ops} == {"qkv.wgrad", "proj.wgrad", "fc1.wgrad", "fc2.wgrad",
                                         "main_grad_add"}
    assert {"scores.wgrad", "context.wgrad"} <= {op.name for op in b_ops}
    s, h, e = 1024, 1024, 2  # seq, hidden, bf16 bytes
    assert dy == (3 * h + h + 4 * h + h) * s * e  # dY of qkv, proj, fc1, fc2
    assert x == (h + h + h + 4 * h) * s * e  # their saved inputs


# ---- refusals ----------------------------------------------------------------------------
@pytest.mark.parametrize("extra, key", [
    ({"virtual_stages": 2}, "parallel.virtual_stages"),
    ({"recompute": "full"}, "parallel.recompute"),
    ({"offload": {"activations": True}}, "parallel.offload.activations"),
])
def test_combinations_not_simulated_are_refused(extra: dict, key: str):
    with pytest.raises(InputError) as err:
        _gpt(2, 4, **extra)
    assert err.value.key == key
    assert "zb_h1" in str(err.value)


# ---- verify ------------------------------------------------------------------------------
def _tiny(**parallel: Any) -> Scenario:
    return parse_scenario({
        "name": "tiny zb", "hardware": "cpu-x86",
        "cluster": {"nodes": 1, "devices_per_node": 4},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 16, "num_heads": 4,
                  "ffn_hidden_size": 32, "seq_length": 8, "vocab_size": 32, "dtype": "fp32"},
        "training": {"global_batch_size": 2, "micro_batch_size": 1, "optimizer": "adam",
                     "learning_rate": 1e-3},
        "parallel": {"data": 1, "tensor": 2, "pipeline": 2, "schedule": "zb_h1",
                     **parallel}}, "t.yaml")


def test_verify_passes_and_fails_under_a_dropped_gradient_send():
    """The schedule reorders the same computation: verify runs each stage on its own
    devices and passes; a dropped input-gradient send (what B hands the previous stage)
    fails it."""
    assert verify_scenario(_tiny()).ok
    broken = verify_scenario(_tiny(), send_faults=SendFaults(drop=("bwd", 1)))
    assert not broken.ok
    failed = {c.tensor for c in broken.checks if not c.ok}
    assert {"l1.res2.grad (sent stage 1 -> 0)", "l0.wq.grad"} <= failed


# ---- zb_h2: the same split with twice 1F1B's warm-up -------------------------------------
def test_zb_h2_warms_up_twice_as_long_and_defers_its_ws():
    """Qi et al. 2023, Fig. 3 bottom (ZB-H2), p = 3, m = 6: stage i runs 2(p - i - 1)
    forwards first; W_j follows B_j once 2(p - i - 1) + j >= 2(p - 1); the W's it deferred
    follow its last B (their `get_hand_schedule(warmup_c=2)`)."""
    order = [" ".join(k + str(j) for k, j, _ in schedule_steps("zb_h2", i, 3, 6, 1))
             for i in range(3)]
    assert order == [
        "F0 F1 F2 F3 F4 B0 W0 F5 B1 W1 B2 W2 B3 W3 B4 W4 B5 W5",
        "F0 F1 F2 B0 F3 B1 F4 B2 W0 F5 B3 W1 B4 W2 B5 W3 W4 W5",
        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 W0 F5 B5 W1 W2 W3 W4 W5"]
    for stage in range(3):
        steps = schedule_steps("zb_h2", stage, 3, 6, 1)
        assert sorted(steps) == sorted((k, j, stage) for k in "FBW" for j in range(6))


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 16)])
def test_zb_h2_bubble_is_p_minus_1_times_tf_plus_tb_minus_2tw(p: int, m: int):
    """Qi et al. 2023, Sec. 3.1: ZB-H2's bubble is (p-1)(T_F + T_B - 2 T_W), T_W per stage
    less than ZB-H1's (m >= 2p, uniform stages, free communication)."""
    tf, tb, tw = _t_fbw(_gpt(p, m, "zb_h2"))
    assert _bubble(_gpt(p, m, "zb_h2")) == pytest.approx((p - 1) * (tf + tb - 2 * tw),
                                                         rel=1e-9)
    assert _bubble(_gpt(p, m, "zb_h2")) < _bubble(_gpt(p, m, "zb_h1"))


def test_zb_h2_holds_more_activations_on_the_first_stage():
    """Stage 0 has 2(p - 1) forwards in flight at its first backward where ZB-H1 has p - 1:
    ZB-H2 buys its bubble with activation memory (Sec. 3.1)."""
    p, m = 4, 8
    h1, h2 = _peaks(_gpt(p, m, "zb_h1")), _peaks(_gpt(p, m, "zb_h2"))
    assert h2[0] > h1[0]


def test_zb_h2_refuses_what_zb_h1_refuses():
    with pytest.raises(InputError) as err:
        _gpt(2, 4, "zb_h2", recompute="full")
    assert err.value.key == "parallel.recompute"
    assert "zb_h2" in str(err.value)


def test_zb_h2_verify_passes_and_fails_under_a_dropped_gradient_send():
    assert verify_scenario(_tiny(schedule="zb_h2")).ok
    broken = verify_scenario(_tiny(schedule="zb_h2"), send_faults=SendFaults(drop=("bwd", 1)))
    assert not broken.ok
