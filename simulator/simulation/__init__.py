"""simulator.simulation."""
