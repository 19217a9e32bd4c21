"""`shardsim explain`: the plan sharding propagation chooses for an operator graph (graph,
mlp, resnet), per operator: the signature, the two best alternatives and their costs, and
the configured operator the choice came from (simulator/sharding/propagate/explain.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from simulator.cli._common import emit_json, guarded, load_checked, stderr_console
from simulator.cli.run import JsonOpt, ScenarioArg, SetOpt

__all__ = ["explain"]


def _fmt(cost: float) -> str:
    return f"{cost:,.0f} B" if cost == int(cost) else f"{cost:,.1f} B"


def _print(report: dict[str, Any], out: IO[str]) -> None:
    out.write(f"{report['scenario']}\nsearch {report['search']} on mesh {report['mesh']}: "
              f"total cost {_fmt(report['total_cost_bytes'])}\n"
              f"  ({report['search']}: {report['search_runs']})\n")
    for row in report["ops"]:
        how = "configured" if row["configured"] else f"from {row['from'] or '-'}"
        out.write(f"\n{row['op']} ({row['type']}), {how}\n")
        out.write(f"  chosen  {row['signature']}  [{_fmt(row['cost_bytes'])}]\n")
        for k, alt in enumerate(row["alternatives"], 1):
            out.write(f"  alt {k}   {alt['signature']}  [{_fmt(alt['cost_bytes'])}]\n")


def explain(
    scenario: ScenarioArg,
    json_out: JsonOpt = False,
    overrides: SetOpt = None,
) -> None:
    """Show the plan sharding propagation chooses, operator by operator."""
    with guarded() as stdout:
        loaded, _ = load_checked(scenario, overrides or [])  # the checks run and verify make
        from simulator import api  # propagation loads here, not at start-up

        s = loaded.scenario
        report = api.explain(loaded)  # before the note: a plan that fails is one error line
        if s.parallel.mode != "auto":
            stderr_console().print(f"note: parallel.mode is {s.parallel.mode}; showing what "
                                   "parallel.mode=auto would choose")
        save = s.parallel.strategy_ckpt_save_file
        if save:  # MindSpore's strategy_ckpt_save_file: the plan shown, for another run
            Path(save).write_text(json.dumps(api.strategy_checkpoint(loaded), indent=1) + "\n")
            stderr_console().print(f"note: strategy checkpoint written to {save} (load it "
                                   f"with parallel.strategy_ckpt_load_file)")
        if json_out:
            emit_json(report, stdout)
        else:
            _print(report, stdout)
