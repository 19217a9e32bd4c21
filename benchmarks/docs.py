"""The figures of README.md and docs/: each one is what a command prints, regenerated from it.

    python -m benchmarks.docs --write     # rerun every command, rewrite the blocks in place
    python -m benchmarks.docs --check     # rerun every command, print each block that differs

Two kinds of block are checked (tests/test_docs.py runs `--check`'s comparison block by block):

transcript   a fenced code block whose first line is `$ shardsim ARGS`: the lines after it
             are what the command prints (stdout and stderr, stripped). Several `$` lines
             may share a block. A line ending in `...` stands for any line that starts the
             same way; a line's final "in X s" is wall time and not compared.
figures      a Markdown table between `<!-- figures` (a YAML spec, then `-->`) and
             `<!-- /figures -->`. The spec names the command of every row and the JSON
             field of every column:

                 <!-- figures
                 command: run moe-mixtral-8x7b-64-h100 --json   # shared by every row
                 rows: ["", --set parallel.expert=8]          # appended to `command`
                 columns:                                     # head: FIELD [/SCALE] [FORMAT]
                   iteration s: iteration_time_s .3f
                   peak GB: memory.peak_bytes /1e9 .1f
                   fits: memory.fits yesno
                 -->

             The first column shows each row's own arguments (`as bundled` for none, or
             `no further change` when `command` has its own `--set`) unless
             `label:` names it and each row is a mapping `{label: [cells], args: ...}`.
             FIELD is a dotted path into the command's JSON output; `?` after it means
             0 when absent; a list prints joined by `/`; FORMAT is a Python format spec,
             `yesno` for a boolean. Nothing else in a page is a figure: prose cites the
             tables.
output       the text between `<!-- output: python -m benchmarks.NAME ARGS -->` and
             `<!-- /output -->`: what that benchmark script prints on stdout (a Markdown
             table, or text inside a ``` fence); `| tail -N` after the command keeps its last
             N lines and `| grep -E RE` the lines RE finds. These run as a subprocess from
             the repository root; a command ending in `# slow` is checked only by
             `pytest -m benchmark` (tests/test_docs.py).

Commands run in-process through the typer app (typer's CliRunner, the code path of the
console script), in a temporary folder so that report files land there. `run` without
`--json` also writes its report; `--write` copies the PNG figures of `docs/img/` from the
reports of the commands named in IMAGES.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Block", "blocks", "expected", "main", "matches", "pages", "render_table",
           "benchmark_args", "is_slow", "run_benchmark", "run_command", "same"]

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# figures of docs/img/: (command whose --out folder holds them, file names, docs/img subfolder)
IMAGES = (
    ("run llama2-70b-64-h100 --out {out}",
     ("timeline.png", "breakdown.png", "memory.png"), "example"),
    ("plan llama2-7b-8-ascend910b --top 5 --out {out}", ("pareto.png",), "plan"),
    ("plan llama2-7b-8-ascend910b --tokens 1e11 --days 14 --top 3 --out {out}",
     ("scaling.png",), "plan"),
)
_TIMING = re.compile(r" in [0-9.]+ s$")  # wall time: "N events in X s", "... probes) in X s"
_FIGURES = re.compile(r"<!-- figures\n(.*?)-->\n(.*?)<!-- /figures -->", re.S)
_OUTPUT = re.compile(r"<!-- output: (.*?) -->\n(.*?)<!-- /output -->", re.S)
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/, in a fixed order."""
    return [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))


@dataclass(frozen=True)
class Block:
    """One checked block of a page: where it is, what kind, and its text as committed."""

    page: Path
    kind: str            # "transcript" | "figures" | "output"
    start: int           # character offsets of `text` in the page
    end: int
    text: str            # transcript: the block's lines; figures: the table
    spec: str = ""       # figures: the YAML spec; output: the command

    @property
    def name(self) -> str:
        line = self.page.read_text(encoding="utf-8")[: self.start].count("\n") + 1
        return f"{self.page.relative_to(ROOT).as_posix()}:{line}"


def blocks(page: Path) -> list[Block]:
    """The transcripts and figure tables of one page, in page order."""
    text = page.read_text(encoding="utf-8")
    out = [Block(page, "figures", m.start(2), m.end(2), m.group(2), m.group(1))
           for m in _FIGURES.finditer(text)]
    out += [Block(page, "output", m.start(2), m.end(2), m.group(2), m.group(1))
            for m in _OUTPUT.finditer(text)]
    for m in _FENCE.finditer(text):
        body = m.group(1)
        if body.lstrip().startswith("$ shardsim "):
            out.append(Block(page, "transcript", m.start(1), m.end(1), body))
    return sorted(out, key=lambda b: b.start)


class _Runner:
    """Runs `shardsim` commands in-process in one temporary folder, each command once."""

    def __init__(self) -> None:
        self.cwd = Path(tempfile.mkdtemp(prefix="shardsim-docs-"))
        self._cache: dict[str, tuple[int, str, str]] = {}

    def __call__(self, command: str) -> tuple[int, str, str]:
        if command not in self._cache:
            self._cache[command] = run_command(command, self.cwd)
        return self._cache[command]

    def close(self) -> None:
        shutil.rmtree(self.cwd, ignore_errors=True)


def run_command(command: str, cwd: Path) -> tuple[int, str, str]:
    """(exit status, stdout and stderr, stdout) of `shardsim ARGS` run in-process in `cwd`,
    with the late progress lines off: they say how fast this machine is, not what the
    command prints (`cli.progress`)."""
    from typer.testing import CliRunner

    from simulator.cli import app

    args = shlex.split(command)
    if args and args[0] == "shardsim":
        args = args[1:]
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, args, prog_name="shardsim",
                                    env={"SHARDSIM_PROGRESS_AFTER_S": "1e9"})
    finally:
        os.chdir(old)
    return result.exit_code, result.output, result.stdout


def is_slow(block: Block) -> bool:
    """An output block marked `# slow`: the default test run leaves it to `-m benchmark`."""
    return block.kind == "output" and block.spec.rstrip().endswith("# slow")


def _parts(command: str) -> tuple[tuple[str, ...], str, str]:
    """(python arguments, tail count, grep pattern) of an output block's command."""
    command = command.split(" # ", 1)[0]
    command, _, grep = command.partition("| grep -E ")
    command, _, tail = command.partition("| tail -")
    args = shlex.split(command)
    if args[:2] != ["python", "-m"] or not args[2].startswith("benchmarks."):
        raise ValueError(f"an output block runs `python -m benchmarks.NAME`, found {command!r}")
    return tuple(args[1:]), tail.strip(), grep.strip()


def benchmark_args(command: str) -> tuple[str, ...]:
    """The `python` arguments an output block's command runs (its filters left out)."""
    return _parts(command)[0]


def run_benchmark(command: str) -> str:
    """What `python -m benchmarks.NAME ARGS [| tail -N | grep -E RE]` prints, from the root."""
    args, tail, grep = _parts(command)
    lines = [ln.rstrip() for ln in _stdout(args).strip("\n").splitlines()]
    if grep:
        lines = [ln for ln in lines if re.search(grep, ln)]
    return "\n".join(lines[-int(tail):] if tail else lines) + "\n"


@functools.cache
def _stdout(args: tuple[str, ...]) -> str:
    """stdout of `python ARGS` from the repository root (once per process)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`python {' '.join(args)}` exited {done.returncode}: "
                           f"{done.stderr[-800:]}")
    return done.stdout


def _output(block: Block) -> str:
    body = run_benchmark(block.spec)
    first = block.text.split("\n", 1)[0]
    if first.startswith("```"):  # a fenced block: the command's text inside the fence
        return f"{first}\n{body}```\n"
    return body


def _transcript(block: Block, run: _Runner) -> str:
    lines: list[str] = []
    for line in block.text.splitlines():
        if line.startswith("$ shardsim "):
            lines.append(line)
            _, output, _ = run(line[2:])
            lines += [ln.rstrip() for ln in output.splitlines() if ln.strip()]
    return "\n".join(lines) + "\n"


def _field(data: Any, path: str) -> Any:
    optional = path.endswith("?")
    for key in path.rstrip("?").split("."):
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif optional:
            return 0
        else:
            has = ", ".join(data) if isinstance(data, dict) else type(data).__name__
            raise KeyError(f"{path}: no key {key!r} (has: {has})")
    return data


def _cell(data: Any, column: str) -> str:
    parts = str(column).split()
    value = _field(data, parts[0])
    fmt = ""
    for part in parts[1:]:
        if part.startswith("/"):
            value = value / float(part[1:])
        else:
            fmt = part
    if fmt == "yesno":
        return "yes" if value else "no"
    if isinstance(value, list):
        return "/".join(str(v) for v in value)
    if value is None:
        return "-"
    return format(value, fmt)


def render_table(spec_text: str, run: _Runner | None = None) -> str:
    """The Markdown table a figures spec describes, every row run."""
    own = run is None
    runner = run or _Runner()
    try:
        spec = yaml.safe_load(spec_text)
        base = spec.get("command", "")
        columns: dict[str, str] = spec["columns"]
        label = spec.get("label", ["`shardsim` arguments" if not base else "change"])
        label = [label] if isinstance(label, str) else label
        head = list(label) + list(columns)
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in spec["rows"]:
            row = row if isinstance(row, dict) else {"args": row}
            args = str(row.get("args") or "")
            cells = row.get("label")
            if cells is None:
                plain = "--set" not in base
                cells = [f"`{args}`" if args else "as bundled" if plain else "no further change"]
            cells = [cells] if isinstance(cells, str) else [str(c) for c in cells]
            command = f"{base} {args}".strip()
            status, output, stdout = runner(command)
            if status not in (0, 1):
                raise RuntimeError(f"`shardsim {command}` exited {status}: {output[-500:]}")
            data = json.loads(stdout)
            lines.append("| " + " | ".join(cells + [_cell(data, c) for c in columns.values()])
                         + " |")
        return "\n".join(lines) + "\n"
    finally:
        if own:
            runner.close()


def expected(block: Block, run: _Runner | None = None) -> str:
    """What the block should hold: its commands rerun now."""
    own = run is None
    runner = run or _Runner()
    try:
        if block.kind == "figures":
            return render_table(block.spec, runner)
        if block.kind == "output":
            return _output(block)
        return _transcript(block, runner)
    finally:
        if own:
            runner.close()


def matches(want: str, got: str) -> bool:
    """Whether a committed line stands for a printed one (`...` prefixes, wall time)."""
    want, got = want.strip(), got.strip()
    if want.endswith("...") and not got.endswith("..."):
        return got.startswith(want[:-3])
    return _TIMING.sub(" in", want) == _TIMING.sub(" in", got)


def same(committed: str, now: str) -> bool:
    """Whether a block as committed holds what its commands print now."""
    old, new = committed.strip().splitlines(), now.strip().splitlines()
    return len(old) == len(new) and all(matches(a, b) for a, b in zip(old, new))


def _merge(committed: str, now: str) -> str:
    """`now`, keeping the committed lines that still match (shortened `...` lines)."""
    old, new = committed.splitlines(), now.splitlines()
    if len(old) != len(new):
        return now
    return "\n".join(a if matches(a, b) else b for a, b in zip(old, new)) + "\n"


def _each(selected: Sequence[Path], times: bool) -> Iterator[tuple[Block, str]]:
    """(block, what it should hold) for every block; a command that fails is reported."""
    runner = _Runner()
    try:
        for page in selected:
            for block in blocks(page):
                start = time.perf_counter()
                try:
                    now = expected(block, runner)
                except (RuntimeError, ValueError, KeyError, yaml.YAMLError) as err:
                    now = f"ERROR: {err}\n"
                if times:
                    print(f"{time.perf_counter() - start:7.2f} s  {block.name}", file=sys.stderr)
                yield block, now
    finally:
        runner.close()


def _write_images() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for command, names, folder in IMAGES:
            out = Path(tmp) / folder
            status, output, _ = run_command(command.format(out=out), Path(tmp))
            if status != 0:
                raise RuntimeError(output)
            (DOCS / "img" / folder).mkdir(parents=True, exist_ok=True)
            for name in names:
                shutil.copyfile(out / name, DOCS / "img" / folder / name)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the blocks in place")
    mode.add_argument("--check", action="store_true", help="print each block that differs")
    ap.add_argument("pages", nargs="*", type=Path, help="pages (default: README.md, docs/)")
    ap.add_argument("--no-images", action="store_true", help="with --write: keep docs/img")
    ap.add_argument("--times", action="store_true", help="print each block's seconds")
    args = ap.parse_args(argv)
    selected = [p.resolve() for p in args.pages] or pages()
    stale = 0
    pending: dict[Path, list[tuple[Block, str]]] = {}
    for block, now in _each(selected, args.times):
        if same(block.text, now):
            continue
        stale += 1
        print(f"{block.name}: {block.kind} differs", file=sys.stderr)
        if now.startswith("ERROR: "):
            print(now, file=sys.stderr, end="")
            continue
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(
                block.text.splitlines(True), now.splitlines(True), "committed", "now"))
        pending.setdefault(block.page, []).append((block, _merge(block.text, now)))
    if args.write:
        for page, changes in pending.items():
            text = page.read_text(encoding="utf-8")
            for block, now in sorted(changes, key=lambda c: -c[0].start):
                text = text[: block.start] + now + text[block.end:]
            page.write_text(text, encoding="utf-8")
        if not args.no_images:
            _write_images()
        print(f"{stale} block(s) rewritten", file=sys.stderr)
        return 0
    print(f"{stale} block(s) differ", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
