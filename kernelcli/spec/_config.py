"""Run configuration value objects: the validated form of a YAML run config.

See ``README.md`` (Configuration) for the contract. Paths are already resolved
against the folder that holds the config file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from ._layers import Layer

KINDS = ("nngp", "ntk")
DTYPES = ("float32", "float64")
# Axis orders of input files: channels last (NHWC, NLC, NDHWC) or first (NCHW, NCL,
# NCDHW), read as channels last. NHWC, the default, means channels last at any rank
# (rows (N, D) too); every other name needs the rank it spells.
LAYOUTS = ("NHWC", "NCHW", "NLC", "NCL", "NDHWC", "NCDHW")
PARAMETERIZATIONS = ("ntk", "standard")
EXECUTORS = ("local", "ray")
PREPROCESS_KINDS = ("standardize", "zca")


@dataclass(frozen=True)
class PreprocessSpec:
    """``data.preprocess``: fitted on the training rows (``x1``) only, applied to every set."""

    kind: str                         # standardize | zca
    zca_reg: Optional[float] = None   # zca only: regulariser relative to the mean eigenvalue
    per_image: bool = True            # zca only: centre and L2-normalise each example first


@dataclass(frozen=True)
class DataSpec:
    x1: Path
    key: Optional[str] = None
    x2: Optional[Path] = None
    x2_key: Optional[str] = None
    layout: str = "NHWC"
    limit: Optional[int] = None
    labels: Optional[Path] = None       # file of x1's integer labels (default: x1's file)
    labels_key: Optional[str] = None    # their array name (.npz / .h5)
    test: Optional[Path] = None         # a test set: K(test, x1) and, if asked, its diagonal
    test_key: Optional[str] = None      # defaults to `key`
    test_labels: Optional[Path] = None  # default: the test file
    test_labels_key: Optional[str] = None
    test_limit: Optional[int] = None
    preprocess: Optional[PreprocessSpec] = None

    @property
    def has_labels(self) -> bool:
        return self.labels_key is not None or self.labels is not None


@dataclass(frozen=True)
class Architecture:
    parameterization: str = "ntk"
    layers: Tuple[Layer, ...] = ()


@dataclass(frozen=True)
class KernelSpec:
    kinds: Tuple[str, ...] = KINDS
    dtype: str = "float32"
    test_diagonal: bool = False       # also K(x, x) of every test example


@dataclass(frozen=True)
class ComputeSpec:
    memory: Optional[int] = None      # bytes per device; None = auto
    devices: Optional[int] = None     # None = all local devices
    block: Optional[int] = None       # storage tile edge; None = auto
    executor: str = "local"           # local | ray (tile jobs as tasks on a Ray cluster)
    address: Optional[str] = None     # Ray cluster address; None = RAY_ADDRESS or a local one


@dataclass(frozen=True)
class OutputSpec:
    run_dir: Path
    # False: delete the tiles once kernels.h5 is written and verifies (they are kept by
    # default so that a damaged result can be assembled again without computing)
    keep_tiles: bool = True


@dataclass(frozen=True)
class RunConfig:
    name: str
    data: DataSpec
    architecture: Architecture
    kernel: KernelSpec
    compute: ComputeSpec
    output: OutputSpec
    source: Optional[Path] = None     # the YAML file it was read from
    text: str = ""                    # the YAML text, stored with results
