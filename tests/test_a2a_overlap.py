"""`parallel.overlap.moe_a2a` (Megatron-Core's overlap_moe_expert_parallel_comm,
`lower.a2a_overlap`): the order of the paired steps, the closed form of a pair's exposed
all-to-all, and the refusals, each with Megatron-Core's reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.hardware import load_profile
from simulator.config.imports.load import import_file
from simulator.config.imports.megatron_emit import emit_megatron
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.lower.a2a_overlap import paired_steps
from simulator.lower.costs import CostModel
from simulator.lower.iteration import lower
from simulator.lower.layout import rank_mesh
from simulator.lower.pipeline import schedule_steps
from simulator.lower.stages import stage_work
from simulator.program.model_program import transformer_program
from simulator.simulation.simulate import simulate

H100 = load_profile("h100-sxm")
ROOT = Path(__file__).parent.parent


def _moe(m: int = 4, overlap: bool = True, **parallel: Any) -> Scenario:
    """A small MoE transformer on 8 H100s, expert parallel over two nodes' worth of data
    ranks (the all-to-all crosses the network, so it has time to hide)."""
    p: dict[str, Any] = {"data": 8, "expert": 8, "overlap": {"moe_a2a": overlap}, **parallel}
    devices = p["data"] * p.get("pipeline", 1) * p.get("tensor", 1)
    return parse_scenario({
        "name": "moe a2a overlap", "hardware": "h100-sxm",
        "cluster": {"nodes": 2, "devices_per_node": devices // 2},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 1024, "num_heads": 16,
                  "ffn_hidden_size": 1024, "seq_length": 2048, "vocab_size": 8192,
                  "dtype": "bf16", "moe": {"experts": 16, "top_k": 4, "every": 1}},
        "training": {"global_batch_size": 8 * m, "micro_batch_size": 1},
        "parallel": p}, "moe.yaml")


# ---- the order of the steps -------------------------------------------------------------------
def test_without_a_pipeline_the_first_forward_and_the_last_backward_run_alone():
    """combined_1f1b_schedule_for_no_pipelining: F0; then F(i+1) with B(i); then the last B."""
    steps = paired_steps(schedule_steps("1f1b", 0, 1, 4, 1))
    assert steps == [("F", 0, 0), ("Fp", 1, 0), ("BWp", 0, 0), ("Fp", 2, 0), ("BWp", 1, 0),
                     ("Fp", 3, 0), ("BWp", 2, 0), ("B", 3, 0)]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_interleaved_runs_one_more_warmup_forward_and_pairs_only_the_steady_state(stage: int):
    """get_pp_rank_microbatches: warm-up (p - r - 1) * 2 + (v - 1) * p + 1 with the overlap;
    each later forward pairs with the oldest backward, the rest of the backwards unpaired."""
    p, v, m = 4, 2, 8
    plain = schedule_steps("interleaved_1f1b", stage, p, m, v)
    steps = paired_steps(plain)
    warm = (p - stage - 1) * 2 + (v - 1) * p + 1
    total = m * v
    assert [k for k, _, _ in steps[:warm]] == ["F"] * warm
    pairs = steps[warm:warm + 2 * (total - warm)]
    assert [k for k, _, _ in pairs] == ["Fp", "BWp"] * (total - warm)
    assert [k for k, _, _ in steps[warm + len(pairs):]] == ["B"] * warm
    # the same passes in the same order per kind: forwards and backwards as 1F1B runs them
    assert [s[1:] for s in steps if s[0] in ("F", "Fp")] == [s[1:] for s in plain
                                                              if s[0] == "F"]
    assert [s[1:] for s in steps if s[0] in ("B", "BWp")] == [s[1:] for s in plain
                                                               if s[0] == "B"]


def test_all_warmup_leaves_nothing_to_pair():
    """m == p on the first stage of interleaved 1F1B: every forward is warm-up."""
    steps = paired_steps(schedule_steps("interleaved_1f1b", 0, 2, 2, 2))
    assert {k for k, _, _ in steps} == {"F", "B"}


# ---- the price of a pair ----------------------------------------------------------------------
def test_a_pair_exposes_its_all_to_alls_beyond_its_other_work():
    """max(0, C_f + C_b - K_f - K_b), the work beside them slowed by the profile's overlap
    slowdown s: exposed max(C - K, C s / (1 + s)); the tensor-parallel and other
    collectives stay on the compute stream, the forward's all-to-all is charged to none."""
    sc = _moe(tensor=1)
    costs = CostModel.from_hardware(H100)
    w = stage_work(sc, transformer_program(sc), rank_mesh(sc), costs)[0]
    assert w.fwd.a2a_s > 0 and w.bwd.a2a_s > 0
    plan = lower(sc, transformer_program(sc), costs)
    dev = plan.devices[0]
    task = {(t.name, t.micro): t for t in plan.tasks if t.device == dev}
    c = w.fwd.a2a_s + w.bwd.a2a_s
    k = (w.fwd.compute_s + w.fwd.comm_s - w.fwd.a2a_s
         + w.bwd.compute_s + w.bwd.comm_s - w.bwd.a2a_s)
    s = H100.efficiency.overlap_compute_slowdown
    exposed = max(c - k, c * s / (1 + s))
    assert task[("F", 1)].comm_s == pytest.approx(w.fwd.comm_s - w.fwd.a2a_s, rel=1e-12)
    assert task[("B", 0)].comm_s == pytest.approx(w.bwd.comm_s - w.bwd.a2a_s + exposed,
                                                  rel=1e-12)
    # unpaired: the first forward and the last backward pay their all-to-alls in full
    assert task[("F", 0)].comm_s == pytest.approx(w.fwd.comm_s, rel=1e-12)
    # (the last backward is split by gradient buckets: its pieces' sum)
    assert sum(t.comm_s for t in plan.tasks if t.device == dev and t.name == "B"
               and t.micro == 3) == pytest.approx(w.bwd.comm_s, rel=1e-9)


def test_overlap_shortens_an_all_to_all_bound_run():
    """The same run with the key false prices every all-to-all on the critical path."""
    on, off = simulate(_moe(m=8), H100), simulate(_moe(m=8, overlap=False), H100)
    assert on.iteration_time_s < off.iteration_time_s


def test_the_shortened_steady_state_run_is_the_full_run():
    """One more warm-up forward leaves the steady period of interleaved 1F1B a period: the
    shortened run extended by its periods (`simulation.simulate`) is the full one."""
    sc = _moe(m=48, data=4, expert=4, pipeline=2, schedule="interleaved_1f1b",
              virtual_stages=2)
    short, full = simulate(sc, H100, steady=True), simulate(sc, H100, steady=False)
    assert short.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)


# ---- refusals -------------------------------------------------------------------------------
@pytest.mark.parametrize("parallel, model, key, message", [
    ({"data": 8, "expert": 1}, {}, "parallel.overlap.moe_a2a",
     "true overlaps the expert-parallel all-to-all of one micro-batch with another's compute; "
     "it needs parallel.expert > 1 (found 1), as Megatron-Core's "
     "overlap_moe_expert_parallel_comm does (allowed: false)"),
    ({"data": 4, "expert": 4, "pipeline": 2}, {}, "parallel.overlap.moe_a2a",
     "true pairs the forward and backward of 1F1B's steady state, which Megatron-Core runs "
     "without a pipeline (schedule 1f1b, pipeline 1) or with the interleaved schedule (it "
     "needs virtual_pipeline_model_parallel_size with pipeline > 1: schedule "
     "interleaved_1f1b); found parallel.pipeline 2, schedule 1f1b"),
    ({"data": 4, "expert": 4, "pipeline": 2, "schedule": "zb_h1"}, {},
     "parallel.overlap.moe_a2a", "found parallel.pipeline 2, schedule zb_h1"),
    ({"data": 8, "expert": 8, "recompute": "full"}, {}, "parallel.recompute",
     "full with parallel.overlap.moe_a2a: Megatron-Core asserts 'disable full recomputation "
     "when enabling overlap_moe_expert_parallel_comm' (allowed: none, selective)"),
    ({"data": 8, "expert": 8}, {"dtype": "fp32"}, "model.dtype",
     "fp32 with parallel.overlap.moe_a2a: Megatron-Core asserts "
     "'overlap_moe_expert_parallel_comm is only supported with bf16 or fp16 model' "
     "(allowed: bf16, fp16, fp8)"),
    ({"data": 8, "expert": 8}, {"mtp": {"depth": 2}}, "model.mtp.depth",
     "2 with parallel.overlap.moe_a2a: Megatron-Core asserts 'MTP supports at most one layer "
     "when enabling overlap_moe_expert_parallel_comm' (allowed: 1)"),
    ({"data": 8, "expert": 8, "overlap": {"moe_a2a": True, "copies": 2}}, {},
     "parallel.overlap.copies", "2 with parallel.overlap.moe_a2a is not simulated (allowed: 1)"),
])
def test_it_is_refused_where_megatron_core_refuses_it(parallel: dict, model: dict, key: str,
                                                      message: str):
    p = {"overlap": {"moe_a2a": True}, **parallel}
    with pytest.raises(InputError) as err:
        parse_scenario({
            "name": "moe", "hardware": "h100-sxm", "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": 4, "hidden_size": 256, "num_heads": 4,
                      "seq_length": 128, "vocab_size": 1024, "dtype": "bf16",
                      "moe": {"experts": 8, "top_k": 2, "every": 1}, **model},
            "training": {"global_batch_size": 64, "micro_batch_size": 1},
            "parallel": p}, "moe.yaml")
    assert err.value.key == key
    assert message in err.value.message


# ---- importers and emitters ---------------------------------------------------------------
_MEGATRON = ("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
             "--max-position-embeddings 512 --vocab-size 1000 --micro-batch-size 1 "
             "--global-batch-size 16 --bf16 --num-experts 8 --moe-router-topk 2 "
             "--expert-model-parallel-size 4")


def _import_megatron(tmp_path: Path, extra: str) -> tuple[int, str, str]:
    src = tmp_path / "args.txt"
    src.write_text(_MEGATRON + extra)
    res = CliRunner().invoke(app, ["import", "megatron", str(src), "--json", "--nodes", "1",
                                   "--devices-per-node", "4"])
    return res.exit_code, res.stdout, res.stderr


def test_megatron_flags_import_and_emit(tmp_path: Path) -> None:
    code, out, err = _import_megatron(
        tmp_path, " --overlap-moe-expert-parallel-comm --delay-wgrad-compute")
    assert code == 0, err
    scenario = json.loads(out)["scenario"]
    assert scenario["parallel"]["overlap"]["moe_a2a"] is True
    code, out, _ = _import_megatron(tmp_path, "")
    assert "moe_a2a" not in json.loads(out)["scenario"]["parallel"]["overlap"]
    sc = parse_scenario(scenario, "x.yaml")
    args = emit_megatron(sc, "megatron-core", False)  # read back to the same scenario
    assert "--overlap-moe-expert-parallel-comm" in args and "--delay-wgrad-compute" in args


def test_delay_wgrad_alone_is_refused_as_megatron_core_refuses_it(tmp_path: Path) -> None:
    code, _, err = _import_megatron(tmp_path, " --delay-wgrad-compute")
    assert code == 2
    assert ("--delay-wgrad-compute: needs --overlap-moe-expert-parallel-comm (Megatron-Core: "
            "'overlap_moe_expert_parallel_comm must be enabled when enabling "
            "delay_wgrad_compute')") in " ".join(err.split())


@pytest.mark.parametrize("section", ["comm_overlap", "model"])
def test_bridge_keys_map_to_the_key(tmp_path: Path, section: str) -> None:
    """Both names reach parallel.overlap.moe_a2a (Bridge imports dense models only so far,
    so the scenario rule answers, naming the Bridge key); delay_wgrad_compute alone is
    refused as Megatron-Core refuses it."""
    text = (ROOT / "scenarios" / "bridge" / "llama3-8b-b200-fp8cs.yml").read_text()
    src = tmp_path / "cfg.txt"
    src.write_text(text + f"\n{section}.overlap_moe_expert_parallel_comm=true\n"
                   f"{section}.delay_wgrad_compute=true\n")
    with pytest.raises(InputError) as e:
        import_file("bridge", str(src), "b200-sxm", 1, 8)
    assert e.value.key in (f"{section}.overlap_moe_expert_parallel_comm",
                           f"{section}.delay_wgrad_compute")
    assert "it needs parallel.expert > 1 (found 1)" in e.value.message
    assert "(scenario key parallel.overlap.moe_a2a)" in e.value.message
    src.write_text(text + f"\n{section}.delay_wgrad_compute=true\n")
    with pytest.raises(InputError) as e:
        import_file("bridge", str(src), "b200-sxm", 1, 8)
    assert e.value.key.endswith(f"{section}.delay_wgrad_compute")
    assert "true needs overlap_moe_expert_parallel_comm true" in e.value.message
