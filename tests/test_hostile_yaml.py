"""YAML read as YAML 1.2 and bounded before any work (issue 25): numbers that YAML 1.1 reads
as sexagesimal, binary or octal, a file too large, too many nodes, a "billion laughs" file
of aliases of aliases. Each is a clean exit 2 naming the file; speed and memory of the
refusals are measured by benchmarks/hostile_inputs.py."""

from __future__ import annotations

import json
import textwrap

import pytest

from simulator.config.resources import resolve_yaml
from simulator.config.yamlio import MAX_FILE_BYTES, MAX_NODES, load_yaml_text

TINY = resolve_yaml("tiny-cpu", "scenarios").read_text()
LAUGHS = "".join(
    f"{b}: &{b} [" + ",".join([f"*{a}"] * 9 if a else ['"lol"'] * 9) + "]\n"
    for a, b in zip(["", *"abcdefgh"], "abcdefghi"))


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Files are named relative to tmp_path, as messages show them."""
    monkeypatch.chdir(tmp_path)


def _scenario(write_file, layers: str):
    assert "\n  layers: 2\n" in TINY
    return write_file("s.yaml", TINY.replace("\n  layers: 2\n", f"\n  layers: {layers}\n"))


@pytest.mark.parametrize("text", ["1:30", "0b10", "1_000", "190:20:30.15"])
def test_yaml_1_1_numbers_are_text_as_in_yaml_1_2(invoke_cli, write_file, text):
    """YAML 1.1 (PyYAML) reads 1:30 as 90, 0b10 as 2, 1_000 as 1000; YAML 1.2 as text."""
    assert load_yaml_text(f"a: {text}") == {"a": text}
    res = invoke_cli("run", _scenario(write_file, text).name, "--json")
    assert res.exit_code == 2
    assert res.stderr == f"error: s.yaml: model.layers: found '{text}'; expected an integer\n"


def test_a_leading_zero_is_refused_with_both_readings(invoke_cli, write_file):
    res = invoke_cli("run", _scenario(write_file, "010").name, "--json")
    assert res.exit_code == 2 and res.stderr == (
        "error: s.yaml: line 14, column 11: 010: a number with a leading zero is octal 8 in "
        "YAML 1.1 and 10 in YAML 1.2; write it without the zero (or 0o10 for octal)\n")
    cli = invoke_cli("run", "tiny-cpu", "--json", "--set", "model.layers=09")
    assert cli.exit_code == 2 and cli.stderr == (
        "error: --set: model.layers: 09: a number with a leading zero is a string in YAML 1.1 "
        "and 9 in YAML 1.2; write it without the zero (or 0o9 for octal)\n")
    assert load_yaml_text("a: [0, 00, -0, 007, +3]") == {"a": [0, 0, 0, 7, 3]}  # one reading


@pytest.mark.parametrize(("text", "value"), [("0x10", 16), ("0o10", 8), ("1e-4", 1e-4),
                                             (".5", 0.5), ("-.inf", float("-inf"))])
def test_yaml_1_2_numbers(text, value):
    assert load_yaml_text(f"a: {text}") == {"a": value}


def test_hexadecimal_layers_run_as_decimal(invoke_cli, write_file):
    hexa = invoke_cli("run", _scenario(write_file, "0x4").name, "--json")
    dec = invoke_cli("run", "tiny-cpu", "--json", "--set", "model.layers=4")
    assert hexa.exit_code == dec.exit_code == 0
    assert json.loads(hexa.stdout)["iteration_time_s"] == json.loads(dec.stdout)[
        "iteration_time_s"]


def test_billion_laughs_is_refused_before_it_is_expanded(invoke_cli, write_file):
    path = write_file("lol.yaml", TINY + "extra:\n" + textwrap.indent(LAUGHS, "  "))
    assert len(path.read_text().splitlines()) < 40  # 10^9 nodes in a few lines
    res = invoke_cli("run", path.name, "--json")
    assert res.exit_code == 2
    assert res.stderr == (f"error: lol.yaml: extra.f[0]: more than {MAX_NODES:,} YAML nodes "
                          "(aliases expanded); a scenario has a few hundred\n")


def test_laughs_in_a_sweep_grid_are_refused(invoke_cli, write_file):
    path = write_file("sw.yaml", LAUGHS + "sweep:\n  scenario: tiny-cpu\n  grid: {seed: *i}\n")
    res = invoke_cli("sweep", path.name, "--executor", "serial")
    assert res.exit_code == 2
    assert res.stderr == (f"error: sw.yaml: f[0]: more than {MAX_NODES:,} YAML nodes "
                          "(aliases expanded); a scenario has a few hundred\n")


def test_a_file_too_large_is_refused_unread(invoke_cli, write_file):
    path = write_file("big.yaml", TINY + "#" * MAX_FILE_BYTES + "\n")
    res = invoke_cli("verify", path.name, "--json")
    assert res.exit_code == 2 and res.stderr == (
        f"error: big.yaml: larger than {MAX_FILE_BYTES:,} bytes; a scenario or profile is a "
        "few kB (the largest bundled one is 10 kB)\n")


def test_too_many_nodes_are_refused(invoke_cli, write_file):
    path = write_file("many.yaml", TINY + "extra: [" + "1," * MAX_NODES + "1]\n")
    res = invoke_cli("plan", path.name, "--json")
    assert res.exit_code == 2
    assert res.stderr.startswith("error: many.yaml: extra[")
    assert res.stderr.endswith(f"]: more than {MAX_NODES:,} YAML nodes (aliases expanded); "
                               "a scenario has a few hundred\n")


def test_syntax_errors_read_the_same_with_or_without_libyaml(write_file, monkeypatch):
    """libyaml parses where PyYAML has it; its errors are given as the Python parser's."""
    from simulator.config import yamlio

    path = write_file("bad.yaml", "a: [1, 2\nb: 3\n")
    with pytest.raises(Exception) as fast:
        yamlio.read_yaml_file(path, "bad.yaml")
    monkeypatch.setattr(yamlio, "_CLoader", None)
    with pytest.raises(Exception) as slow:
        yamlio.read_yaml_file(path, "bad.yaml")
    assert str(fast.value) == str(slow.value)
    assert str(fast.value).startswith("bad.yaml: YAML syntax error at line 2, column 2: ")
