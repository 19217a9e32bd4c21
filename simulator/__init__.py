"""shardsim: discrete-event performance modeler for distributed deep-learning training.

The package is layered (see DESIGN.md): scenario -> graph -> sharding -> numeric | schedule
-> engine -> report, with cost as pure functions and cli on top. A lower layer never
imports a higher one.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
