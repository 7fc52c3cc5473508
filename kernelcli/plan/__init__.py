"""The planner: blocks of the kernel matrix, pairs per call and memory (no jax, no h5py)."""

from ._blocks import Block as Block
from ._planner import Plan as Plan
from ._planner import assign as assign
from ._planner import auto_budget as auto_budget
from ._planner import available_ram_bytes as available_ram_bytes
from ._planner import make_plan as make_plan
from ._units import format_size as format_size

__all__ = [
    "Block",
    "Plan",
    "assign",
    "auto_budget",
    "available_ram_bytes",
    "format_size",
    "make_plan",
]
