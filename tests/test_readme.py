"""The README tells the truth: every `shardsim` command it shows runs, and every transcript
(`$ shardsim ...` followed by its output) and the example report are what the command prints.

Commands run in-process (typer's CliRunner) in a temporary folder, so report files land
there. A line of the README ending in `...` matches any line that starts the same way;
wall-clock figures ("N events in X s") are compared without the seconds.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app

README = Path(__file__).resolve().parent.parent / "README.md"
# commands that take more than a few seconds: run only with `-m benchmark`
_SLOW = ("shardsim sweep ",)


def _blocks() -> list[tuple[str, list[str]]]:
    """(info string, lines) of every fenced block of the README."""
    out, info, lines, inside = [], "", [], False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            if inside:
                out.append((info, lines))
            inside, info, lines = not inside, line.strip()[3:], []
        elif inside:
            lines.append(line.strip())
    return out


def _invoke(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    args = shlex.split(command)
    assert args[0] == "shardsim"
    return CliRunner().invoke(app, args[1:], prog_name="shardsim")


def _bash_commands() -> list[str]:
    joined: list[str] = []
    for info, lines in _blocks():
        if info != "bash":
            continue
        text = "\n".join(lines).replace("\\\n", " ")  # shell line continuations
        joined += [part.strip() for line in text.splitlines() for part in line.split("&&")]
    # a redirection (`> file`) only stores what the command prints
    return [p.split(" > ")[0] for p in joined if p.startswith("shardsim ")]


def _bash_params() -> list:
    return [pytest.param(c, marks=pytest.mark.benchmark) if c.startswith(_SLOW) else c
            for c in _bash_commands()]


def _transcripts() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of every `$ shardsim` line."""
    out: list[tuple[str, list[str]]] = []
    for _, lines in _blocks():
        for line in lines:
            if line.startswith("$ shardsim "):
                out.append((line[2:], []))
            elif out and lines and lines[0].startswith("$ "):
                out[-1][1].append(line)
    return out


def _matches(want: str, got: str) -> bool:
    if want.endswith("..."):
        return got.startswith(want[:-3])
    timing = re.compile(r"events in [0-9.]+ s$")
    return timing.sub("events in", want) == timing.sub("events in", got)


def test_the_readme_shows_commands_and_transcripts():
    assert len(_bash_commands()) >= 4
    assert len(_transcripts()) >= 5


@pytest.mark.parametrize("command", _bash_params())
def test_every_readme_command_runs(command, tmp_path, monkeypatch):
    # `--json` skips drawing the figures (seconds each); the example report test below
    # runs a `run` that writes them
    fast = command + " --json" if command.startswith("shardsim run ") else command
    result = _invoke(fast, tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command, expected", _transcripts(), ids=[c for c, _ in _transcripts()])
def test_every_readme_transcript_is_real(command, expected, tmp_path, monkeypatch):
    result = _invoke(command, tmp_path, monkeypatch)
    got = [line.strip() for line in result.output.splitlines() if line.strip()]
    assert len(got) == len(expected), result.output
    for want, line in zip(expected, got):
        assert _matches(want, line), f"README: {want}\ngot:    {line}"
    assert result.exit_code == (2 if expected[0].startswith("error:") else 0)


def test_example_report_is_what_run_prints(tmp_path, monkeypatch):
    blocks = [lines for _, lines in _blocks() if lines and lines[0].startswith("scenario ")]
    assert blocks, "the README's example report"
    result = _invoke("shardsim run llama2-70b-64-h100 --out example", tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    got = [line.strip() for line in result.stdout.splitlines()][: len(blocks[0])]
    for want, line in zip(blocks[0], got):
        assert _matches(want, line), f"README: {want}\ngot:    {line}"
    assert len(got) == len(blocks[0])
    assert sorted(p.name for p in (tmp_path / "example").iterdir()) == [
        "breakdown.png", "memory.png", "report.html", "summary.csv", "summary.md",
        "timeline.png", "trace.json"]
