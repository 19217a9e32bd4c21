"""Seeded fuzzing of `shardsim calibrate` over malformed nccl-tests logs and GEMM sweeps
(issue 27): tokens dropped, doubled or replaced by junk (non-finite and huge numbers,
unicode, binary), lines cut, duplicated or shuffled, rank lines removed. Every command must
answer 0 or 2 (never 3, never a traceback), and a refusal must be one `error: ...` line that
names the file. The CLI runs in-process (typer's CliRunner); the logs are cut to a few rows
so that the ones that still read fit in well under a second.
"""

from __future__ import annotations

import random
from pathlib import Path

from typer.testing import CliRunner

from simulator.cli import app

SEED = 27
CASES = 80
DATA = Path(__file__).parent / "data" / "calibrate"
JUNK = ["nan", "inf", "-1", "0", "1e308", "9" * 400, "abc", "N/A", "", "\u4e2d", "\x00",
        "1e-300", "-0.0", "#", "|", "@", "sum", "none", "4096x4096x4096", "0x10",
        "\u00b2", "\u0663", "9" * 5000, "Rank", "-1"]


def _small_log(name: str) -> list[str]:
    lines = (DATA / name).read_text().split("\n")
    rows = [i for i, ln in enumerate(lines) if ln.strip()[:1].isdigit()]
    keep = set(rows[3:5] + rows[-3:])
    return [ln for i, ln in enumerate(lines) if i not in rows or i in keep]


def _mutate(lines: list[str], rng: random.Random) -> str:
    lines = list(lines)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        tokens = lines[i].split()
        kind = rng.choice(["drop", "junk", "double", "cut", "dup", "swap", "delete"])
        if kind == "drop" and tokens:
            tokens.pop(rng.randrange(len(tokens)))
        elif kind == "junk" and tokens:
            tokens[rng.randrange(len(tokens))] = rng.choice(JUNK)
        elif kind == "double" and tokens:
            tokens.insert(rng.randrange(len(tokens)), rng.choice(tokens))
        elif kind == "cut":
            lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
            continue
        elif kind == "dup":
            lines.insert(i, lines[i])
            continue
        elif kind == "swap":
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            continue
        else:
            del lines[i]
            continue
        lines[i] = "   ".join(tokens)
    return "\n".join(lines)


def test_malformed_logs_never_exit_3(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    sources = {name: _small_log(name) for name in
               ("h100_4gpu_all_reduce.txt", "h100_4gpu_all_gather.txt")}
    sweep = (DATA / "h200_gemm_sweep.csv").read_text().split("\n")[:12]
    runner = CliRunner()
    codes = []
    for case in range(CASES):
        if case % 4 == 3:
            path = tmp_path / f"sweep_{case}.csv"
            path.write_text(_mutate(sweep, rng), encoding="utf-8", errors="surrogatepass")
            args = ["calibrate", "--gemm", str(path), "--base", "h200-sxm"]
        else:
            name = rng.choice(sorted(sources))
            path = tmp_path / f"{case}_{name}"
            path.write_text(_mutate(sources[name], rng), encoding="utf-8")
            args = ["calibrate", str(path), "--base", "h100-sxm"]
        result = runner.invoke(app, args)
        codes.append(result.exit_code)
        assert result.exit_code in (0, 2), (args, result.output[-2000:])
        if result.exit_code == 2:
            lines = result.output.strip().split("\n")
            assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), result.output
    assert 2 in codes and 0 in codes  # the fuzz reaches both the refusals and the fits
