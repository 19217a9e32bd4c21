"""Scenario schema, defaults, validation and overrides. Knows nothing of simulation."""

from simulator.config.scenario.load import parse_scenario, resolve_hardware, split_overrides
from simulator.config.scenario.rules import check_rules
from simulator.config.scenario.schema import DTYPE_BYTES, Scenario

__all__ = ["parse_scenario", "split_overrides", "resolve_hardware", "check_rules", "Scenario",
           "DTYPE_BYTES"]
