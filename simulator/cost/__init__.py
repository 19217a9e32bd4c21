"""Pure cost functions: seconds and bytes from specs and a hardware profile. No state, no I/O."""
