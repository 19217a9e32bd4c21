"""`shardsim calibrate` (issue 27): a hardware profile fitted to the user's nccl-tests logs
and GEMM sweep, through the same cost models `comm` and `run` price with. Above `planner`
in the layers of docs/design.md: it reads measurements and profiles (`config`) and prices
with `cost`; the API calls it."""

from simulator.calibrate.calibration import Calibration, Check, Field, calibrate, summary

__all__ = ["Calibration", "Check", "Field", "calibrate", "summary"]
