"""DualPipe (DeepSeek-V3 technical report, arXiv 2412.19437, Sec. 3.2.1, Figs. 4-5, Table 2;
the pass order of deepseek-ai/DualPipe `DualPipe.step`): its layout and order, its bubble
against Table 2, its memory (2x parameters, PP+1 activations), the overlapped pairs, the
mirrored gradient sum, its refusals, and `verify` of a scenario under it."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import dualpipe_bubble as bench
from benchmarks import zb_bubble
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.lower import dualpipe
from simulator.lower.costs import CostModel
from simulator.lower.layout import rank_mesh
from simulator.lower.pipeline import schedule_steps
from simulator.lower.stages import stage_work
from simulator.numeric.pipeline import SendFaults
from simulator.program.model_program import transformer_program
from simulator.report.metrics import memory_timeline
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario

A100 = zb_bubble.A100
_gpt = zb_bubble.scenario


# ---- layout and order --------------------------------------------------------------------
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 14), (8, 16), (8, 22)])
def test_each_device_runs_one_stage_of_each_direction_every_pass_once(p: int, m: int):
    """Device d holds forward-direction stage d (virtual stage d, micro-batches 0..m/2-1)
    and reverse-direction stage p-1-d (virtual stage 2p-1-d, micro-batches m/2..m-1)."""
    for d in range(p):
        steps = schedule_steps("dualpipe", d, p, m, 2)
        fwd = sorted((mb, vs) for k, mb, vs in steps if k.startswith("F"))
        assert fwd == sorted([(j, d) for j in range(m // 2)]
                             + [(j, 2 * p - 1 - d) for j in range(m // 2, m)])
        bwd = sorted((mb, vs) for k, mb, vs in steps if k.startswith("B"))
        assert bwd == fwd
        for k, mb, vs in steps:
            assert steps.index(next(s for s in steps if s[0].startswith("F") and s[1:] == (
                mb, vs))) <= steps.index((k, mb, vs))
        # a W for each zero-bubble B, after it; a full backward (BW) has none
        ws = [(mb, vs) for k, mb, vs in steps if k == "W"]
        assert ws == [(mb, vs) for k, mb, vs in steps if k == "B"]
        for mb, vs in ws:
            assert steps.index(("B", mb, vs)) < steps.index(("W", mb, vs))


def test_the_steady_phase_runs_forward_backward_pairs_of_the_two_directions():
    """Step 4 (nF0B1F1B0): every pair is a forward of one direction and a full backward of
    the other, adjacent; the middle devices do not overlap their first pair."""
    p, m = 4, 12
    for d in range(p):
        steps = schedule_steps("dualpipe", d, p, m, 2)
        pairs = [(a, b) for a, b in zip(steps, steps[1:]) if a[0] == "Fp"]
        assert pairs and all(b[0] == "BWp" and (a[2] < p) != (b[2] < p) for a, b in pairs)
        assert len(pairs) == m - p - (1 if d in (1, 2) else 0) - (p // 2 - 1 - min(d, p - 1 - d))


# ---- the bubble: Table 2 ---------------------------------------------------------------------
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 24)])
def test_bubble_is_table_2s_formula(p: int, m: int):
    """DeepSeek-V3 Table 2: (PP/2 - 1)(F&B + B - 3W) with F&B = T_F + T_B + T_W (free
    communication), B = T_B + T_W, W = T_W, for the figure's equal cells T_F = T_B;
    independent of the micro-batch count."""
    sc = _gpt(p, m, "dualpipe") if p != 6 else _gpt6(m)
    model, (tf, tb, tw) = bench.costs(sc, equal_cells=True)
    assert tf == pytest.approx(tb, rel=1e-12) and 0 < tw < tf
    assert bench.bubble(sc, model) == pytest.approx(bench.table2(p, tf, tb, tw), rel=1e-9,
                                                    abs=1e-12)


def _gpt6(m: int) -> Scenario:
    return parse_scenario({
        "name": "dp6", "hardware": "a100-80gb", "cluster": {"nodes": 1, "devices_per_node": 6},
        "model": {"type": "transformer", "layers": 12, "hidden_size": 1024, "num_heads": 16,
                  "seq_length": 1024, "vocab_size": 8192, "dtype": "bf16"},
        "training": {"global_batch_size": m, "micro_batch_size": 1},
        "parallel": {"pipeline": 6, "schedule": "dualpipe"}}, "dp6.yaml")


def test_bubble_is_below_1f1b_and_zb_h1():
    p, m = 4, 8
    model, _ = bench.costs(_gpt(p, m, "dualpipe"), equal_cells=False)
    dual = bench.bubble(_gpt(p, m, "dualpipe"), model)
    assert dual < zb_bubble.bubble(_gpt(p, m, "zb_h1")) < zb_bubble.bubble(_gpt(p, m, "1f1b"))


def test_sends_leaving_at_once_miss_the_formula(monkeypatch: pytest.MonkeyPatch):
    """Mutation: the implementation sends a pair's forward output after the pair, and the
    warm-up forwards' after the next pass; sent at once, the bubble is one T_F per device
    pair smaller than Table 2's."""
    p, m = 4, 8
    sc = _gpt(p, m, "dualpipe")
    model, (tf, tb, tw) = bench.costs(sc, equal_cells=True)
    eager = dict(dualpipe.STEP_ARGS, **{"F>": ("F", {}), "Fp": ("F", {"pair": True})})
    monkeypatch.setattr(dualpipe, "STEP_ARGS", eager)
    got = bench.bubble(sc, model)
    assert got != pytest.approx(bench.table2(p, tf, tb, tw), rel=1e-3)
    assert got == pytest.approx(bench.table2(p, tf, tb, tw) - (p / 2 - 1) * tf, rel=1e-9)


# ---- memory: 2x parameters, PP+1 activations -------------------------------------------------
def test_two_stages_of_parameters_and_pp_plus_1_activations():
    """Table 2: DualPipe keeps 2x the parameters of a stage (one stage of each direction)
    and PP+1 micro-batches of a stage's activations, where 1F1B's first stage keeps PP."""
    for p, m in ((4, 8), (8, 16)):
        sc = _gpt(p, m, "dualpipe")
        work = stage_work(sc, transformer_program(sc), rank_mesh(sc),
                          CostModel.from_hardware(A100))
        one = stage_work(_gpt(p, m, "1f1b"), transformer_program(_gpt(p, m, "1f1b")),
                         rank_mesh(_gpt(p, m, "1f1b")), CostModel.from_hardware(A100))
        assert len(work) == 2 * p and work[:p] == work[p:]
        r, base = simulate(sc, A100), simulate(_gpt(p, m, "1f1b"), A100)
        bf16 = 2  # bytes a parameter
        # the end devices hold the first and the last stage: the tied table (here the LM
        # head's) once, shared as DeepSeek-V3 shares its embedding and head (Sec. 3.2.3),
        # where 1F1B's last stage holds a copy of it
        tied = transformer_program(sc).block("head").tied_params
        assert tied == 8192 * 1024
        for i in range(p):
            static = dict(r.plan.static_memory[i])
            shared = tied if i in (0, p - 1) else 0
            assert static["parameters"] == bf16 * (one[i].params + one[p - 1 - i].params
                                                   - shared)
            if 0 < i < p - 1:  # a middle stage's twin is a middle stage: exactly twice
                assert static["parameters"] == 2 * dict(base.plan.static_memory[i])[
                    "parameters"]
        middle = r.plan.devices[1]
        peak = max(s["activations"] for s in memory_timeline(r.plan, r.trace, middle)[1])
        assert peak == pytest.approx((p + 1) * work[1].activation_bytes, rel=1e-12)


# ---- communication ---------------------------------------------------------------------------
def _tp(**parallel: Any) -> Scenario:
    return parse_scenario({
        "name": "dp tp", "hardware": "a100-80gb", "cluster": {"nodes": 1, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 8, "hidden_size": 1024, "num_heads": 16,
                  "seq_length": 1024, "vocab_size": 8192, "dtype": "bf16"},
        "training": {"global_batch_size": 8, "micro_batch_size": 1},
        "parallel": {"pipeline": 4, "tensor": 2, "schedule": "dualpipe", **parallel}},
        "tp.yaml")


def test_a_pair_hides_its_communication_behind_its_computation():
    """DeepSeek-V3 Sec. 3.2.1: in a forward-backward pair each chunk's communication runs
    beside the other's computation; outside pairs the tensor-parallel collectives stay on
    the critical path."""
    r = simulate(_tp(), A100)
    tasks = r.plan.tasks
    pair_f = [t for t in tasks if t.name == "F" and t.comm_s == 0]
    lone_f = [t for t in tasks if t.name == "F" and t.comm_s > 0]
    assert pair_f and lone_f
    steps = schedule_steps("dualpipe", 0, 4, 8, 2)
    assert len([t for t in pair_f if r.plan.stage_of[r.plan.devices.index(t.device)] == 0]) \
        == sum(1 for k, _, _ in steps if k == "Fp")


def test_the_two_copies_of_a_stage_sum_their_gradients():
    """Device d and p-1-d hold the same stages: one send of a device's gradients (both
    stages) to its mirror before the optimizer step."""
    sc = _gpt(4, 8, "dualpipe")
    r = simulate(sc, A100)
    sync = [t for t in r.plan.tasks if t.name == "mirror_grad_sync"]
    assert len(sync) == 4
    work = stage_work(sc, transformer_program(sc), rank_mesh(sc), CostModel.from_hardware(A100))
    ge = transformer_program(sc).grad_bytes
    for t in sync:
        stage = r.plan.stage_of[r.plan.devices.index(t.device)]
        assert dict(t.comm)["send_recv"] == (work[stage].params + work[7 - stage].params) * ge


# ---- refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, key, text", [
    ({"pipeline": 3, "m": 6}, "parallel.pipeline", "needs an even pipeline"),
    ({"pipeline": 1, "m": 4}, "parallel.pipeline", "needs an even pipeline"),
    ({"pipeline": 4, "m": 6}, "training.global_batch_size", "at least 2 * parallel.pipeline = 8"),
    ({"pipeline": 4, "m": 9}, "training.global_batch_size", "an even number"),
    ({"pipeline": 2, "m": 4, "recompute": "full"}, "parallel.recompute", "dualpipe"),
    ({"pipeline": 2, "m": 4, "offload": {"activations": True}}, "parallel.offload.activations",
     "dualpipe"),
])
def test_where_it_does_not_apply_it_is_refused(kw: dict, key: str, text: str):
    p, m = kw.pop("pipeline"), kw.pop("m")
    with pytest.raises(InputError) as err:
        parse_scenario({
            "name": "dp", "hardware": "a100-80gb", "cluster": {"nodes": 1, "devices_per_node": p},
            "model": {"type": "transformer", "layers": 12, "hidden_size": 256, "num_heads": 4,
                      "seq_length": 128, "vocab_size": 1024, "dtype": "bf16"},
            "training": {"global_batch_size": m, "micro_batch_size": 1},
            "parallel": {"pipeline": p, "schedule": "dualpipe", **kw}}, "dp.yaml")
    assert err.value.key == key
    assert text in err.value.message


# ---- verify --------------------------------------------------------------------------------
def _tiny(**parallel: Any) -> Scenario:
    return parse_scenario({
        "name": "tiny dualpipe", "hardware": "cpu-x86",
        "cluster": {"nodes": 1, "devices_per_node": 4},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 16, "num_heads": 4,
                  "ffn_hidden_size": 32, "seq_length": 8, "vocab_size": 32, "dtype": "fp32"},
        "training": {"global_batch_size": 4, "micro_batch_size": 1, "optimizer": "adam",
                     "learning_rate": 1e-3},
        "parallel": {"data": 1, "tensor": 2, "pipeline": 2, "schedule": "dualpipe",
                     **parallel}}, "t.yaml")


def test_verify_passes_and_fails_under_a_dropped_gradient_send():
    """DualPipe reorders the same computation of each micro-batch through the stages:
    verify runs each stage on its own devices and passes; a dropped input-gradient send
    fails it."""
    assert verify_scenario(_tiny()).ok
    broken = verify_scenario(_tiny(), send_faults=SendFaults(drop=("bwd", 1)))
    assert not broken.ok
    failed = {c.tensor for c in broken.checks if not c.ok}
    assert {"l1.res2.grad (sent stage 1 -> 0)", "l0.wq.grad"} <= failed


@pytest.mark.parametrize("shard", [0, 1, 2])
@pytest.mark.parametrize("overlap", [True, False])
def test_each_stage_copy_reduces_its_gradients_over_data_parallel(shard: int, overlap: bool):
    """Each direction's stage ends its gradient accumulation at its own last micro-batch
    (m/2 - 1 forward, m - 1 reverse): device d reduces the buckets of both its stages, as
    1F1B's devices d and p-1-d do; ZeRO-2 reduce-scatters each earlier micro-batch's."""
    def grad_bytes(schedule: str) -> dict[int, float]:
        sc = parse_scenario({
            "name": "dp", "hardware": "a100-80gb", "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": 8, "hidden_size": 512, "num_heads": 8,
                      "seq_length": 512, "vocab_size": 4096, "dtype": "bf16"},
            "training": {"global_batch_size": 16, "micro_batch_size": 1},
            "parallel": {"pipeline": 4, "data": 2, "schedule": schedule,
                         "optimizer_shard": shard, "overlap": {"grad_reduce": overlap}}},
            "dp.yaml")
        r = simulate(sc, A100)
        out: dict[int, float] = {}
        for t in r.plan.tasks:
            if t.name in ("grad_bucket", "grad_reduce"):
                stage = r.plan.stage_of[r.plan.devices.index(t.device)]
                out[stage] = out.get(stage, 0.0) + sum(b for _, b in t.comm)
        return out

    dual, one = grad_bytes("dualpipe"), grad_bytes("1f1b")
    for d in range(4):
        # ZeRO-2 reduces every micro-batch's gradients: 8 through a 1F1B stage, 4 through
        # each DualPipe stage copy; otherwise the last micro-batch's, once per stage
        share = 4 / 8 if shard == 2 else 1.0
        # the end devices hold the tied LM-head table once (test above): its bf16
        # gradient reduced once, where 1F1B's first and last stages reduce a copy each;
        # ZeRO-2 reduces each micro-batch's share of it, the head's as the embedding's
        shared = 4096 * 512 * 2 if d in (0, 3) and shard < 2 else 0
        assert dual[d] == pytest.approx((one[d] + one[3 - d] - shared) * share, rel=1e-9)
