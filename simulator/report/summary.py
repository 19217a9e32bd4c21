"""`summary(result)`: the `run --json` object of docs/contract.md section 3 (its keys, and
`pipeline_layers`: the layers of each virtual pipeline stage); and `format_table(summary)`:
the same as aligned text for people.
"""

from __future__ import annotations

from typing import Any

from simulator.report.allocator import reserved_model, result_reserved
from simulator.report.metrics import BREAKDOWN_KEYS, CATEGORIES
from simulator.report.run_config import config_lines, run_config
from simulator.report.uncertainty import result_band

__all__ = ["summary", "format_table", "error_bar", "allocator_view"]


def _memory(result: Any) -> dict[str, Any]:
    peak = result.memory
    overhead = dict(peak.by_category).get("framework_overhead", 0.0)
    # what offload keeps in host memory, over the devices of a node sharing it
    sc = result.scenario
    per_node = min(sc.cluster.devices_per_node, sc.devices)
    host = dict(result.plan.extras).get("host_memory_bytes_per_device", 0) * per_node
    host_cap = getattr(result, "host_capacity_bytes", 0.0)
    host_fits = not host or host <= host_cap
    # ZeRO-Infinity's optimizer states on the node's NVMe drives (hardware.host.nvme_GB)
    nvme = dict(result.plan.extras).get("nvme_bytes_per_device", 0) * per_node
    nvme_cap = getattr(result, "nvme_capacity_bytes", 0.0)
    nvme_fits = not nvme or nvme <= nvme_cap
    return {"peak_bytes": int(round(peak.peak_bytes)),
            "capacity_bytes": int(round(result.capacity_bytes)),
            "fits": bool(peak.peak_bytes <= result.capacity_bytes and host_fits and nvme_fits),
            # capacity left at the peak (negative: short by that much)
            "headroom_bytes": int(round(result.capacity_bytes - peak.peak_bytes)),
            # the allocator's view at the peak rank (issue 24 (e)): torch's
            # max_memory_allocated counts the tensors, not the CUDA context, the collective
            # library's buffers or its workspaces (the framework profile's
            # memory_overheads, lower.state.framework_overhead_bytes)
            "allocated_peak_bytes": int(round(peak.peak_bytes - overhead)),
            "framework_overhead_bytes": int(round(overhead)),
            # max_memory_reserved: the segments PyTorch's caching allocator reserves, from
            # a replay of the step's allocations where the stack's order is modelled, else
            # the rounding of the tensors alive at the peak (report.allocator); null for
            # another allocator; reserved_model says which
            "reserved_peak_bytes": result_reserved(result),
            "reserved_model": reserved_model(result),
            # host memory of a node that offloaded states and parameters hold there, and
            # the node's host DRAM (hardware.host.memory_GB); `fits` needs both
            "host_peak_bytes": int(round(host)),
            "host_capacity_bytes": int(round(host_cap)),
            # the node's NVMe bytes the offloaded states take, and its drives' capacity
            # (both 0 without offload to NVMe)
            "nvme_peak_bytes": int(round(nvme)),
            "nvme_capacity_bytes": int(round(nvme_cap if nvme else 0.0)),
            "by_category_bytes": {c: int(round(dict(peak.by_category).get(c, 0.0)))
                                  for c in CATEGORIES}}


def _steady_note(result: Any) -> list[str]:
    """Say when the figures were extended from a shortened steady state (the trace and
    timeline then show the shortened run)."""
    st = getattr(result, "steady", None)
    if st is None:
        return []
    total = result.scenario.grad_accum_steps
    return [f"steady state extended: simulated {st.simulated + st.period} of {total} "
            f"micro-batches per replica, each further period of {st.period} adding "
            f"{st.period_s:.6g} s exactly; the trace and timeline show the simulated run"]


def summary(result: Any) -> dict[str, Any]:
    """The CONTRACT section 3 result of a SimResult, as a JSON-ready dict."""
    sc = result.scenario
    t = result.iteration_time_s
    devices = sc.devices
    samples = sc.global_batch / t if t > 0 else 0.0
    tflops = result.model_flops / t / devices / 1e12 if t > 0 else 0.0
    hw_tflops = result.hardware_flops / t / devices / 1e12 if t > 0 else 0.0
    parts = dict(result.breakdown_s)
    comm = dict(result.comm_bytes)
    return {
        "scenario": sc.name,
        "devices": devices,
        "iteration_time_s": t,
        "samples_per_s": samples,
        "tokens_per_s": samples * getattr(sc.model, "seq_length", 1),  # a sample is a token
                                                                        # without a sequence
        "model_flops_per_iteration": result.model_flops,
        "tflops_per_device": tflops,
        "mfu": tflops * 1e12 / result.peak_flops_per_s,
        "hfu": hw_tflops * 1e12 / result.peak_flops_per_s,
        "breakdown_s": {k: parts.get(k, 0.0) for k in BREAKDOWN_KEYS},
        "memory": _memory(result),
        "communication": {"bytes_per_device": int(round(sum(comm.values()))),
                          "by_collective": {k: int(round(v)) for k, v in comm.items()}},
        "simulation": {"events": int(result.trace.events), "wall_s": result.wall_s},
        "config": run_config(result),
        "pipeline_layers": list(result.plan.stage_layers),
        "critical_path": _critical(result),
        **({"jitter": result.jitter} if result.jitter else {}),
        "notes": list(getattr(result, "notes", ())) + _steady_note(result),
        **{k: v for k, v in result.plan.extras
           if k not in ("host_memory_bytes_per_device", "nvme_bytes_per_device")},
        # the measured error of this group's published runs (report.uncertainty)
        "uncertainty": result_band(result).to_dict(),
    }


def _critical(result: Any) -> dict[str, Any] | None:
    """Who set the pace (simulator.simulation.heterogeneous.pace_report), rounded for reading."""
    path = getattr(result, "critical_path", None)
    return dict(path) if path else None


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.2f} GB"


def pace_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """Which device set the pace, and the jitter distribution."""
    rows = []
    c = s.get("critical_path")
    if c:
        slowed = [f"{k.split('_')[0]} x{c[k]:g}" for k in ("compute_factor", "nic_factor")
                  if c[k] != 1.0]
        rows.append(("pace set by", f"device {c['device']} (node {c['node']}, stage "
                     f"{c['stage']}, {c['hardware']}{', ' if slowed else ''}"
                     f"{', '.join(slowed)}): {c['share_of_iteration']:.0%} of the "
                     f"iteration is its kernels on the critical path"))
        if c.get("contention_on_path_s"):
            by = c.get("contention_on_path_by_link_s", {})
            links = ", ".join(f"{k} {v:.4f} s" for k, v in by.items())
            rows.append(("shared links", f"{c['contention_on_path_s']:.4f} s of the critical "
                         f"path lost to transfers sharing a link"
                         + (f" (held back by: {links})" if links else "")))
    j = s.get("jitter")
    if j:
        rows.append(("jitter", f"{j['samples']} samples (cv {j['compute_cv']:g}, seed "
                     f"{j['seed']}): mean {j['mean_s']:.4f} s, p50 {j['p50_s']:.4f} s, "
                     f"p99 {j['p99_s']:.4f} s"))
    return rows


def allocator_view(mem: dict[str, Any]) -> str:
    """The peak as torch's counters would show it: allocated, reserved (where modelled)."""
    reserved = mem.get("reserved_peak_bytes")
    how = {"allocation_replay": "caching allocator replay of the step"}.get(
        mem.get("reserved_model") or "", "caching allocator rounding")
    shown = (f"reserved {_gb(reserved)} ({how})" if reserved is not None
             else "reserved not modelled for this allocator")
    return f"allocated {_gb(mem['allocated_peak_bytes'])}, {shown}"


def error_bar(u: dict[str, Any] | None) -> str:
    """The uncertainty of a summary in words: the interval, or why there is none."""
    if not u:
        return "not computed"
    if u["low_s"] is None:
        return f"none: {u['basis']}"
    return (f"{u['low_s']:.4f} .. {u['high_s']:.4f} s (from the measured error of "
            f"{u['runs']} published runs of {u['group']}; basis in --json)")


def format_table(s: dict[str, Any]) -> str:
    """A plain-text table of a summary dict, for the terminal."""
    t = s["iteration_time_s"]
    rows = [("scenario", s["scenario"]), ("devices", str(s["devices"])),
            *(config_lines(s["config"]) if "config" in s else []),
            ("iteration time", f"{t:.4f} s"),
            ("likely range", error_bar(s.get("uncertainty"))),
            ("throughput", f"{s['samples_per_s']:.2f} samples/s, "
                           f"{s['tokens_per_s']:.4g} tokens/s"),
            ("TFLOP/s per device", f"{s['tflops_per_device']:.1f}"),
            ("MFU / HFU", f"{s['mfu']:.1%} / {s['hfu']:.1%}")]
    if len(s.get("pipeline_layers", ())) > 1:
        rows.append(("layers per stage", "/".join(str(n) for n in s["pipeline_layers"])))
    ps = s.get("parameter_server")
    if ps:
        rows.append(("parameter server",
                     f"{ps['workers']} workers, {ps['servers']} servers, "
                     f"{'sync' if ps['sync'] else 'async'}, bottleneck {ps['bottleneck']}, "
                     f"staleness {ps['staleness_updates']} updates"))
        if ps.get("all_reduced_params"):
            rows.append(("  on the servers", f"{ps['served_params']:,} parameters pushed and "
                                              f"pulled; {ps['all_reduced_params']:,} "
                                              f"all-reduced among the workers"))
    for key, secs in s["breakdown_s"].items():
        if key == "nvme_exposed" and not secs:
            continue  # only a run that offloads to NVMe has this line
        share = secs / t if t > 0 else 0.0
        rows.append((f"  {key}", f"{secs:.4f} s ({share:.1%})"))
    mem = s["memory"]
    verdict = "fits" if mem["fits"] else "DOES NOT FIT"
    rows.append(("memory peak", f"{_gb(mem['peak_bytes'])} of {_gb(mem['capacity_bytes'])} "
                                f"({verdict}; headroom {_gb(mem['headroom_bytes'])})"))
    rows += [(f"  {k}", _gb(v)) for k, v in mem["by_category_bytes"].items()]
    rows.append(("allocator view", allocator_view(mem)))
    if mem.get("host_peak_bytes"):
        host_ok = mem["host_peak_bytes"] <= mem["host_capacity_bytes"]
        rows.append(("host memory", f"{_gb(mem['host_peak_bytes'])} of "
                     f"{_gb(mem['host_capacity_bytes'])} per node (offloaded states; "
                     f"{'fits' if host_ok else 'DOES NOT FIT'})"))
    if mem.get("nvme_peak_bytes"):
        nvme_ok = mem["nvme_peak_bytes"] <= mem["nvme_capacity_bytes"]
        rows.append(("NVMe", f"{_gb(mem['nvme_peak_bytes'])} of "
                     f"{_gb(mem['nvme_capacity_bytes'])} per node (optimizer states; "
                     f"{'fits' if nvme_ok else 'DOES NOT FIT'})"))
    comm = s["communication"]
    rows.append(("communication", f"{_gb(comm['bytes_per_device'])} per device"))
    rows += [(f"  {k}", _gb(v)) for k, v in comm["by_collective"].items()]
    sim = s["simulation"]
    rows.append(("simulation", f"{sim['events']} events in {sim['wall_s']:.3f} s"))
    rows += pace_rows(s)  # after the CONTRACT figures, which scripts read line by line
    graph = s.get("comm_subgraph")
    if graph:
        reuse = "subgraph reuse" if graph["reuse"] else "no reuse"
        rows.append(("comm operators", f"{graph['comm_ops']} in the compiled graph, "
                     f"{graph['distinct_ops']} compiled ({reuse}), build "
                     f"{graph['build_s']:.2f} s"))
    rows += [("note", note) for note in s.get("notes", ())]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
