"""Measurements a user brings to `shardsim calibrate` (issue 27): nccl-tests logs and GEMM
sweeps, read into small immutable values. Reading files is this layer's job; fitting a
profile to them is `simulator.calibrate`'s."""

from simulator.config.measurements.gemm_sweep import GemmPoint, GemmSweep, read_gemm_sweep
from simulator.config.measurements.nccl_log import NcclLog, NcclPoint, read_nccl_log
from simulator.config.measurements.text import read_text

__all__ = ["GemmPoint", "GemmSweep", "NcclLog", "NcclPoint", "read_gemm_sweep",
           "read_nccl_log", "read_text"]
