"""simulator.models."""
