"""The readers of `shardsim import` by format, for the command (`load.import_file`) and the
scenario key (`key.expand_from`) alike."""

from __future__ import annotations

from simulator.config.framework.load import load_framework
from simulator.config.hardware.load import load_profile
from simulator.config.imports.bridge import import_bridge
from simulator.config.imports.bridge_source import read_bridge
from simulator.config.imports.deepspeed import Fills, import_deepspeed
from simulator.config.imports.deepspeed_source import read_ds
from simulator.config.imports.megatron import Imported, import_megatron, read_megatron, stack_for
from simulator.config.imports.mindformers import import_mindformers
from simulator.config.imports.mindformers_source import read_mf
from simulator.config.imports.nemo import import_nemo
from simulator.config.imports.nemo_source import read_nemo
from simulator.config.imports.torchtitan import import_torchtitan
from simulator.config.imports.torchtitan_source import read_toml
from simulator.errors import InputError

__all__ = ["LABELS", "read_format", "stack_of", "Fills"]

LABELS = {"megatron": "Megatron-LM arguments", "torchtitan": "torchtitan job config",
          "deepspeed": "DeepSpeed config", "mindformers": "MindFormers config",
          "nemo": "NeMo training config", "bridge": "Megatron-Bridge config"}


def stack_of(hardware: str) -> tuple[str | None, bool]:
    """(the hardware profile's default framework, what the Megatron stack on it resolves
    `overlap.tp_comm: auto` to); a profile that cannot be read is reported by the scenario's
    own check of `hardware`, so here it is (None, the megatron-core default)."""
    try:
        default = load_profile(hardware).default_framework
    except InputError:
        default = None
    return default, load_framework(stack_for(default)).overlap.tp_comm_enabled


def read_format(fmt: str, ref: str, hardware: str, nodes: int | None, per_node: int | None,
                lenient: bool, shown: str | None = None, fills: Fills | None = None
                ) -> tuple[Imported, str]:
    """(the scenario mapping `ref` in format `fmt` imports to, the file's name in messages);
    `shown` names a file given relative to a scenario; `fills` what a DeepSpeed config
    leaves to its model and Trainer."""
    if fmt == "deepspeed":
        ds = read_ds(ref, shown, lenient)
        return import_deepspeed(ds, hardware, nodes, per_node, fills or Fills()), ds.path
    if fmt == "mindformers":
        mf = read_mf(ref, shown, lenient)
        return import_mindformers(mf, hardware, nodes, per_node, lenient), mf.path
    if fmt == "nemo":
        cfg = read_nemo(ref, shown, lenient)
        return import_nemo(cfg, hardware, nodes, per_node, lenient), cfg.path
    if fmt == "bridge":
        cfg = read_bridge(ref, shown, lenient)
        return import_bridge(cfg, hardware, nodes, per_node, lenient), cfg.path
    if fmt == "torchtitan":
        toml = read_toml(ref, shown, lenient)
        return import_torchtitan(toml, hardware, nodes, per_node, lenient), toml.path
    default, tp_comm = stack_of(hardware)
    source = read_megatron(ref, shown)
    return import_megatron(source, hardware, default, tp_comm, nodes, per_node,
                           lenient), source.path
