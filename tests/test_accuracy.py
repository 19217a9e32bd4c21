"""benchmarks/accuracy.py: the bundled validation cases load, and the error arithmetic is right.

The MAPE itself is a measurement (printed by the benchmark), never asserted here."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from benchmarks import accuracy
from simulator.config.hardware.load import load_profile
from simulator.config.scenario import parse_scenario, resolve_hardware
from simulator.config.yamlio import read_yaml_file
from simulator.simulation.simulate import simulate

REPO = Path(__file__).resolve().parent.parent
CASES = sorted((REPO / "scenarios" / "validation").glob("*.yaml"))
TINY = REPO / "scenarios" / "tiny-cpu.yaml"


def test_one_hundred_eleven_cases_are_bundled() -> None:
    """19 Megatron-LM runs and 92 runs of five other stacks, among them Megatron-Bridge 25.11's
    Llama-3-8B on B200 and its eight MoE runs (GPT-OSS-120B and Qwen3-30B-A3B on H100, B200,
    GB200 and GB300) and the fifteen context-parallel NeMo runs (NeMo 24.07's Llama-3 8B/70B
    and dgxc-benchmarking 24.09's Llama-3.1 8B/70B/405B, CP 2) and Megatron-Bridge 25.11's
    Llama-3.1-405B on 1024 H100 and 128 B200 (CP 2, 126 layers on 64 virtual stages); then the
    rest of that page's pre-training rows: Qwen3-235B-A22B on 256 H100, 64 B200, 256 GB200 and
    256 GB300, DeepSeek-V3 on 256 B200 (FP8-MX), GB200 and GB300 (BF16 and FP8-MX), Llama-3-8B
    FP8-CS/FP8-MX on 8 GB200/GB300 and FP8-MX on 8 B200, Llama-3.1-405B on 256 GB200/GB300 and
    FP8-MX on 128 B200."""
    assert len(CASES) == 111


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem[:12])
def test_case_body_names_the_framework_of_its_header(path: Path) -> None:
    """A case with a `# framework:` header line runs under that framework profile."""
    import re

    text = path.read_text()
    header = re.search(r"^# framework: (\S+)", text, re.M)
    body = re.search(r"^framework: (\S+)", text, re.M)
    assert (header is None) == (body is None)
    if header:
        assert body.group(1) == header.group(1).split("/")[0]


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem[:4])
def test_validation_case_loads_and_has_a_target(path: Path) -> None:
    scenario = parse_scenario(read_yaml_file(path, str(path)), str(path))
    load_profile(str(resolve_hardware(scenario, path.parent)))
    target = accuracy.header_target(path.read_text())
    assert target is not None and target > 0


def test_error_pct_is_signed_relative_error() -> None:
    assert accuracy.error_pct(1.1, 1.0) == pytest.approx(10.0)
    assert accuracy.error_pct(0.8, 1.0) == pytest.approx(-20.0)
    with pytest.raises(ValueError):
        accuracy.error_pct(1.0, 0.0)


def test_mape_averages_absolute_errors() -> None:
    assert accuracy.mape([10.0, -20.0, 0.0]) == pytest.approx(10.0)
    assert math.isnan(accuracy.mape([]))


def test_header_target_reads_the_comment() -> None:
    text = "# source: x\n# target_iteration_time_s: 3.52802\nname: a\n"
    assert accuracy.header_target(text) == pytest.approx(3.52802)
    assert accuracy.header_target("name: a\n") is None


def _synthetic_case(tmp_path: Path, target: float) -> Path:
    """tiny-cpu with a published-run header: source S, model M, target seconds."""
    header = (f"# source: Synthetic source\n# model: M (1B), 4 x cpu\n"
              f"# target_iteration_time_s: {target}\n")
    path = tmp_path / "cases" / "r900-synthetic.yaml"
    path.parent.mkdir()
    path.write_text(header + TINY.read_text())
    return path


def _predicted(path: Path) -> float:
    scenario = parse_scenario(read_yaml_file(path, str(path)), str(path))
    return simulate(scenario, load_profile("cpu-x86")).iteration_time_s


def test_synthetic_case_error_from_header(tmp_path: Path, capsys) -> None:
    path = _synthetic_case(tmp_path, 1.0)
    predicted = _predicted(path)
    target = predicted / 1.25  # the model is 25% slower than this "measurement"
    path.write_text(path.read_text().replace("target_iteration_time_s: 1.0",
                                             f"target_iteration_time_s: {target!r}"))
    assert accuracy.main(["--json", "--dir", str(path.parent),
                          "--csv", str(tmp_path / "absent.csv")]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["runs"]
    assert row["run"] == "r900-synthetic" and row["devices"] == 4
    assert (row["tp"], row["pp"], row["dp"]) == (2, 1, 2)
    assert row["predicted_s"] == pytest.approx(predicted)
    assert row["error_pct"] == pytest.approx(25.0)
    assert out["mape_pct"] == pytest.approx(25.0)
    assert out["targets_from"] == "case headers"


def test_csv_target_wins_over_header(tmp_path: Path, capsys) -> None:
    path = _synthetic_case(tmp_path, 123.0)
    predicted = _predicted(path)
    table = tmp_path / "runs.csv"
    with table.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["source", "model_name", "num_gpus", "target_iteration_time_s"])
        w.writerow(["Synthetic source", "M", 4, predicted / 0.5])
    accuracy.main(["--json", "--dir", str(path.parent), "--csv", str(table)])
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert row["target_s"] == pytest.approx(predicted * 2)
    assert row["error_pct"] == pytest.approx(-50.0)


def test_table_output_names_mape_and_worst(tmp_path: Path, capsys) -> None:
    path = _synthetic_case(tmp_path, 1.0)
    assert accuracy.main(["--dir", str(path.parent), "--csv", str(tmp_path / "no.csv")]) == 0
    out = capsys.readouterr().out
    assert "r900-synthetic" in out and "MAPE" in out and "worst" in out


def test_default_reads_the_validation_and_the_calibration_runs(tmp_path: Path, capsys,
                                                               monkeypatch) -> None:
    """Every bundled published run counts (issue 9): without --dir both folders are read;
    --dir repeats."""
    one = _synthetic_case(tmp_path, 1.0)
    other = tmp_path / "calibration" / "r901-synthetic.yaml"
    other.parent.mkdir()
    other.write_text(one.read_text())
    monkeypatch.setattr(accuracy, "DEFAULT_DIR", one.parent)
    monkeypatch.setattr(accuracy, "CALIBRATION_DIR", other.parent)
    csv_path = str(tmp_path / "absent.csv")
    accuracy.main(["--json", "--csv", csv_path])
    assert [r["run"] for r in json.loads(capsys.readouterr().out)["runs"]] == [
        "r900-synthetic", "r901-synthetic"]
    accuracy.main(["--json", "--csv", csv_path, "--dir", str(other.parent)])
    assert [r["run"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["r901-synthetic"]
    assert sorted(p.name for p in (REPO / "scenarios" / "calibration").glob("*.yaml")) == [
        "nemo-h100-gpt3-175b-128g.yaml", "nemo-h100-gpt3-175b-2048g.yaml",
        "nemo-h100-nemotron4-15b-16g.yaml", "nemo-h100-nemotron4-15b-2048g.yaml"]


def _row(run: str, target_s: float, error: float, hardware: str = "h100-sxm",
         shard: int = 1, regime: str = "") -> accuracy.Row:
    predicted = target_s * (1 + error / 100)
    return accuracy.Row(run, hardware, 8, 1, 1, 8, predicted, target_s, error, 0.4,
                        "nemo", regime=regime, optimizer_shard=shard)


def test_issue_24_classes_pick_their_runs_and_judge_their_mape() -> None:
    rows = [_row("small-fast", 0.5, -20.0), _row("small-ok", 0.9, 4.0),
            _row("gb200", 3.0, 6.0, hardware="gb200-nvl72"),
            _row("fsdp", 5.0, -12.0, shard=3), _row("moe", 2.0, 9.0, regime="fp8+moe")]
    c = accuracy.classes(rows)
    assert c["runs under 1 s"]["runs"] == ["small-fast", "small-ok"]
    assert c["runs under 1 s"]["mape_pct"] == pytest.approx(12.0)
    assert c["runs under 1 s"]["worst_run"] == "small-fast"
    assert c["runs under 1 s"]["within_target"] is False
    assert c["B200/GB200 (Blackwell)"]["runs"] == ["gb200"]
    assert c["B200/GB200 (Blackwell)"]["within_target"] is True
    assert c["FSDP / ZeRO-3"]["runs"] == ["fsdp"]
    assert c["MoE"]["runs"] == ["moe"] and c["MoE"]["worst_pct"] == pytest.approx(9.0)
    empty = accuracy.classes(rows[:1])["MoE"]
    assert empty["runs"] == [] and empty["within_target"] is None
