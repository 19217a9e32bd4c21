"""shardsim: discrete-event performance modeler for distributed deep-learning training.

The package is layered (see docs/design.md): scenario -> graph -> sharding -> numeric | schedule
-> engine -> report, with cost as pure functions and cli on top. A lower layer never
imports a higher one.

The Python API (simulator/api.py) is imported lazily, so that `import simulator` and the
`shardsim` command stay cheap:

    from simulator import load_scenario, simulate, verify, sweep, plan
"""

import sys
import types
from typing import Any

from simulator._version import __version__

__all__ = ["__version__", "load_scenario", "load_hardware", "simulate", "verify", "sweep", "plan"]

_API = frozenset(__all__[1:])


def __getattr__(name: str) -> Any:
    """PEP 562: the API functions come from simulator.api on first use."""
    if name in _API:
        from simulator import api

        return getattr(api, name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")


class _Package(types.ModuleType):
    """Keeps `simulator.simulation.simulate` the API function: importing the submodule
    simulator/simulation/simulate.py would otherwise rebind the package attribute to the module (the
    module stays importable as `from simulator.simulation.simulate import ...`)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
