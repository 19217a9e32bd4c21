"""`run --out DIR` replaces DIR as a whole: a kill at any point, or a full disk, leaves the
previous report or the new one, never a mix; a folder holding other files is refused."""

from __future__ import annotations

import csv
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.report import files, out_folder

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
OLD = ("--set", "training.micro_batch_size=1")
NEW = ("--set", "training.micro_batch_size=2")


def _argv(out: Path, sets: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "simulator", "run", "tiny-cpu", "--out", str(out), *sets]


def _content(folder: Path) -> dict[str, object]:
    """Each report file's content, less the simulator's own wall time (which varies)."""
    found: dict[str, object] = {}
    for path in sorted(folder.iterdir()):
        if path.is_dir():
            found[path.name] = "a folder"
        elif path.name == "summary.csv":
            with path.open() as fh:
                found[path.name] = [{k: v for k, v in row.items() if k != "simulation.wall_s"}
                                    for row in csv.DictReader(fh)]
        elif path.name == "summary.md":
            found[path.name] = [line for line in path.read_text().splitlines()
                                if "wall_s" not in line and not line.startswith("simulation ")]
        else:
            found[path.name] = path.read_bytes()
    return found


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict[str, object]]:
    """The old and the new report of uninterrupted runs."""
    base = tmp_path_factory.mktemp("reports")
    for name, sets in (("old", OLD), ("new", NEW)):
        done = subprocess.run(_argv(base / name, sets), env=ENV, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    old, new = _content(base / "old"), _content(base / "new")
    assert sorted(old) == sorted(files.REPORT_FILES)
    assert all(old[name] != new[name] for name in old)  # every file tells them apart
    return {"old": old, "new": new, "old_dir": base / "old"}  # type: ignore[dict-item]


def test_a_kill_at_random_points_leaves_the_old_report_or_the_new(tmp_path, reports):
    rng = random.Random(25)
    for attempt in range(6):
        out = tmp_path / f"r{attempt}"
        shutil.copytree(reports["old_dir"], out)
        proc = subprocess.Popen(_argv(out, NEW), env=ENV, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 3.5))  # from the import to the last file
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        now = _content(out)
        assert now in (reports["old"], reports["new"]), attempt
    again = subprocess.run(_argv(tmp_path / "r0", NEW), env=ENV, capture_output=True)
    assert again.returncode == 0
    assert _content(tmp_path / "r0") == reports["new"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".r0.")]  # stale removed


def test_a_full_disk_keeps_the_old_report(tmp_path, reports):
    out = tmp_path / "r"
    shutil.copytree(reports["old_dir"], out)
    limit = 20_000  # the table fits, the trace and the figures do not

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    full = subprocess.run(_argv(out, NEW), env=ENV, capture_output=True, text=True,
                          preexec_fn=small_files)
    assert full.returncode == 2, full.stderr
    assert full.stderr.endswith(f"error: --out: {out}: cannot write the report files (File "
                                "too large)\n")
    assert _content(out) == reports["old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no temporary folder left


def test_two_renames_where_there_is_no_atomic_exchange(tmp_path, reports, monkeypatch):
    out = tmp_path / "r"
    shutil.copytree(reports["old_dir"], out)
    monkeypatch.setattr(out_folder, "_exchange", lambda a, b: False)
    done = CliRunner().invoke(app, _argv(out, NEW)[3:])
    assert done.exit_code == 0, done.output
    assert _content(out) == reports["new"]
    calls = []
    out_folder.replace_folder(out, files.REPORT_FILES,
                              lambda folder: calls.append(sorted(os.listdir(folder))))
    assert calls == [[]] and sorted(os.listdir(out)) == []  # the new (empty) folder won
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_a_folder_with_other_files_is_refused(tmp_path, reports):
    out = tmp_path / "r"
    shutil.copytree(reports["old_dir"], out)
    (out / "notes.txt").write_text("mine")
    (out / "data").mkdir()
    res = subprocess.run(_argv(out, NEW), env=ENV, capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.endswith(
        f"error: --out: {out}: holds files that are not part of a shardsim report (data, "
        "notes.txt); choose a new or empty folder (the report replaces the folder as a "
        "whole, so that a kill cannot leave half of it)\n")
    assert (out / "notes.txt").read_text() == "mine"
    assert _content(out)["trace.json"] == reports["old"]["trace.json"]


def test_an_old_report_set_aside_by_a_killed_swap_is_put_back(tmp_path, reports):
    """The two-rename swap killed between its renames: the next write finds the old report
    beside its place, puts it back, then replaces it."""
    out = tmp_path / "r"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    shutil.copytree(reports["old_dir"], tmp_path / f".r.shardsim-old-{dead}")
    (tmp_path / f".r.shardsim-new-{dead}").mkdir()
    out_folder._remove_stale(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    assert _content(out) == reports["old"]


def test_a_report_needs_no_pandas(tmp_path, reports):
    """A plain install carries no pandas: the one-row summary.csv is the csv module's (the
    same bytes pandas wrote, for tiny-cpu, a mixed cluster, stragglers and a parameter
    server, when it was replaced)."""
    argv = ["shardsim", "run", "tiny-cpu", "--out", str(tmp_path / "r"), *OLD]
    code = ("import sys; sys.modules['pandas'] = None; from simulator.cli import main; "
            f"sys.argv = {argv!r}; main()")
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _content(tmp_path / "r") == reports["old"]
