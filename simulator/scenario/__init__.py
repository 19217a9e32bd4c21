"""Scenario schema, defaults, validation and overrides. Knows nothing of simulation."""

from simulator.scenario.load import parse_scenario, resolve_hardware, split_overrides
from simulator.scenario.rules import check_rules
from simulator.scenario.schema import DTYPE_BYTES, Scenario

__all__ = ["parse_scenario", "split_overrides", "resolve_hardware", "check_rules", "Scenario",
           "DTYPE_BYTES"]
