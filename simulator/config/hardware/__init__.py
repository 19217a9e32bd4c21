"""Hardware profiles: schema (units in field names, SI properties) and loading."""

from simulator.config.hardware.load import (
           list_profiles,
           load_profile,
           parse_profile,
           profile_summary,
)
from simulator.config.hardware.schema import DTYPES, HardwareProfile

__all__ = ["HardwareProfile", "DTYPES", "load_profile", "parse_profile", "list_profiles",
           "profile_summary"]
