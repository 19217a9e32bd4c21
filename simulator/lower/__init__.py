"""simulator.lower."""
