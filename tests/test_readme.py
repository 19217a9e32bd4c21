"""The README is short and tells the truth.

Its transcripts, figures and commands are checked with every page of docs/ by
tests/test_docs.py; here: its length (issue 21: at most 200 lines, the rest lives in docs/),
the sections it promises, and the report files of the example `run` of docs/commands.md.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks import docs

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_is_at_most_200_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_the_readme_answers_quickstarts_runs_maps_and_links():
    text = README.read_text(encoding="utf-8")
    for heading in ("## Quickstart", "## One run", "## Commands", "## Accuracy",
                    "## Documentation"):
        assert f"\n{heading}\n" in text, heading
    kinds = [b.kind for b in docs.blocks(README)]
    assert kinds.count("transcript") == 1 and kinds.count("output") == 1


def test_example_report_writes_its_files(tmp_path):
    status, output, _ = docs.run_command("shardsim run llama2-70b-64-h100 --out example",
                                         tmp_path)
    assert status == 0, output
    assert sorted(p.name for p in (tmp_path / "example").iterdir()) == [
        "breakdown.png", "memory.png", "report.html", "summary.csv", "summary.md",
        "timeline.png", "trace.json"]
