"""MindSpore's communication options (issue 10 items 2, 3 and 10): `parallel.recompute_comm`
(mp_comm_recompute / parallel_optimizer_comm_recompute), `parallel.enable_alltoall` and
`parallel.comm_subgraph` (communication subgraph extraction and reuse). Each moves bytes,
memory or build time the way the technique says, by a closed form; verify still matches one
device either way, and a mutation fails it."""

from __future__ import annotations

import pytest

from simulator.api import load_scenario, simulate
from simulator.api import load_scenario as load_cli
from simulator.errors import InputError
from simulator.lower.comm_graph import CommOp, distinct_ops
from simulator.models.cases import build_case
from simulator.numeric.execution import Faults
from simulator.program.model_program import transformer_program
from simulator.report import summary
from simulator.report.chrome import chrome_trace
from simulator.sharding.plan import build_plan
from simulator.simulation.verify import verify_scenario

FULL = ["parallel.recompute=full"]
# tiny-cpu: 2 layers, s=32, b=2, h=64, fp32, tensor 2, data 2, 2 micro-batches per replica
SBHE = 32 * 2 * 64 * 4
LAYERS, MICRO = 2, 2


def _run(name: str, *sets: str) -> dict:
    return summary(simulate(load_scenario(name, list(sets))))


def _collective(out: dict, kind: str) -> int:
    return out["communication"]["by_collective"].get(kind, 0)


def _refusal(name: str, *sets: str) -> str:
    with pytest.raises(InputError) as info:
        simulate(load_scenario(name, list(sets)))
    return f"{info.value.key}: {info.value.message}"


# ---- recompute_comm.tensor (mp_comm_recompute) ---------------------------------------------

@pytest.mark.parametrize("sp, kept", [("false", 2 * SBHE), ("true", 2 * SBHE + 2 * SBHE // 2)])
def test_kept_collective_outputs_per_layer(sp, kept):
    """Megatron's layer has two tensor-parallel collectives per half in the forward: two
    all-reduces of s*b*h (or with sequence parallel two all-gathers to s*b*h and two
    reduce-scatters to s*b*h/t). Kept, they add their outputs to the layer's saved bytes and
    leave the recompute pass."""
    base = FULL + [f"parallel.sequence_parallel={sp}"]
    rerun = transformer_program(load_cli("tiny-cpu", base).scenario)
    keep = transformer_program(load_cli("tiny-cpu", base + [
        "parallel.recompute_comm.tensor=false"]).scenario)
    assert keep.block("layer").saved_bytes - rerun.block("layer").saved_bytes == kept
    comms = [op for op in rerun.block("layer").recompute if hasattr(op, "collective")]
    assert len(comms) == (2 if sp == "false" else 4)
    assert len(keep.block("layer").recompute) == len(rerun.block("layer").recompute) - len(comms)
    assert not any(hasattr(op, "collective") for op in keep.block("layer").recompute)


def test_keeping_tp_collectives_moves_fewer_bytes_and_holds_more_memory():
    rerun = _run("tiny-cpu", *FULL)
    keep = _run("tiny-cpu", *FULL, "parallel.recompute_comm.tensor=false")
    # the recompute pass's two all-reduces of s*b*h per layer, every micro-batch
    assert _collective(rerun, "all_reduce") - _collective(keep, "all_reduce") == \
        MICRO * LAYERS * 2 * SBHE
    assert keep["memory"]["peak_bytes"] > rerun["memory"]["peak_bytes"]
    assert keep["iteration_time_s"] < rerun["iteration_time_s"]


# verify on a narrower tiny-cpu (the same layers, tensor 2 and micro-batches)
NARROW = ["model.seq_length=8", "model.hidden_size=32", "model.vocab_size=32"]


@pytest.fixture(scope="module")
def tp_verify():
    out = {v: verify_scenario(load_cli("tiny-cpu", NARROW + FULL + [
        f"parallel.recompute_comm.tensor={v}"]).scenario) for v in ("true", "false")}
    out["none"] = verify_scenario(load_cli("tiny-cpu", NARROW).scenario)
    return out


def test_verify_keeps_or_reruns_the_collectives(tp_verify):
    assert tp_verify["true"].ok and tp_verify["false"].ok
    assert tp_verify["false"].collectives == tp_verify["none"].collectives
    assert tp_verify["true"].collectives["all_reduce"] - \
        tp_verify["none"].collectives["all_reduce"] == MICRO * LAYERS * 2


def test_a_dropped_recompute_collective_fails_verify():
    """The recompute pass's first collective relabelled without moving data: the forward
    is right, the gradients are not."""
    sc = load_cli("tiny-cpu", NARROW + FULL).scenario
    case = build_case(sc)
    plan = build_plan(case.sharded, case.mesh, 4)
    # micro-batch 0's forward redistributions (an op's own collectives are not counted);
    # the next forward-direction collective is the first of its recompute pass
    first = sum(1 for _, s in plan.forward_items()
                if s is not None and s.is_comm and s.src != s.dst)
    bad = verify_scenario(sc, Faults(drop_comm=first))
    assert not bad.ok
    assert all(".grad" in c.tensor or ".updated" in c.tensor for c in bad.checks
               if not c.ok)


def test_tensor_false_is_refused_where_it_changes_nothing():
    assert _refusal("tiny-cpu", "parallel.recompute_comm.tensor=false") == (
        "parallel.recompute_comm.tensor: false keeps the outputs of the recomputed ops' "
        "model-parallel collectives; it needs parallel.recompute selective or full, or "
        "operators with attrs.recompute true (found none; allowed here: true)")
    assert _refusal("tiny-cpu", "parallel.recompute=selective",
                    "parallel.recompute_comm.tensor=false") == (
        "parallel.recompute_comm.tensor: false changes nothing here: the ops "
        "parallel.recompute=selective re-runs hold no model-parallel collective (allowed: "
        "true; false applies to recompute full with tensor, context or expert parallel)")


# ---- recompute_comm.optimizer (parallel_optimizer_comm_recompute) --------------------------

ZERO3 = FULL + ["parallel.optimizer_shard=3"]
# 8 devices: data 2 x pipeline 4, 8 layers: the first stage holds 4 micro-batches in flight
DEEP = ZERO3 + ["parallel.tensor=1", "parallel.pipeline=4", "cluster.devices_per_node=8",
                "training.global_batch_size=32", "model.layers=8"]


def test_kept_parameter_gather_moves_one_gather_less_per_micro_batch():
    """Re-run, each micro-batch's recompute pass all-gathers its chunk again: the kept
    gathers save micro-batches x the device's parameters x dtype bytes."""
    rerun, keep = (_run("tiny-cpu", *ZERO3, f"parallel.recompute_comm.optimizer={v}")
                   for v in ("true", "false"))
    params = transformer_program(load_cli("tiny-cpu", ZERO3).scenario)
    # the LM head's weight is the embedding's (tied) on one pipeline stage
    per_device = LAYERS * params.block("layer").params + params.block("embed").params + \
        params.block("head").params
    assert _collective(rerun, "all_gather") - _collective(keep, "all_gather") == \
        MICRO * per_device * 4
    assert _collective(rerun, "reduce_scatter") == _collective(keep, "reduce_scatter")


def test_kept_parameter_gather_holds_each_micro_batch_s_parameters():
    rerun, keep = (_run("tiny-cpu", *DEEP, f"parallel.recompute_comm.optimizer={v}")
                   for v in ("true", "false"))
    assert keep["memory"]["peak_bytes"] > rerun["memory"]["peak_bytes"]
    assert keep["memory"]["by_category_bytes"]["parameters"] > \
        rerun["memory"]["by_category_bytes"]["parameters"]
    assert _collective(keep, "all_gather") < _collective(rerun, "all_gather")


DP8 = ["model.seq_length=4", "model.hidden_size=16", "model.vocab_size=16",
       "model.num_heads=2"]  # verify-tiny-dp8 narrowed: 2 layers, 2 micro-batches


def test_verify_regathers_the_recomputed_layers_parameters():
    rerun_sc, keep_sc = (load_cli("verify-tiny-dp8", DP8 + ZERO3 + [
        f"parallel.recompute_comm.optimizer={v}"]).scenario for v in ("true", "false"))
    rerun, keep = verify_scenario(rerun_sc), verify_scenario(keep_sc)
    rerun_bad = verify_scenario(rerun_sc, Faults(skip_recompute_gather=True))
    assert rerun.ok and keep.ok
    case = build_case(rerun_sc)
    layer_params = sum(1 for t in case.sharded.of_kind("parameter") if t.name[0] == "l"
                       and t.name[1].isdigit())
    # verify runs 2 micro-batches per replica; each recompute gathers its layers again
    assert rerun.collectives["all_gather"] - keep.collectives["all_gather"] == \
        2 * layer_params
    assert not rerun_bad.ok  # the recompute's gathers skipped: wrong gradients


def test_optimizer_false_is_refused_where_it_changes_nothing():
    assert _refusal("tiny-cpu", "parallel.recompute=selective", "parallel.optimizer_shard=1",
                    "parallel.recompute_comm.optimizer=false") == (
        "parallel.recompute_comm.optimizer: false keeps the optimizer-parallel all-gather of "
        "the parameters the recomputed ops read; it needs parallel.recompute full (found "
        "selective), parallel.optimizer_shard 3 (found 1) (allowed here: true)")


# ---- enable_alltoall -------------------------------------------------------------------------

def test_alltoall_off_gathers_the_axis_times_the_block():
    """Seed (a)'s all-to-all runs on a mesh axis of 2: without it the same move gathers the
    whole tensor (2 x the block) and slices it, and the step takes no less time."""
    on = _run("seed-a-weight-ops")
    off = _run("seed-a-weight-ops", "parallel.enable_alltoall=false")
    assert _collective(off, "all_to_all") == 0 < _collective(on, "all_to_all")
    assert _collective(off, "all_gather") - _collective(on, "all_gather") == \
        2 * _collective(on, "all_to_all")
    assert off["iteration_time_s"] >= on["iteration_time_s"]


def test_alltoall_off_on_moe_dispatch():
    on = _run("moe-tiny-verify")
    off = _run("moe-tiny-verify", "parallel.enable_alltoall=false")
    assert _collective(off, "all_to_all") == 0 < _collective(on, "all_to_all")
    assert off["communication"]["bytes_per_device"] > on["communication"]["bytes_per_device"]
    assert off["iteration_time_s"] > on["iteration_time_s"]


def test_verify_is_unchanged_without_alltoall():
    runs = {v: verify_scenario(load_cli("seed-a-weight-ops", [
        f"parallel.enable_alltoall={v}"]).scenario) for v in ("true", "false")}
    assert runs["true"].ok and runs["false"].ok
    assert "all_to_all" in runs["true"].collectives
    assert "all_to_all" not in runs["false"].collectives
    assert runs["false"].collectives["all_gather"] > runs["true"].collectives["all_gather"]
    bad = verify_scenario(load_cli("seed-a-weight-ops", [
        "parallel.enable_alltoall=false"]).scenario, Faults(wrong_slice=True))
    assert not bad.ok


def test_alltoall_off_is_refused_without_an_alltoall():
    assert _refusal("tiny-cpu", "parallel.enable_alltoall=false") == (
        "parallel.enable_alltoall: false changes nothing here: no redistribution of this "
        "scenario's plan is an all-to-all (allowed: true; the MoE dispatch and combine are "
        "all-to-alls)")


# ---- comm_subgraph ---------------------------------------------------------------------------

def _graph(*sets: str) -> dict:
    return _run("tiny-cpu", *sets)["comm_subgraph"]


PER_MICRO = LAYERS * 4 + 1 + 4  # tiny-cpu's tensor-parallel collectives per micro-batch
UNITS = 4  # embedding, 2 layers, head: ZeRO-3's gather units


def test_comm_ops_of_the_compiled_graph():
    """tiny-cpu, per micro-batch: 2 layers x (2 forward + 2 backward tensor-parallel
    all-reduces), the vocabulary-parallel embedding's all-reduce, the head's 3 forward
    (cross-entropy max, sum, target) and 1 backward; once per step one gradient bucket:
    three classes (all-reduce of s*b*h on tp, of s*b on tp, the bucket on dp)."""
    for batch, micro in ((8, 2), (16, 4)):
        got = _graph("parallel.comm_subgraph.reuse=false",
                     f"training.global_batch_size={batch}")
        assert got["comm_ops"] == micro * PER_MICRO + 1
        assert got["distinct_ops"] == got["comm_ops"]
        assert got["classes"] == 3
        assert got["build_s"] == pytest.approx(got["distinct_ops"] * 10.0 / 1e3)


def test_comm_ops_count_each_block_copy_once():
    """A mixture of experts every 2 layers of a 2-layer model: the program's layer groups
    are the dense layer and the MoE layer, one copy each (`models.layers`), and the
    compiled graph holds each block copy's collectives once per micro-batch."""
    moe = ("model.moe={experts: 2, top_k: 1, every: 2}",)
    got = _graph("parallel.comm_subgraph.reuse=false", *moe)
    prog = simulate(load_scenario("tiny-cpu", list(moe))).program
    assert [(b.name, b.repeat, b.layers) for b in prog.cut()] == [("layer0", 1, 1),
                                                                   ("layer1", 1, 1)]
    per_micro = sum(b.repeat * sum(hasattr(op, "collective")
                                   for op in b.fwd + b.recompute + b.bwd)
                    for b in prog.blocks)
    assert got["comm_ops"] == MICRO * per_micro + 1  # + the one gradient bucket


@pytest.mark.parametrize("sets, ops", [
    (["parallel.optimizer_shard=1"], MICRO * PER_MICRO + 2),  # + the parameter all-gather
    (["parallel.optimizer_shard=2"], MICRO * PER_MICRO + 3),  # + micro-batch 0's scatter
    # every micro-batch: each unit gathered for its forward and backward, reduce-scattered
    (["parallel.optimizer_shard=3"], MICRO * (PER_MICRO + 3 * UNITS)),
    # full recompute re-runs 2 all-reduces per layer and gathers the chunk once more
    (["parallel.optimizer_shard=3", *FULL],
     MICRO * (PER_MICRO + LAYERS * 2 + 2 * UNITS + 1)),
])
def test_comm_ops_follow_the_optimizer_level(sets, ops):
    assert _graph("parallel.comm_subgraph.reuse=false", *sets)["comm_ops"] == ops


def test_reuse_compiles_one_operator_per_class_and_keeps_the_step_time():
    off = _run("tiny-cpu", "parallel.comm_subgraph.reuse=false")
    on = _run("tiny-cpu", "parallel.comm_subgraph.reuse=true",
              "parallel.comm_subgraph.build_ms_per_op=50")
    assert on["comm_subgraph"]["distinct_ops"] == on["comm_subgraph"]["classes"] == 3
    assert on["comm_subgraph"]["build_s"] == pytest.approx(3 * 0.05)
    assert on["comm_subgraph"]["build_s"] < off["comm_subgraph"]["build_s"]
    assert on["iteration_time_s"] == off["iteration_time_s"]


def test_reuse_cap():
    """MS_COMM_COMPILER_OPT caps the operators replaced by calls: the largest classes
    first, the rest compiled one by one."""
    ops = {CommOp("all_reduce", "tp", 8.0): 10, CommOp("all_reduce", "tp", 4.0): 3,
           CommOp("all_reduce", "dp", 1.0): 1}
    from collections import Counter
    assert distinct_ops(Counter(ops), False, 1000) == 14
    assert distinct_ops(Counter(ops), True, 1000) == 3
    assert distinct_ops(Counter(ops), True, 11) == 1 + (1 + 2) + 1  # 10 then 1 of 3
    assert _graph("parallel.comm_subgraph.reuse=true",
                  "parallel.comm_subgraph.max_reused_ops=4")["distinct_ops"] == 27 - 4 + 1


def test_trace_marks_the_communication_slices():
    result = simulate(load_scenario("tiny-cpu", ["parallel.comm_subgraph.reuse=true"]))
    trace = chrome_trace(result)
    assert trace["otherData"]["comm_subgraph"]["distinct_ops"] == 3
    comm = [e for e in trace["traceEvents"] if e.get("cat") in ("comm", "tp_comm")]
    assert comm and all(e["args"]["compiled_as"].startswith("subgraph call") for e in comm)
    bucket = next(e for e in comm if e["cat"] == "comm")
    assert bucket["args"]["comm_op"].startswith("all_reduce[dp] ")
    plain = chrome_trace(simulate(load_scenario("tiny-cpu", [])))
    assert "comm_subgraph" not in plain["otherData"]
    assert not any("compiled_as" in e.get("args", {}) for e in plain["traceEvents"])


def test_comm_subgraph_on_one_device_is_refused():
    with pytest.raises(InputError) as info:
        load_cli("tiny-cpu", ["cluster.devices_per_node=1", "parallel.data=1",
                              "parallel.tensor=1", "parallel.comm_subgraph.reuse=true"])
    assert info.value.key == "parallel.comm_subgraph"
