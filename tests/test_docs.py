"""The docs tell the truth: every figure in README.md and docs/ is what its command prints now.

Each transcript (`$ shardsim ...` and its output), table of figures (`<!-- figures -->`) and
benchmark output (`<!-- output: python -m benchmarks.NAME -->`) is rerun and compared with the
page (benchmarks/docs.py says how; `python -m benchmarks.docs --write` rewrites a block that
drifted). Every `shardsim` command of a `bash` block runs. The site builds with `mkdocs build
--strict`, and no file cites a document the repository does not hold.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import docs

ROOT = Path(__file__).resolve().parent.parent
# commands of `bash` blocks that take more than a few seconds: run only with `-m benchmark`
_SLOW = ("shardsim sweep ",)


def _block_params() -> list:
    """One case per transcript or figures block; one per benchmark command, however many
    blocks show its output (so that a slow benchmark runs once, on one worker)."""
    params, by_command = [], {}
    for page in docs.pages():
        for block in docs.blocks(page):
            if block.kind == "output":
                by_command.setdefault(docs.benchmark_args(block.spec), []).append(block)
            else:
                params.append(pytest.param([block], id=block.name))
    for args, blocks in by_command.items():
        marks = [pytest.mark.benchmark] if any(docs.is_slow(b) for b in blocks) else []
        params.append(pytest.param(blocks, marks=marks, id="python " + " ".join(args)))
    return params


@pytest.fixture(scope="module")
def runner():
    """One in-process `shardsim` runner per worker: a command shared by blocks runs once."""
    run = docs._Runner()
    yield run
    run.close()


def test_the_docs_hold_checked_figures():
    kinds = [b.kind for page in docs.pages() for b in docs.blocks(page)]
    assert kinds.count("transcript") >= 8
    assert kinds.count("figures") >= 25
    assert kinds.count("output") >= 5


@pytest.mark.parametrize("blocks", _block_params())
def test_every_figure_is_what_its_command_prints(blocks, runner):
    for block in blocks:
        now = docs.expected(block, runner)
        assert docs.same(block.text, now), (
            f"{block.name}: the {block.kind} block drifted; `python -m benchmarks.docs "
            f"--write` rewrites it. Now:\n{now}")


def _bash_commands() -> list[str]:
    out: list[str] = []
    for page in docs.pages():
        text = page.read_text(encoding="utf-8")
        for body in re.findall(r"^ *```bash\n(.*?)^ *```", text, re.S | re.M):
            body = body.replace("\\\n", " ")  # shell line continuations
            for line in body.splitlines():
                for part in line.split("&&"):
                    part = part.split(" #", 1)[0].split(" > ", 1)[0].strip()
                    if part.startswith("shardsim ") and part not in out:
                        out.append(part)
    return out


@pytest.mark.parametrize("command", [
    pytest.param(c, marks=pytest.mark.benchmark) if c.startswith(_SLOW) else c
    for c in _bash_commands()])
def test_every_bash_command_runs(command, tmp_path):
    # `--json` skips drawing the figures (seconds each)
    fast = command + " --json" if command.startswith("shardsim run ") else command
    status, output, _ = docs.run_command(fast, tmp_path)
    assert status == 0, output


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra: pip install '.[dev]'")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "techniques" / "moe" / "index.html").is_file()


def _tracked() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode()
        files = [ROOT / f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist)
        files = [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [f for f in files if f.suffix not in {".png", ".parquet", ".json"} and f.is_file()]


# a document cited by name: DESIGN.md, CONTRACT.md, or a path under a `shared/` folder
_CITED = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*(?:DESIGN|CONTRACT)\.md"
                    r"|(?:\.\./|/work/)*shared/[\w./-]*)")


def test_no_file_cites_a_document_the_repository_lacks():
    missing = []
    for path in _tracked():
        if path == Path(__file__).resolve():  # this test names the patterns it looks for
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for cited in _CITED.findall(line):
                target = cited.rstrip(".,:;)")
                # an absolute path (/work/shared/...) lies outside any clone
                inside = not target.startswith("/") and (
                    (ROOT / target).exists() or (path.parent / target).exists())
                if not inside:
                    missing.append(f"{path.relative_to(ROOT)}:{n}: {target}")
    assert not missing, "cited but not in the repository (docs/design.md, docs/contract.md " \
        "hold the design and the contract):\n" + "\n".join(missing)


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert links
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_docs_commands_are_quoted_as_shell_words():
    # every transcript command splits as the shell would (a `$` line is copied and pasted)
    for page in docs.pages():
        for block in docs.blocks(page):
            for line in block.text.splitlines():
                if line.startswith("$ "):
                    assert shlex.split(line[2:])[0] == "shardsim", line
