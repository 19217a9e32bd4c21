"""simulator.sharding.propagate."""
