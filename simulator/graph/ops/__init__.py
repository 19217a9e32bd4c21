"""Operator families, registered on import: every module of this package but `base` (and
its helpers, which register none) is imported here, so a new family is a module of its
own. `get_family(name)` looks one up."""

import pkgutil
from importlib import import_module

from simulator.graph.ops.base import KernelCtx, LabelView, OpError, OpFamily, families, get_family

__all__ = ["KernelCtx", "LabelView", "OpError", "OpFamily", "families", "get_family"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    import_module(f"{__name__}.{_module}")
