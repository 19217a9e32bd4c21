"""Bad input on the command line: exit status 2, one exact message on stderr naming the
file and dotted key, nothing on stdout, never a traceback (docs/contract.md section 1)."""

from __future__ import annotations

import pytest
from test_scenario_validation import DATA_CASES, FILE_CASES, SET_CASES

from simulator.config.yamlio import apply_overrides


def _assert_bad_input(result, expected: str) -> None:
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == f"error: {expected}\n"


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("command", ["run", "verify"])
@pytest.mark.parametrize("content, expected", [c[1:] for c in FILE_CASES],
                         ids=[c[0] for c in FILE_CASES])
def test_unusable_file(invoke_cli, write_file, in_tmp, command, content, expected):
    write_file("s.yaml", content)
    _assert_bad_input(invoke_cli(command, "s.yaml"), expected)


@pytest.mark.parametrize("edits, expected", [c[1:] for c in DATA_CASES],
                         ids=[c[0] for c in DATA_CASES])
def test_bad_value(invoke_cli, write_file, in_tmp, tiny_scenario_data, fake_bundled_profiles,
                   edits, expected):
    write_file("s.yaml", apply_overrides(tiny_scenario_data, edits))
    _assert_bad_input(invoke_cli("run", "s.yaml", "--json"), expected)


@pytest.mark.parametrize("overrides, expected", [c[1:] for c in SET_CASES],
                         ids=[c[0] for c in SET_CASES])
def test_bad_override(invoke_cli, write_file, in_tmp, tiny_scenario_data,
                      fake_bundled_profiles, overrides, expected):
    write_file("s.yaml", tiny_scenario_data)
    args = [a for item in overrides for a in ("--set", item)]
    _assert_bad_input(invoke_cli("run", "s.yaml", *args), expected)


def test_unknown_scenario_lists_bundled(invoke_cli, in_tmp):
    from simulator.config.resources import list_bundled

    names = list_bundled("scenarios")
    assert "gpt3-175b-1024-a100" in names
    top = [n for n in names if "/" not in n]
    folders = list(dict.fromkeys(n.split("/")[0] for n in names if "/" in n))  # CLI order
    counts = [f"{f}/* ({sum(n.startswith(f + '/') for n in names)})" for f in folders]
    _assert_bad_input(invoke_cli("run", "gpt3-175b-1024-a10"),
                      "gpt3-175b-1024-a10: no such file or bundled scenario (did you mean "
                      f"'gpt3-175b-1024-a100'?); bundled: {', '.join(top + counts)} "
                      "(`shardsim scenarios` lists them)")


def test_missing_file_path(invoke_cli, in_tmp):
    result = invoke_cli("verify", "nowhere/s.yaml")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: nowhere/s.yaml: no such file or bundled scenario")


def test_comm_unknown_collective(invoke_cli, fake_bundled_profiles):
    _assert_bad_input(
        invoke_cli("comm", "allreduce", "--bytes", "1G", "--devices", "8", "--hardware",
                   "a100-80gb"),
        "COLLECTIVE: found 'allreduce'; allowed: all_reduce, all_gather, reduce_scatter, "
        "all_to_all, broadcast, send_recv (did you mean 'all_reduce'?)")


def test_comm_unknown_hardware(invoke_cli, fake_bundled_profiles):
    _assert_bad_input(
        invoke_cli("comm", "all_reduce", "--bytes", "1G", "--devices", "8", "--hardware",
                   "h100"),
        "--hardware: found 'h100', which is neither a bundled profile nor a file (did you "
        "mean 'h100-sxm'?); bundled: a100-80gb, cpu-x86, h100-sxm")


@pytest.mark.parametrize("text", ["many", "-5", "1Q", ""])
def test_comm_bad_bytes(invoke_cli, text):
    result = invoke_cli("comm", "all_reduce", "--bytes", text, "--devices", "8",
                        "--hardware", "a100-80gb")
    _assert_bad_input(result, f"--bytes: found {text!r}; expected a byte count such as "
                      "1073741824, 1G or 1GiB (binary), 1GB (10^9)")


@pytest.mark.parametrize("args", [
    ["run"],                                        # missing SCENARIO
    ["run", "tiny-cpu", "--fidelity", "exact"],     # not a choice
    ["comm", "all_reduce", "--bytes", "8"],         # missing options
    ["comm", "all_reduce", "--bytes", "8", "--devices", "two", "--hardware", "x"],
    ["simulate"],                                   # no such command
])
def test_usage_errors_exit_2_without_traceback(invoke_cli, args):
    result = invoke_cli(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "--help` lists the options)" in result.stderr


def test_internal_error_is_one_line(invoke_cli, monkeypatch):
    import simulator.api.tools as listing  # the scenario listing the command prints

    def broken(name):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(listing, "_scenario_row", broken)
    result = invoke_cli("scenarios")
    assert result.exit_code == 3
    assert result.stderr == ("error: internal error: ZeroDivisionError: boom (a bug in "
                             "shardsim; run with SHARDSIM_DEBUG=1 to see the traceback)\n")


@pytest.mark.parametrize("command", ["run", "verify"])
def test_bad_hardware_override_is_blamed(invoke_cli, write_file, in_tmp, tiny_scenario_data,
                                         command):
    from simulator.config.resources import list_bundled

    if "a100-80gb" not in list_bundled("hardware_profiles"):
        pytest.skip("the a100-80gb profile has not landed yet")
    write_file("s.yaml", apply_overrides(tiny_scenario_data, ["hardware=a100-80gb"]))
    result = invoke_cli(command, "s.yaml", "--set", "hardware.memry_GB=40")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(
        "error: hardware_profiles/a100-80gb.yaml with --set hardware.memry_GB=40: memry_GB: "
        "unknown key (did you mean 'memory_GB'?); allowed: ")
    assert result.stderr.count("\n") == 1


def test_out_that_is_a_file(invoke_cli, write_file, in_tmp):
    write_file("taken", "not a folder")
    result = invoke_cli("run", "tiny-cpu", "--out", "taken/sub")
    if result.exit_code == 3 and "ModuleNotFoundError" in result.stderr:
        pytest.skip("simulate has not landed")
    _assert_bad_input(result, "--out: taken/sub: cannot create the folder (Not a directory)")
