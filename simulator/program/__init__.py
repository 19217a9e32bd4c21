"""simulator.program."""
