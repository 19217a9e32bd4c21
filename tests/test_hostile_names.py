"""Names, paths and keys that used to end in an internal error (exit 3), a stall or a silently
ignored setting (issue 25): each is now a clean exit 2 that says what to do, or a result."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from fs_faults import read_only_run

from simulator.config.resources import resolve_yaml

ROOT = Path(__file__).resolve().parents[1]
LONG = "a" * 300
DEEP = "d/" * 2000


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _refused(invoke_cli, *args: str) -> str:
    res = invoke_cli(*args)
    assert res.exit_code == 2, res.output
    return res.stderr


def test_a_name_longer_than_a_file_system_allows(invoke_cli):
    assert _refused(invoke_cli, "run", LONG) == (
        f"error: {'a' * 50}...{'a' * 27}: a name of 300 bytes; a file system allows at most "
        "255\n")
    assert _refused(invoke_cli, "run", "tiny-cpu", "--set", f"hardware={LONG}").startswith(
        f"error: scenarios/tiny-cpu.yaml with --set hardware={LONG}: hardware: found ")


@pytest.mark.parametrize("command", [["run", "tiny-cpu"], ["plan", "tiny-cpu"],
                                     ["sweep", "tiny-cpu", "--grid", "seed=1,2"]])
def test_an_out_folder_no_file_system_holds(invoke_cli, command):
    long = _refused(invoke_cli, *command, "--out", f"r/{LONG}")
    assert long == (f"error: --out: r/{'a' * 48}...{'a' * 27}: a folder name of 300 bytes; "
                    "a file system allows at most 255\n")
    deep = _refused(invoke_cli, *command, "--out", DEEP)
    assert deep == f"error: --out: {DEEP[:50]}...{DEEP[-28:-1]}: 2,000 folders deep; at most 64\n"


def test_a_read_only_out_folder(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = read_only_run(out, [sys.executable, "-m", "simulator", "run", "tiny-cpu", "--out",
                              str(out)], env)
    assert res.returncode == 2, res.stderr
    assert res.stderr == f"error: --out: {out}: the folder is read-only; choose a writable one\n"
    assert list(out.iterdir()) == []


def test_bundled_names_stay_in_their_folder(invoke_cli):
    assert resolve_yaml("tiny-cpu", "scenarios") is not None
    for name in ("../scenarios/tiny-cpu", "validation/../tiny-cpu",
                 str(resolve_yaml("tiny-cpu", "scenarios"))[:-5]):
        assert resolve_yaml(name, "scenarios") is None, name
    assert resolve_yaml("../hardware_profiles/a100-80gb", "scenarios") is None
    assert _refused(invoke_cli, "run", "../scenarios/tiny-cpu").startswith(
        "error: ../scenarios/tiny-cpu: no such file or bundled scenario; bundled: ")


def test_a_hugging_face_config_with_zero_heads(invoke_cli, write_file):
    cfg = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
           "num_attention_heads": 0, "intermediate_size": 512, "vocab_size": 1024,
           "max_position_embeddings": 128}
    write_file("config.json", json.dumps(cfg))
    write_file("s.yaml", {"name": "hf", "hardware": "a100-80gb",
                          "model": {"from_hf": "config.json"}})
    assert _refused(invoke_cli, "run", "s.yaml", "--json") == (
        "error: s.yaml: model.from_hf: the config's 'num_attention_heads' is 0; expected a "
        "positive integer\n")


@pytest.mark.parametrize("command", ["run", "verify", "plan"])
def test_rich_markup_in_a_name_is_printed_as_written(invoke_cli, command):
    res = invoke_cli(command, "tiny-cpu", "--set", 'name="[/]"')
    assert res.exit_code == 0, res.output
    assert "[/]" in res.stdout


def test_terminal_escapes_in_a_name_are_refused_and_never_echoed(invoke_cli):
    title = "\x1b]0;pwned\x07"
    # YAML's own escapes (\\e, \\a) in a double-quoted value put ESC and BEL in the name
    assert _refused(invoke_cli, "run", "tiny-cpu", "--set", 'name="x\\e]0;pwned\\a"') == (
        'error: scenarios/tiny-cpu.yaml with --set name="x\\e]0;pwned\\a": name: contains '
        "the control character '\\x1b' at position 1; a name is printed on terminals: use "
        "printable text\n")
    missing = _refused(invoke_cli, "run", f"no{title}such")
    assert "\x1b" not in missing and "\x07" not in missing
    assert missing.startswith("error: no\\x1b]0;pwned\\x07such: no such file or bundled ")


def test_an_unsorted_bandwidth_curve(invoke_cli):
    assert _refused(invoke_cli, "run", "tiny-cpu", "--set", "hardware=a100-80gb", "--set",
                    "hardware.intra_node.allreduce_busbw_GBps=[[1e6, 100], [1e3, 50]]") == (
        "error: hardware_profiles/a100-80gb.yaml with --set hardware.intra_node.allreduce_"
        "busbw_GBps=[[1e6, 100], [1e3, 50]]: intra_node.allreduce_busbw_GBps[1]: message size "
        "1000 bytes after 1e+06: the points must be in increasing order of message size, "
        "each size once\n")


def test_a_per_kind_bucket_without_its_mode(invoke_cli):
    key = "parallel.comm_fusion.all_reduce"
    assert _refused(invoke_cli, "run", "tiny-cpu", "--set", f"{key}.bucket_mb=4") == (
        f"error: scenarios/tiny-cpu.yaml with --set {key}.bucket_mb=4: {key}.bucket_mb: 4 is "
        f"read only with {key}.mode: size (found auto, which ignores it); add the mode or "
        "remove the key\n")
    both = invoke_cli("run", "tiny-cpu", "--json", "--set", f"{key}.bucket_mb=4",
                      "--set", f"{key}.mode=size")
    assert both.exit_code == 0, both.output


def test_a_search_that_nothing_reads(invoke_cli):
    assert _refused(invoke_cli, "run", "tiny-cpu", "--set",
                    "parallel.search=dynamic_programming") == (
        "error: scenarios/tiny-cpu.yaml with --set parallel.search=dynamic_programming: "
        "parallel.search: dynamic_programming is read only with parallel.mode: auto (the "
        "search fills the strategies left open; found mode semi_auto); set the mode or "
        "remove the key\n")
    auto = invoke_cli("run", "seed-a-propagate", "--json", "--set",
                      "parallel.search=sharding_propagation")
    assert auto.exit_code == 0, auto.output


def test_verify_counts_the_bytes_of_a_graph_without_products(invoke_cli, write_file):
    big = [2, 4, 8192, 8192]
    write_file("e.yaml", {
        "name": "elementwise", "hardware": "cpu-x86",
        "cluster": {"nodes": 1, "devices_per_node": 2},
        "training": {"optimizer": "sgd", "learning_rate": 0.01},
        "model": {"type": "graph", "dtype": "fp32", "mesh": {"h": 2},
                  "tensors": [{"name": "image", "shape": big, "kind": "input"},
                              {"name": "bias", "shape": big, "kind": "parameter"}],
                  "ops": [{"name": "add", "type": "Add", "inputs": ["image", "bias"],
                           "output": "s", "strategy": [[1, 1, 2, 1], [1, 1, 2, 1]]},
                          {"name": "relu", "type": "ReLU", "inputs": ["s"], "output": "r"},
                          {"name": "loss", "type": "ReduceMean", "inputs": ["r"],
                           "output": "loss", "attrs": {"axes": [0, 1, 2, 3]}}]}})
    assert _refused(invoke_cli, "verify", "e.yaml") == (
        "error: e.yaml: model.tensors: about 69 GB of tensors to hold (float64 values and "
        "gradients of every tensor of the graph, on one device and sharded, at the shapes "
        "model.tensors gives), above the limit of 4; change model.tensors or raise the limit "
        "with --max-gb 69\n")
