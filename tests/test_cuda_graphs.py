"""CUDA graphs (`training.cuda_graphs`, `simulator.lower.cuda_graphs`): a captured run of
kernels costs the host one graph launch instead of a launch per kernel; Megatron-Core's
refusals (a host sync inside a captured region among them) with their key paths; the
importers read Megatron-Core's names."""

from __future__ import annotations

import pytest

from simulator.api.core import load_scenario
from simulator.config.imports.cuda_graphs_import import SCOPES as IMPORT_SCOPES
from simulator.config.imports.load import import_file
from simulator.config.scenario.schema_graphs import SCOPES
from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.errors import InputError
from simulator.lower import cuda_graphs as cg
from simulator.lower.costs import CostModel, price_ops
from simulator.lower.moe_host import MoeHost, price_synced, price_unsynced
from tests.test_import_bridge import _error, _text
from tests.test_import_megatron import BASE, _run, _scenario

GROUPS = {"ep": GroupSpec(8, 1, 8)}
K, G = 10e-6, 70e-6  # host seconds per eager kernel, per graph launch


def _op(name: str, kind: str = "elementwise", grouped: bool = False) -> ComputeSpec:
    return ComputeSpec(name, kind, 1.0, 1.0, "bf16", grouped=grouped)


# an MoE layer's forward as the program orders it (attention, router, dispatch, experts)
FWD = (_op("ln1"), _op("qkv", "gemm"), _op("flash_attention", "attention"),
       _op("proj", "gemm"), _op("dropout_residual1"), _op("ln2"), _op("router", "gemm"),
       _op("moe_route"), _op("moe_dispatch"), CommSpec("l1.efc1.all_to_all", "all_to_all",
                                                      1e6, "ep"),
       _op("expert_fc1", "gemm", grouped=True), _op("expert_act"),
       _op("expert_fc2", "gemm", grouped=True), _op("moe_combine"), _op("dropout_residual2"))
BWD = (_op("dropout_residual2.bwd"), _op("moe_combine.bwd"), _op("expert_fc2.dgrad", "gemm",
       grouped=True), _op("expert_act.bwd"), _op("expert_fc1.dgrad", "gemm", grouped=True),
       CommSpec("l1.dispatch.all_to_all", "all_to_all", 1e6, "ep"), _op("moe_dispatch.bwd"),
       _op("moe_route.bwd"), _op("router.dgrad", "gemm"), _op("ln2.bwd"),
       _op("dropout_residual1.bwd"), _op("proj.dgrad", "gemm"),
       _op("flash_attention.bwd", "attention"), _op("qkv.dgrad", "gemm"), _op("ln1.bwd"))


def _graphs(impl: str, *scope: str) -> cg.Graphs | None:
    spec = load_scenario("validation/bridge2511-b200-qwen3-30b-a3b-8g", [
        f"training.cuda_graphs.impl={impl}", f"training.cuda_graphs.scope=[{','.join(scope)}]"]
        ).scenario.training.cuda_graphs
    return cg.graphs_for(spec, G)


def _costs(graphs: cg.Graphs | None, gpu_s: float = 0.0) -> CostModel:
    return CostModel(compute_s=lambda spec: gpu_s, collective_s=lambda c, n, g: 0.0,
                     send_recv_s=lambda n, i: 0.0, host_kernel_s=K, graphs=graphs)


def test_the_schema_and_the_importers_name_the_same_scopes():
    assert SCOPES == IMPORT_SCOPES


@pytest.mark.parametrize(("scope", "fwd", "bwd"), [
    # attention graphed: ln1 .. dropout_residual1, and its backward mirror
    (("attn",), {"ln1", "qkv", "flash_attention", "proj", "dropout_residual1"},
     {"dropout_residual1.bwd", "proj.dgrad", "flash_attention.bwd", "qkv.dgrad", "ln1.bwd"}),
    (("moe_router",), {"ln2", "router", "moe_route"},
     {"moe_route.bwd", "router.dgrad", "ln2.bwd"}),
    (("moe_router", "moe_preprocess"), {"ln2", "router", "moe_route", "moe_dispatch"},
     {"moe_dispatch.bwd", "moe_route.bwd", "router.dgrad", "ln2.bwd"}),
])
def test_the_captured_ops_are_megatron_cores_regions(scope, fwd, bwd):
    g = _graphs("transformer_engine", *scope)
    assert g is not None
    assert cg.captured_names(FWD, g, True) == fwd
    assert cg.captured_names(BWD, g, True) == bwd


def test_a_graphed_run_costs_one_launch_and_the_rest_their_kernels():
    """attn + moe_router + moe_preprocess: the forward's first 9 ops are one graph (one
    launch), the 6 others (the all-to-all, 2 grouped GEMMs of 4 local experts, the
    activation, the combine, the residual) eager: 1 + 4 + 1 + 4 + 1 + 1 kernels."""
    host = MoeHost(K, 4, graphs=_graphs("transformer_engine", "attn", "moe_router",
                                        "moe_preprocess"))
    floor = price_unsynced(FWD, _costs(None), GROUPS, host)
    assert floor.compute_s == pytest.approx(1 * G + 12 * K)
    eager = price_unsynced(FWD, _costs(None), GROUPS, MoeHost(K, 4))
    assert eager.compute_s == pytest.approx(21 * K)


def test_a_graphed_layer_costs_n_graphs_times_the_graph_launch():
    """With every op of a dense layer captured in two regions (attn, mlp: one run each in
    the forward), the launch floor is 2 graph launches, whatever the kernels."""
    dense = tuple(op for op in FWD if op.name in ("ln1", "qkv", "flash_attention", "proj",
                                                  "dropout_residual1", "ln2"))
    dense += (_op("fc1", "gemm"), _op("fc2", "gemm"), _op("dropout_residual2"))
    spec = load_scenario("validation/bridge2511-b200-llama3-8b-8g", [
        "training.cuda_graphs.impl=transformer_engine", "training.cuda_graphs.scope=[attn,mlp]"])
    g = cg.graphs_for(spec.scenario.training.cuda_graphs, G)
    # the two regions touch: one run, one launch; apart (an eager op between): two
    assert price_ops(dense, _costs(g), {}).compute_s == pytest.approx(G)
    apart = dense[:5] + (_op("eager_between"),) + dense[5:]
    assert price_ops(apart, _costs(g), {}).compute_s == pytest.approx(2 * G + K)
    assert price_ops(dense, _costs(None), {}).compute_s == pytest.approx(9 * K)


def test_full_iteration_prices_no_host_launch():
    g = cg.graphs_for(load_scenario("validation/bridge2511-b200-llama3-8b-8g", [
        "training.cuda_graphs.impl=local", "training.cuda_graphs.scope=[full_iteration]"]
        ).scenario.training.cuda_graphs, G)
    assert price_ops(FWD[:5], _costs(g), {}).compute_s == 0.0


def test_the_sync_stays_outside_the_preprocess_graph():
    """moe_preprocess captures the dispatcher's bookkeeping but not its device-to-host
    copies, which follow the graph eagerly before the sync (Megatron-LM 92c8482e
    token_dispatcher.py: cuda_dtoh_point 'before_ep_alltoall'): of 11 launches before each
    sync, 4 stay; the forward still syncs (a segment from the dispatch on)."""
    g = _graphs("transformer_engine", "moe_router", "moe_preprocess")
    host = MoeHost(K, 4, before_sync=cg.DTOH_COPIES, graphs=g)
    synced = price_synced(FWD, _costs(None, 1e-9), GROUPS, host)
    # from the sync: the experts' 12 launches and the attention's 5 (eager), the router's
    # graph, then the 4 copies; the device's 15 ns hide under them
    assert synced.compute_s == pytest.approx(12 * K + 5 * K + G + 4 * K, rel=1e-3)


def test_a_mutation_that_charges_captured_kernels_must_fail(monkeypatch):
    """Were captured ops charged as eager kernels, the closed form above would not hold."""
    real = cg.host_times
    monkeypatch.setattr("simulator.lower.moe_host.host_times",
                        lambda ops, cap, graphs, eager: real(ops, frozenset(), graphs, eager))
    with pytest.raises(AssertionError):
        test_a_graphed_run_costs_one_launch_and_the_rest_their_kernels()


@pytest.mark.parametrize(("sets", "key", "message"), [
    (["training.cuda_graphs.impl=transformer_engine", "training.cuda_graphs.scope=[]"],
     "training.cuda_graphs.scope", "[] (whole layer) would capture a dropless MoE layer's "
     "dispatcher, which waits for the device each forward (a host sync cannot be captured)"),
    (["training.cuda_graphs.impl=local", "training.cuda_graphs.scope=[full_iteration]"],
     "training.cuda_graphs.scope", "['full_iteration'] (whole iteration) would capture a "
     "dropless MoE layer's dispatcher"),
    (["training.cuda_graphs.impl=transformer_engine", "training.cuda_graphs.scope=[moe]"],
     "training.cuda_graphs.scope", "['moe'] (moe scope) would capture a dropless MoE"),
    (["training.cuda_graphs.impl=transformer_engine",
      "training.cuda_graphs.scope=[moe_preprocess]"], "training.cuda_graphs.scope",
     "moe_preprocess is captured only with moe_router"),
    (["training.cuda_graphs.impl=transformer_engine",
      "training.cuda_graphs.scope=[moe,moe_router]", "model.moe.capacity_factor=1.0"],
     "training.cuda_graphs.scope", "moe and moe_router both"),
    (["training.cuda_graphs.impl=transformer_engine",
      "training.cuda_graphs.scope=[moe_router,moe_preprocess]", "model.moe.capacity_factor=1.0"],
     "training.cuda_graphs.scope", "moe_preprocess with token dropping and the all-to-all "
     "dispatcher"),
    (["training.cuda_graphs.impl=local", "training.cuda_graphs.scope=[attn]"],
     "training.cuda_graphs.scope", "['attn'] with impl local"),
    (["training.cuda_graphs.impl=none", "training.cuda_graphs.scope=[attn]"],
     "training.cuda_graphs.scope",
     "is read only with training.cuda_graphs.impl transformer_engine or local"),
    (["training.cuda_graphs.impl=transformer_engine", "training.cuda_graphs.scope=[attn]",
      "parallel.recompute=full"], "parallel.recompute", "Megatron-Core captures no graph of "
     "a layer it recomputes whole"),
    (["training.cuda_graphs.impl=transformer_engine", "training.cuda_graphs.scope=[attn]",
      "parallel.recompute=selective"], "parallel.recompute_modules", "core_attn recomputes "
     "a part of the attn graph"),
    (["training.cuda_graphs.impl=transformer_engine", "training.cuda_graphs.scope=[mamba]"],
     "training.cuda_graphs.scope[0]", "mamba captures model.mamba's layers"),
])
def test_what_megatron_core_refuses_is_refused_by_key(sets, key, message):
    with pytest.raises(InputError) as err:
        load_scenario("validation/bridge2511-b200-qwen3-30b-a3b-8g", sets)
    assert err.value.key == key and message in err.value.message, err.value.message


def test_the_bridge_recipes_graphs_are_accepted():
    """The 25.11 recipes' scopes validate on their scenarios (GB300 DeepSeek-V3: attention,
    router and preprocess with moe_act recomputed)."""
    s = load_scenario("validation/bridge2511-gb300-deepseek-v3-mx-256g").scenario
    assert (s.training.cuda_graphs.impl, s.training.cuda_graphs.scope) == (
        "transformer_engine", ["attn", "moe_router", "moe_preprocess"])


MOE_ARGS = BASE + " --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2 " \
                  "--moe-token-dispatcher-type alltoall"


@pytest.mark.parametrize(("flags", "graphs"), [
    ("", None),
    (" --cuda-graph-impl transformer_engine --cuda-graph-scope moe_router moe_preprocess",
     {"impl": "transformer_engine", "scope": ["moe_router", "moe_preprocess"]}),
    (" --external-cuda-graph --cuda-graph-scope attn",
     {"impl": "transformer_engine", "scope": ["attn"]}),
])
def test_megatron_flags_set_the_graphs(tmp_path, flags, graphs):
    s = _scenario(tmp_path, MOE_ARGS + flags, "--nodes", "1", "--devices-per-node", "2")
    assert s["training"].get("cuda_graphs") == graphs


def test_megatron_enable_cuda_graph_is_local(tmp_path):
    s = _scenario(tmp_path, BASE + " --enable-cuda-graph --cuda-graph-scope full_iteration",
                  "--nodes", "1", "--devices-per-node", "2")
    assert s["training"]["cuda_graphs"] == {"impl": "local", "scope": ["full_iteration"]}


@pytest.mark.parametrize(("flags", "message"), [
    (" --cuda-graph-impl transformer_engine --cuda-graph-scope router",
     "--cuda-graph-scope: found ['router']; expected a list of full_iteration, attn"),
    (" --cuda-graph-impl local --enable-cuda-graph", "--enable-cuda-graph: with "
     "--cuda-graph-impl: Megatron-LM refuses both"),
    # read, then refused as the scenario's rule refuses it
    (" --cuda-graph-impl transformer_engine", "would capture a dropless MoE layer's "
     "dispatcher"),
])
def test_megatron_graph_flags_refused(tmp_path, flags, message):
    code, _, err = _run(tmp_path, MOE_ARGS + flags, "--nodes", "1", "--devices-per-node", "2")
    assert code == 2 and message in err, err


def test_bridge_keys_set_the_graphs(tmp_path):
    path = _text(tmp_path, {"model.cuda_graph_impl": "transformer_engine",
                            "model.cuda_graph_scope": "attn,mlp"})
    _, scenario = import_file("bridge", str(path), "h100-sxm", 8, 8)
    assert (scenario.training.cuda_graphs.impl, scenario.training.cuda_graphs.scope) == (
        "transformer_engine", ["attn", "mlp"])
    assert "model.cuda_graph_scope: found 'attn,router'" in _error(
        tmp_path, {"model.cuda_graph_impl": "transformer_engine",
                   "model.cuda_graph_scope": "attn,router"})


def test_mamba_captures_the_state_space_layers_and_attn_does_not():
    mixer = (_op("ln1"), _op("ssm_in_proj", "gemm"), _op("ssm_scan"), _op("proj", "gemm"),
             _op("dropout_residual1"))
    spec = load_scenario("nemotron-h-56b-32-h100", [
        "training.cuda_graphs.impl=transformer_engine",
        "training.cuda_graphs.scope=[attn,mamba]"]).scenario.training.cuda_graphs
    assert cg.captured_names(mixer, cg.graphs_for(spec, G), False) == {
        op.name for op in mixer}
    attn_only = cg.graphs_for(spec.model_copy(update={"scope": ["attn"]}), G)
    assert cg.captured_names(mixer, attn_only, False) == frozenset()
    assert cg.captured_names(FWD[:5], attn_only, False) == {op.name for op in FWD[:5]}


GRAPHED = ("--set", "training.cuda_graphs.impl=local",
           "--set", "training.cuda_graphs.scope=[full_iteration]")


@pytest.mark.parametrize(("framework", "noted"), [("reference", True), ("nemo", False)])
def test_a_profile_without_a_graph_launch_cost_is_named(invoke_cli, framework, noted):
    """A run with CUDA graphs on a stack whose profile states no `launch.graph_launch_us`
    prices each replay free on the host, and says so; nemo states its measured 65.3 us."""
    result = invoke_cli("run", "tiny-cpu", "--set", f"framework={framework}", *GRAPHED)
    assert result.exit_code == 0, result.output
    note = (f"training.cuda_graphs: the {framework} framework profile states no "
            "launch.graph_launch_us, so each graph replay is priced free on the host")
    assert (note in result.output) is noted
