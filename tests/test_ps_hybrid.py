"""MindSpore's hybrid parameter-server mode (`Parameter.set_param_ps` on some parameters:
`parallel.parameter_server.parameters`; MindSpore r2.4 "Parameter Server", Overview): the
listed parameters pushed to, updated on and pulled from the servers, the others all-reduced
among the workers, which update them and hold their optimizer states. Bytes and memory
split by parameter (closed forms), the push/pull step of the served part, `verify` equal to
one device, and the error on a name the model lacks."""

from __future__ import annotations

import json

import pytest
from model_kinds import refused_flat

from simulator.api.core import load_scenario
from simulator.simulation.verify import verify_scenario

# a100-80gb: a worker's NIC share and a cpu-x86 server's NIC, both 200 Gb/s x 0.91 bus
# fraction, 14 us network step (as tests/test_parameter_server.py)
NIC_BPS = 200e9 / 8 * 0.91
LATENCY_S = 14e-6


def _doc(parameters: list[str] | None) -> dict:
    ps: dict = {"servers": 2, "sync": True}
    if parameters is not None:
        ps["parameters"] = parameters
    return {
        "name": "ps-hybrid", "hardware": "a100-80gb",
        "cluster": {"nodes": 2, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 2, "hidden_size": 512, "num_heads": 8,
                  "seq_length": 256, "vocab_size": 4096, "dtype": "fp32"},
        "training": {"global_batch_size": 32, "micro_batch_size": 1, "optimizer": "adam"},
        "parallel": {"data": 16, "mode": "parameter_server", "parameter_server": ps},
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


def test_traffic_and_states_split_by_parameter(invoke_cli, tmp_path):
    whole = _run(invoke_cli, tmp_path, _doc(None))
    out = _run(invoke_cli, tmp_path, _doc(["wte", "wpe"]))
    ps = out["parameter_server"]
    total = whole["parameter_server"]["served_params"]
    # the two tables: 4096 x 512 tokens and 256 x 512 positions
    assert ps["served_params"] == 4096 * 512 + 256 * 512
    assert ps["served_params"] + ps["all_reduced_params"] == total
    assert whole["parameter_server"]["all_reduced_params"] == 0
    assert out["communication"]["by_collective"] == {
        "ps_push": 4 * ps["served_params"], "ps_pull": 4 * ps["served_params"],
        "all_reduce": 4 * ps["all_reduced_params"]}
    assert ps["bytes_in_per_server"] == 16 * 4 * ps["served_params"] / 2
    # the workers hold Adam's two fp32 moments of what they update (an fp32 model: no
    # master copy); the servers hold the rest
    mem = out["memory"]["by_category_bytes"]
    assert mem["optimizer_states"] == 8 * ps["all_reduced_params"]
    assert whole["memory"]["by_category_bytes"]["optimizer_states"] == 0
    assert mem["parameters"] == whole["memory"]["by_category_bytes"]["parameters"]


def test_the_served_part_is_pushed_and_pulled_in_closed_form(invoke_cli, tmp_path):
    """Without overlap and in one bucket, the exposed communication is the push and the
    pull of the served bytes (the two servers' NICs take 16 / 2 workers' pushes) plus the
    workers' all-reduce of the rest; the latter is what the full data-parallel run of the
    same rest costs beyond it."""
    sets = ("parallel.overlap.grad_reduce=false", "parallel.comm_fusion.bucket_mb=100000")
    out = _run(invoke_cli, tmp_path, _doc(["wte", "wpe"]), *sets)
    m = 4 * out["parameter_server"]["served_params"]
    transfer = LATENCY_S + 16 * m / (2 * NIC_BPS)
    assert out["parameter_server"]["bottleneck"] == "server_nic"
    exposed = out["breakdown_s"]["comm_exposed"]
    assert exposed > 2 * transfer
    everything = _run(invoke_cli, tmp_path, _doc(None), *sets)
    m_all = 4 * everything["parameter_server"]["served_params"]
    assert everything["breakdown_s"]["comm_exposed"] == pytest.approx(
        2 * (LATENCY_S + 16 * m_all / (2 * NIC_BPS)), rel=1e-9)
    # the rest's ring all-reduce over 16 workers beats pushing it through 2 servers
    assert exposed < everything["breakdown_s"]["comm_exposed"]


def test_verify_equals_one_device_and_counts_both_paths():
    s = load_scenario("ps-hybrid-gpt2-medium-16-a100", []).scenario
    result = verify_scenario(s)
    assert result.ok, [c for c in result.checks if not c.ok]
    # 2 tables x 4 servers x 16 workers pushed; the other 34 parameters all-reduced once
    assert result.collectives == {"ps_push": 128, "ps_pull": 128, "all_reduce": 34}
    assert any("2 parameters pushed to and pulled from the servers (wpe, wte)" in n
               for n in result.notes)


def test_asynchronous_hybrid_compares_only_the_served_part_with_the_stale_reference():
    s = load_scenario("ps-hybrid-gpt2-medium-16-a100",
                      ["parallel.parameter_server.sync=false"]).scenario
    result = verify_scenario(s)
    assert result.ok, [c for c in result.checks if not c.ok]


def test_a_name_the_model_lacks_is_refused(invoke_cli, tmp_path):
    path = tmp_path / "ps.json"
    path.write_text(json.dumps(_doc(["wte", "wpx"])))
    result = invoke_cli("run", str(path))
    text = refused_flat(result)
    assert ("parallel.parameter_server.parameters[1]: 'wpx' is no parameter of the model "
            "(did you mean 'wpe'?) (its parameters: wte, wpe, ln1.g,") in text, text
