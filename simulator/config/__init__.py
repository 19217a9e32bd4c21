"""simulator.config."""
