"""The planner: blocks of the kernel matrix, pairs per call and memory (no jax, no h5py)."""

from ._blocks import Block as Block
from ._geometry import Geometry as Geometry
from ._geometry import make_geometry as make_geometry
from ._planner import ACCELERATOR_MAX_PAIR_BATCH as ACCELERATOR_MAX_PAIR_BATCH
from ._planner import EngineCosts as EngineCosts
from ._planner import MemoryFigures as MemoryFigures
from ._planner import Plan as Plan
from ._planner import assign as assign
from ._planner import auto_block as auto_block
from ._planner import auto_budget as auto_budget
from ._planner import auto_pair_batch as auto_pair_batch
from ._planner import make_plan as make_plan
from ._planner import memory_line as memory_line
from ._planner import plan_run as plan_run

__all__ = [
    "ACCELERATOR_MAX_PAIR_BATCH", "Block", "EngineCosts", "Geometry", "MemoryFigures", "Plan",
    "assign", "auto_block", "auto_budget", "auto_pair_batch",
    "make_geometry", "make_plan", "memory_line", "plan_run",
]
