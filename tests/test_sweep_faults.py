"""A sweep folder survives what users and machines do to it: two writers at once, kill -9 at
random points, a deleted or truncated part file, a full disk (RLIMIT_FSIZE), a read-only
folder, an edited scenario. After each, either every configuration appears exactly once with
the values of an uninterrupted sweep, or the command exits 2 saying what to do."""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from filelock import FileLock
from fs_faults import read_only_run
from typer.testing import CliRunner

import simulator._version
from simulator.cli import app
from simulator.config.resources import resolve_yaml
from simulator.errors import InputError
from simulator.planner.sweep import sweep_into
from simulator.planner.sweep_exec import LocalExecutor, SerialExecutor, make_executor
from simulator.planner.sweep_spec import SweepSpec, parse_grid
from simulator.report import sweep_journal

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# tiny-cpu (4 devices, global batch 8): 12 configurations that all run, a millisecond each
TINY_GRID = ("training.micro_batch_size=1,2,4", "parallel.comm_fusion.bucket_mb=1,2,4,8")
# GPT-3 175B on 4 stages: 24 configurations of tens of milliseconds each, so that a kill
# lands between rows
SLOW = "gpt3-175b-1024-a100"
SLOW_GRID = ("parallel.comm_fusion.bucket_mb=10,20,30,40", "training.micro_batch_size=1,2,4",
             "parallel.overlap.grad_reduce=true,false")
SLOW_SET = ("parallel.pipeline=4", "parallel.data=32", "training.global_batch_size=256")


@pytest.fixture(autouse=True)
def no_affinity(monkeypatch):
    """macOS and Windows have no os.sched_getaffinity: every in-process sweep here runs
    without it."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)


def _spec(name="tiny-cpu", grid=TINY_GRID, fixed=(), path=None) -> SweepSpec:
    path = path or resolve_yaml(name, "scenarios")
    return SweepSpec(str(path), f"scenarios/{name}.yaml", parse_grid(grid), tuple(fixed))


def _argv(out: Path, scenario: str = "tiny-cpu", grid=TINY_GRID, fixed=(), *extra: str):
    args = [a for g in grid for a in ("--grid", g)] + [a for s in fixed for a in ("--set", s)]
    return [sys.executable, "-m", "simulator", "sweep", scenario, *args, "--executor",
            "serial", "--out", str(out), *extra]


def _table(out: Path) -> list[dict]:
    return pq.read_table(out / "sweep.parquet").to_pylist()


def _assert_complete(out: Path, whole: list[dict]) -> None:
    """sweep.parquet and the journal hold every configuration once, equal to `whole`."""
    rows = _table(out)
    assert [r["index"] for r in rows] == list(range(len(whole)))
    assert rows == whole
    journal = [r for part in (out / "rows").glob("part-*.parquet")
               for r in pq.read_table(part).to_pylist()]
    assert sorted(r["index"] for r in journal) == list(range(len(whole)))
    assert not list((out / "rows").glob(".tmp-*"))


@pytest.fixture(scope="module")
def tiny_whole() -> list[dict]:
    return sweep_into(_spec(), None, SerialExecutor())


@pytest.fixture(scope="module")
def slow_whole() -> list[dict]:
    return sweep_into(_spec(SLOW, SLOW_GRID, SLOW_SET), None, SerialExecutor())


def test_a_second_writer_is_refused_while_the_first_holds_the_folder(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    with FileLock(str(out / ".lock"), timeout=0):
        res = subprocess.run(_argv(out, "tiny-cpu", TINY_GRID, (), "--resume"), env=ENV,
                             capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert res.stderr.endswith(
        f"\nerror: --out: {out}: another shardsim sweep is writing into this folder (it holds "
        f"{out / '.lock'}); wait for it to finish, then run with --resume, or choose another "
        "--out\n")
    assert not (out / "sweep.json").exists()  # the refused writer touched nothing


def test_two_writers_at_once_lose_and_repeat_nothing(tmp_path, slow_whole):
    out = tmp_path / "s"
    argv = _argv(out, SLOW, SLOW_GRID, SLOW_SET, "--resume")
    procs = [subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [(p.wait(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stderr.close()
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2]), results  # [0, 0]: the second began after the first
    for code, err in results:
        if code == 2:
            assert "another shardsim sweep is writing into this folder" in err
    _assert_complete(out, slow_whole)


def test_kill_9_at_random_points_then_resume(tmp_path, slow_whole):
    out = tmp_path / "s"
    argv = _argv(out, SLOW, SLOW_GRID, SLOW_SET, "--resume")
    rng = random.Random(25)
    for _ in range(4):
        proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 3.0))  # from the import to the final table
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _assert_complete(out, slow_whole)


def test_a_deleted_and_a_truncated_part_run_again(tmp_path, monkeypatch, tiny_whole):
    monkeypatch.setattr(sweep_journal, "FLUSH_S", 0.0)  # one part file per row
    sweep_into(_spec(), tmp_path, SerialExecutor())
    parts = sorted((tmp_path / "rows").glob("part-*.parquet"))
    assert [p.name for p in parts] == [f"part-{i:08d}.parquet" for i in range(12)]
    parts[3].unlink()
    parts[7].write_bytes(parts[7].read_bytes()[:100])
    notes, again = [], []
    rows = sweep_into(_spec(), tmp_path, SerialExecutor(), resume=True, on_note=notes.append,
                      on_row=lambda r: again.append(r["index"]))
    assert sorted(again) == [3, 7]
    assert len(notes) == 1 and notes[0].startswith(f"{parts[7]} cannot be read (")
    assert notes[0].endswith("; set aside as part-00000007.parquet.damaged, its "
                             "configurations run again")
    assert rows == tiny_whole
    _assert_complete(tmp_path, tiny_whole)


def _fsize_limit(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize(("limit", "file"), [(1_000, "rows/part-00000000.parquet"),
                                              (60_000, "report.html")])
def test_a_full_disk_exits_2_then_resume_completes(tmp_path, tiny_whole, limit, file):
    """RLIMIT_FSIZE: writing past `limit` bytes fails with EFBIG (Python ignores SIGXFSZ),
    as a full disk fails with ENOSPC. 1 kB stops the first part file; 60 kB lets every part
    and the table through and stops the page with its embedded plot."""
    out = tmp_path / "s"
    full = subprocess.run(_argv(out), env=ENV, capture_output=True, text=True,
                          preexec_fn=_fsize_limit(limit))
    assert full.returncode == 2, full.stderr
    assert full.stderr.endswith(
        f"\nerror: --out: {out}: cannot write {file} (File too large); free disk space, raise "
        "the file-size limit or make the folder writable, then run the same command with "
        "--resume: the rows already written are kept\n")
    assert not list(out.rglob(".tmp-*"))  # the torn temporary file is removed
    done = subprocess.run(_argv(out, "tiny-cpu", TINY_GRID, (), "--resume"), env=ENV,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _assert_complete(out, tiny_whole)


def test_a_read_only_folder_exits_2_then_resume_completes(tmp_path, monkeypatch, tiny_whole):
    out = tmp_path / "s"
    monkeypatch.setattr(sweep_journal, "FLUSH_S", 0.0)
    seen = []

    def stop_after_five(row):
        seen.append(row)
        if len(seen) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep_into(_spec(), out, SerialExecutor(), on_row=stop_after_five)
    before = sorted(p.name for p in (out / "rows").iterdir())
    res = read_only_run(out, _argv(out, "tiny-cpu", TINY_GRID, (), "--resume"), ENV)
    assert res.returncode == 2, res.stderr
    assert res.stderr == (f"error: --out: {out}: the folder is read-only; choose a writable "
                          "one\n")
    assert sorted(p.name for p in (out / "rows").iterdir()) == before
    done = subprocess.run(_argv(out, "tiny-cpu", TINY_GRID, (), "--resume"), env=ENV,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _assert_complete(out, tiny_whole)


def test_an_edited_scenario_is_refused_unless_forced(tmp_path, tiny_whole):
    scen = tmp_path / "tiny.yaml"
    shutil.copy(resolve_yaml("tiny-cpu", "scenarios"), scen)
    out = tmp_path / "s"
    spec = _spec(path=scen)
    sweep_into(spec, out, SerialExecutor())
    old_hash = json.loads((out / "sweep.json").read_text())["scenario_sha256"]
    scen.write_text(scen.read_text() + "seed: 7\n")
    with pytest.raises(InputError) as err:
        sweep_into(spec, out, SerialExecutor(), resume=True)
    new_hash = sweep_journal.scenario_sha256(scen)
    assert str(err.value) == (
        f"--resume: {out}: the scenario file changed since the sweep began (scenario_sha256 "
        f"{old_hash} in {out / 'sweep.json'}, now {new_hash}): its rows would mix two models; "
        "choose another --out, or pass --resume --force to keep the old rows and run the "
        "rest with the new one")
    rows = sweep_into(spec, out, SerialExecutor(), resume=True, force=True)
    assert rows == tiny_whole  # every row was there: nothing ran with the edited file
    assert json.loads((out / "sweep.json").read_text())["scenario_sha256"] == new_hash


def test_another_shardsim_version_is_refused_unless_forced(tmp_path, monkeypatch):
    sweep_into(_spec(), tmp_path, SerialExecutor())
    monkeypatch.setattr(simulator._version, "__version__", "99.0")
    with pytest.raises(InputError, match=r"shardsim's version changed since the sweep began "
                       r"\(shardsim_version 0\.1\.0 in .*sweep\.json, now 99\.0\)"):
        sweep_into(_spec(), tmp_path, SerialExecutor(), resume=True)
    sweep_into(_spec(), tmp_path, SerialExecutor(), resume=True, force=True)


def test_a_torn_or_missing_manifest_says_what_to_do(tmp_path, tiny_whole):
    out = tmp_path / "s"
    sweep_into(_spec(), out, SerialExecutor())
    (out / "sweep.json").write_text('{"scenario": "scen')
    runner = CliRunner()
    res = runner.invoke(app, _argv(out, "tiny-cpu", TINY_GRID, (), "--resume")[3:])
    assert res.exit_code == 2
    assert f"\nerror: --resume: {out}: {out / 'sweep.json'} cannot be read (Unterminated " \
        "string" in res.stderr
    assert res.stderr.endswith("; choose another --out, or pass --resume --force to keep its "
                               "rows as rows of this sweep\n")
    (out / "sweep.json").unlink()
    res = runner.invoke(app, _argv(out, "tiny-cpu", TINY_GRID, (), "--resume")[3:])
    assert res.exit_code == 2 and res.stderr.endswith(
        f"\nerror: --resume: {out}: the folder holds rows but no sweep.json, so which sweep "
        "they belong to is unknown; choose another --out, or pass --resume --force to keep "
        "its rows as rows of this sweep\n")
    res = runner.invoke(app, _argv(out, "tiny-cpu", TINY_GRID, (), "--resume", "--force")[3:])
    assert res.exit_code == 0, res.output
    _assert_complete(out, tiny_whole)


def test_force_without_resume_is_refused():
    res = CliRunner().invoke(app, ["sweep", "tiny-cpu", "--grid", "seed=1,2", "--force"])
    assert res.exit_code == 2 and res.stderr == (
        "error: --force: only resumes a changed sweep; give it with --resume\n")


def test_the_local_pool_runs_without_sched_getaffinity(tiny_whole):
    assert not hasattr(os, "sched_getaffinity")
    assert make_executor("local", workers=2) == LocalExecutor(2)
    assert sweep_into(_spec(), None, LocalExecutor()) == tiny_whole
