"""shardsim: discrete-event performance modeler for distributed deep-learning training.

The package is layered (docs/design.md; the import-linter contracts of pyproject.toml):
errors, limits < config < graph < cost < sharding < models < numeric < engine < program <
lower < report < simulation < planner < api < cli. A lower layer never imports a higher one.

The Python API (simulator/api.py) is imported lazily, so that `import simulator` and the
`shardsim` command stay cheap:

    from simulator import load_scenario, simulate, verify, sweep, sweep_frame, plan
"""

from typing import Any

from simulator._version import __version__

__all__ = ["__version__", "load_scenario", "load_hardware", "simulate", "verify", "sweep",
           "sweep_frame", "plan"]

_API = frozenset(__all__[1:])


def __getattr__(name: str) -> Any:
    """PEP 562: the API functions come from simulator.api on first use."""
    if name in _API:
        # imported when called: `import simulator` starts cheap
        from simulator import api

        return getattr(api, name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
