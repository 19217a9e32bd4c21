"""Framework profiles: what a training stack (Megatron-LM, NeMo, FSDP, DeepSpeed, MindSpore,
...) does, separate from the hardware it runs on."""

from simulator.config.framework.load import framework_for, list_frameworks, load_framework
from simulator.config.framework.schema import FrameworkProfile, Software

__all__ = ["FrameworkProfile", "Software", "framework_for", "list_frameworks", "load_framework"]
