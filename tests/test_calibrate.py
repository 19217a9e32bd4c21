"""`shardsim calibrate` (issue 27): reading nccl-tests logs and GEMM sweeps, refusing what it
cannot read with the file and line, and a written profile on which `comm` and the kernel
model of `run` reproduce the measured points.

The logs are published nccl-tests output (tests/data/calibrate/README.md): 4 of the 8 H100
of one HGX node, all_reduce, all_gather and reduce_scatter from 8 B to 8 GiB.

Tolerance of the reproduction, and why: the profile has five knobs for these logs (the ring's
and NVLink SHARP's effective bandwidth, NVLS's latency, NCCL's fixed overhead) and the
model's shape between them is NCCL's own tuning model, not fitted per point; 87 points over
nine decades of size. We require a median error of at most 10% per log (the target issue 24
set for comm_accuracy) and at least 90% of the points within 25%. Not 100%: the logs carry
their own run-to-run noise (all_gather's 8 KiB row takes 59.5 us out-of-place and 22.8 us
in-place in the same run), and NCCL's switch from LL to LL128 to Simple near 1 MiB is priced
as a step where the measurement ramps.
"""

# ruff: noqa: E501  (rows as nccl-tests and the MAMF finder print them: the layout is the point)
from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator import api
from simulator.calibrate.base import choose_base
from simulator.calibrate.profile_text import set_field
from simulator.cli import app
from simulator.config.hardware import load_profile
from simulator.config.measurements import read_gemm_sweep, read_nccl_log
from simulator.config.measurements.gemm_sweep import parse_gemm_sweep
from simulator.config.measurements.nccl_log import parse_nccl_log
from simulator.errors import InputError

DATA = Path(__file__).parent / "data" / "calibrate"
LOGS = [str(DATA / f"h100_4gpu_{c}.txt") for c in ("all_reduce", "all_gather", "reduce_scatter")]
SWEEP = str(DATA / "h200_gemm_sweep.csv")


@pytest.fixture(scope="module")
def h100_calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """The profile calibrated from the three H100 logs, written to a file."""
    result = api.calibrate_profile(LOGS, [], base="h100-sxm")
    path = tmp_path_factory.mktemp("calibrate") / "h100-calibrated.yaml"
    path.write_text(result["yaml"], encoding="utf-8")
    return result, path


def test_reads_the_published_logs() -> None:
    logs = [read_nccl_log(p) for p in LOGS]
    assert [(x.collective, x.ranks, x.ranks_per_node) for x in logs] == [
        ("all_reduce", 4, 4), ("all_gather", 4, 4), ("reduce_scatter", 4, 4)]
    assert {x.device for x in logs} == {"NVIDIA H100 80GB HBM3"}
    assert [len(x.points) for x in logs] == [31, 28, 28]  # 0-byte rows left out
    first = logs[0].points[0]
    assert (first.nbytes, first.time_us, first.line) == (8, 23.30, 14)
    last = logs[0].points[-1]
    assert (last.nbytes, last.time_us, last.busbw_GBps) == (8589934592, 35187.6, 366.18)


# Row layouts of older nccl-tests, as pasted in NVIDIA/nccl-tests#78 and #100: no root
# column, an error value in place of #wrong, alltoall with its redop column empty.
OLD_ALL_REDUCE = """\
#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
   268435456      67108864     float     sum   122131    2.20    4.33  2e-06   122165    2.20    4.33  2e-06
"""
OLD_ALLTOALL = """\
   268435456       1048576     float           520935    0.52    0.51  0e+00   519562    0.52    0.51  1e+00
"""


OLD_8_RANKS = """\
   268435456      67108864     float     sum     2000  134.22  234.88  2e-06     2000  134.22  234.88  2e-06
"""


def test_reads_older_layouts_with_the_rank_count_from_busbw() -> None:
    log = parse_nccl_log(OLD_8_RANKS, "run.log", "all_reduce")
    assert (log.collective, log.ranks, log.ranks_per_node) == ("all_reduce", 8, None)
    assert log.points[0].time_us == 2000
    # 4.33 / 2.20 GB/s: anything from 58 to 71 ranks at the printed precision
    with pytest.raises(InputError, match="does not tell the rank count"):
        parse_nccl_log(OLD_ALL_REDUCE, "all_reduce.log")
    with pytest.raises(InputError, match="does not tell the rank count"):
        parse_nccl_log(OLD_ALLTOALL, "alltoall.log")
    assert parse_nccl_log("#  Rank  0 Group  0 Pid 1 on a device  0 [0x0e] X\n"
                          "#  Rank  1 Group  0 Pid 2 on b device  0 [0x0e] X\n" + OLD_ALLTOALL,
                          "alltoall.log").ranks_per_node == 1


def _log_with(tmp_path: Path, line: int, text: str) -> str:
    lines = Path(LOGS[0]).read_text().split("\n")
    lines[line - 1] = text
    path = tmp_path / "all_reduce.txt"
    path.write_text("\n".join(lines))
    return str(path)


@pytest.mark.parametrize(("row", "message"), [
    ("        1024           256     float     sum      -1    23.28    0.04", "cannot read this row"),
    ("        1024           256     float     sum      -1    abc    0.04    0.07       0    23.22"
     "    0.04    0.07       0", "time 'abc' is not a number"),
    ("        1024           256     float     sum      -1    23.28    4.00    6.00       0    23.22"
     "    0.04    0.07       0", "algbw 4.00 GB/s is not size / time"),
])
def test_refuses_a_row_with_its_line(tmp_path: Path, row: str, message: str) -> None:
    path = _log_with(tmp_path, 22, row)
    result = CliRunner().invoke(app, ["calibrate", path, "--base", "h100-sxm"])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {path}: line 22: ")
    assert message in result.output and "Traceback" not in result.output


def test_refuses_busbw_that_contradicts_the_ranks(tmp_path: Path) -> None:
    moved = _log_with(tmp_path, 9, "#  Rank  3 Group  0 Pid 1 on other device 0 [0x1] H")
    assert read_nccl_log(moved).ranks_per_node == 3  # rank 3 on another host
    lines = Path(LOGS[0]).read_text().split("\n")
    path = tmp_path / "all_reduce_2.txt"  # ranks 2 and 3 left out: 2 ranks, factor 1
    path.write_text("\n".join(ln for i, ln in enumerate(lines, start=1) if i not in (8, 9)))
    with pytest.raises(InputError, match=r"line 24: busbw 1.96 GB/s is not algbw x 1 "):
        read_nccl_log(str(path))  # the table's factor is 1.5 (4 ranks)


def test_refuses_a_log_that_names_no_collective(tmp_path: Path) -> None:
    text = "\n".join(ln for ln in Path(LOGS[1]).read_text().split("\n")
                     if "Collective test" not in ln)
    (tmp_path / "run.txt").write_text(text)
    with pytest.raises(InputError, match="cannot tell which collective"):
        read_nccl_log(str(tmp_path / "run.txt"))
    assert read_nccl_log(str(tmp_path / "run.txt"), "all_gather").collective == "all_gather"


def test_comm_reproduces_the_logs_on_the_written_profile(h100_calibrated) -> None:
    result, path = h100_calibrated
    base_errors, errors = [], []
    for log in map(read_nccl_log, LOGS):
        mine = []
        for p in log.points:
            measured = p.nbytes / p.time_us / 1e3
            for hardware, into in ((str(path), mine), ("h100-sxm", base_errors)):
                res = api.comm(log.collective, p.nbytes, log.ranks, hardware, 4)
                into.append(abs(res["algbw_GBps"] / measured - 1))
        assert statistics.median(mine) <= 0.10, log.source
        assert sum(e <= 0.25 for e in mine) >= 0.9 * len(mine), log.source
        errors += mine
    assert statistics.median(errors) < statistics.median(base_errors) / 3  # 4.7% vs 109%
    summary = {Path(r["file"]).name: r for r in result["summary"]}
    assert summary["h100_4gpu_all_reduce.txt"]["points"] == 31


def test_the_written_profile_cites_its_measurements(h100_calibrated) -> None:
    result, path = h100_calibrated
    fields = {f["key"]: f for f in result["fields"]}
    assert set(fields) == {"efficiency.intra_node_bus_fraction", "intra_node.nvls.efficiency",
                           "intra_node.nvls.latency_us", "nccl.overhead_us"}
    assert fields["nccl.overhead_us"]["base"] == 0.0
    hw = load_profile(str(path))
    assert hw.name == "h100-sxm-calibrated"
    assert hw.nccl is not None and hw.nccl.overhead_us == fields["nccl.overhead_us"]["value"]
    text = path.read_text()
    assert "calibrated from h100_4gpu_all_reduce.txt, h100_4gpu_all_gather.txt, " \
           "h100_4gpu_reduce_scatter.txt (shardsim calibrate; base: 0.816)" in text
    # the base's other figures and citations are kept
    assert "inter_node_bus_fraction: 0.91    # as a100-80gb: nccl-tests issue #100" in text


def test_gemm_sweep_fits_the_peak_fractions_run_prices_with(tmp_path: Path) -> None:
    result = api.calibrate_profile([], [SWEEP], base="h200-sxm")
    fields = {f["key"]: f["value"] for f in result["fields"]}
    assert set(fields) == {"efficiency.gemm_peak_fraction", "efficiency.gemm_peak_fraction_fp8"}
    (row,) = result["summary"]
    assert row["points"] == 309 and row["median_error_pct"] <= 10.0
    path = tmp_path / "h200-cal.yaml"
    path.write_text(result["yaml"])
    assert load_profile(str(path)).efficiency.gemm_peak_fraction == \
        fields["efficiency.gemm_peak_fraction"]
    scenario = "scenarios/moe-qwen3-30b-a3b-8-h100.yaml"
    base = api.simulate(api.load_scenario(scenario, ["hardware=h200-sxm"]))
    mine = api.simulate(api.load_scenario(scenario, [f"hardware={path}"]))
    # a lower peak fraction than the base's 0.803 makes every GEMM, so the iteration, slower
    assert fields["efficiency.gemm_peak_fraction"] < 0.803
    assert mine.iteration_time_s > base.iteration_time_s


MAMF = """
** Dtype: torch.bfloat16

** Platform/Device info:
- _CudaDeviceProperties(name='NVIDIA H100 80GB HBM3', major=9, minor=0, total_memory=81559MB)

     1 |  712.3(mean)  715.0(median)  720.1(max) @ 4096x4096x4096         | best:  712.3(mean)  715.0(median)  720.1(max) TFLOPS\r     2 |  640.0(mean)  650.5(median)  655.0(max) @ 4096x4096x1024         | best:  712.3(mean)  715.0(median)  720.1(max) TFLOPS
"""


def test_reads_the_mamf_finder_output_and_a_csv() -> None:
    sweep = parse_gemm_sweep(MAMF, "mm.out")
    assert sweep.device == "NVIDIA H100 80GB HBM3"
    assert [(p.m, p.n, p.k, p.dtype, p.tflops) for p in sweep.points] == [
        (4096, 4096, 4096, "bf16", 715.0), (4096, 4096, 1024, "bf16", 650.5)]
    assert choose_base([sweep.device], "mm.out") == "h100-sxm"
    csv = read_gemm_sweep(SWEEP)
    assert (csv.points[0].m, csv.points[0].dtype, csv.points[0].tflops, csv.points[0].line) == \
        (256, "bf16", 5.68, 6)


@pytest.mark.parametrize(("text", "message"), [
    ("m,n,k,TFLOP/s\n1,2,3,4\n", "line 1: the CSV header has no column dtype"),
    ("m,n,k,dtype,tflops\n1,2,3,bf17,4\n", "line 2: dtype 'bf17'"),
    ("m,n,k,dtype,tflops\n1,0,3,bf16,4\n", "line 2: n = '0'"),
    ("m,n,k,dtype,tflops\n1,2,3,bf16,nan\n", "line 2: TFLOP/s = 'nan'"),
    ("     1 |  1.0(mean)  1.0(median)  1.0(max) @ 8x8x8 | best", "line 1: a MAMF finder row"),
])
def test_refuses_a_sweep_with_its_line(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_gemm_sweep(text, "sweep.csv")


def test_chooses_the_base_by_the_device_name() -> None:
    assert choose_base(["NVIDIA A100-SXM4-80GB"], "x") == "a100-80gb"
    assert choose_base(["NVIDIA A100-SXM4-40GB"], "x") == "a100-40gb"
    assert choose_base(["NVIDIA GB300"], "x") == "gb300-nvl72"
    with pytest.raises(InputError, match="none matches: choose the profile to start from"):
        choose_base(["NVIDIA GeForce RTX 4090"], "x")


def test_set_field_replaces_a_value_and_its_comment_and_adds_a_missing_one() -> None:
    text = ("a:\n  b: 1        # old\n            #   more of old\n  c: 2\n"
            "# next\nd:\n  e: 3\n")
    out = set_field(text, "a.b", 0.5, "new")
    assert out.split("\n")[:3] == ["a:", "  b: 0.5" + " " * 21 + " # new", "  c: 2"]
    out = set_field(out, "a.f", 7, "added")
    assert out.split("\n")[3] == "  f: 7" + " " * 23 + " # added"
    assert out.split("\n")[4:6] == ["# next", "d:"]


A3MEGA = str(DATA / "h100_a3mega_2node_all_reduce.txt")


def test_a_log_across_nodes_fits_the_network_figures_only() -> None:
    """Two nodes of 8 H100 over GPUDirect-TCPXO (GCP A3 Mega, 8 x 200 Gb/s per node), a
    network h100-sxm (8 x 400 Gb/s InfiniBand) does not describe. Only the network's
    figures move: a ring across nodes is as fast as its slower link, so the NVLink figures
    cannot be told from it. Tolerance: the median error of comm over its 31 points at most
    15%, every point up to 1 MiB (where the fitted start-up time sets it) within 12%. The
    model does not follow this network's slow ramp from 2 to 32 MiB (up to 2.2x too fast)
    and its large-message end (27% too slow at 8 GiB) together: one bandwidth serves both."""
    log = read_nccl_log(A3MEGA)
    assert (log.collective, log.ranks, log.ranks_per_node) == ("all_reduce", 16, 8)
    result = api.calibrate_profile([A3MEGA], [], base="h100-sxm")
    assert {f["key"] for f in result["fields"]} == {"efficiency.inter_node_bus_fraction",
                                                    "nccl.net_overhead_us"}
    errors = [(c["what"], abs(c["error_pct"])) for c in result["checks"]]
    assert statistics.median(e for _, e in errors) <= 15.0
    assert all(e <= 12.0 for what, e in errors if int(what.split()[1]) <= 1 << 20)


def test_a_base_with_a_measured_curve_gets_the_logged_one(tmp_path: Path) -> None:
    """a100-80gb prices rings inside a node from its measured all_reduce curve; a log of an
    all_reduce inside one node replaces that curve (here the H100 log, on purpose: the curve
    must then be the log's, not the A100's), and comm gives back every logged point."""
    result = api.calibrate_profile([LOGS[0]], [], base="a100-80gb")
    fields = {f["key"]: f for f in result["fields"]}
    assert tuple(fields["intra_node.allreduce_busbw_GBps"]["sources"]) == (LOGS[0],)
    path = tmp_path / "a100-cal.yaml"
    path.write_text(result["yaml"])
    curve = load_profile(str(path)).intra_node.allreduce_busbw_GBps
    assert curve is not None and curve[0][0] == 16  # 8 B is below the schema's 0.001 GB/s
    slowest = 0.0  # the curve's time never falls with size (cost.links.measured_bus_time)
    for p in read_nccl_log(LOGS[0]).points[1:]:
        slowest = max(slowest, p.time_us)
        res = api.comm("all_reduce", p.nbytes, 4, str(path), 8)
        assert res["time_s"] == pytest.approx(slowest * 1e-6, rel=1e-4)


def _model_log(tmp_path: Path, collective: str, test: str, hw) -> str:
    """An nccl-tests log of 8 ranks in one node whose times are what the cost model gives on
    `hw`, printed as nccl-tests prints them (two decimals)."""
    from simulator.cost.collectives import comm_benchmark

    lines = [f"# Collective test starting: {test}_perf"]
    lines += [f"#  Rank {r:2d} Group  0 Pid 1 on host device {r} [0x0] NVIDIA H100 80GB HBM3"
              for r in range(8)]
    redop = "none" if collective in ("all_gather", "all_to_all") else "sum"
    for e in range(10, 34):
        res = comm_benchmark(collective, 2**e, 8, 8, hw)
        t = res["time_s"] * 1e6
        cols = f"{t:9.2f} {2**e / t / 1e3:7.2f} {res['busbw_GBps']:7.2f}      0"
        lines.append(f"{2**e:12d} {2**e // 4:12d}     float {redop:>6}      -1 {cols} {cols}")
    path = tmp_path / f"{test}.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_the_fit_recovers_the_figures_that_made_the_logs(tmp_path: Path) -> None:
    """An oracle: logs the model itself wrote on h100-sxm with five figures changed are
    calibrated from h100-sxm, and every figure comes back to its rounding (all_reduce and
    all_gather tell the bandwidths, NVLS and the overhead apart; alltoall the step latency)."""
    truth = {"efficiency.intra_node_bus_fraction": 0.7, "intra_node.nvls.efficiency": 0.9,
             "nccl.overhead_us": 12.0, "intra_node.latency_us": 7.0,
             "intra_node.nvls.latency_us": 20.0}
    hw = load_profile("h100-sxm", [f"{k}={v}" for k, v in truth.items()])
    logs = [_model_log(tmp_path, c, t, hw) for c, t in (
        ("all_reduce", "all_reduce"), ("all_gather", "all_gather"), ("all_to_all", "alltoall"))]
    result = api.calibrate_profile(logs, [], base="h100-sxm")
    assert {f["key"]: f["value"] for f in result["fields"]} == truth
    assert all(r["worst_error_pct"] < 0.05 for r in result["summary"])
