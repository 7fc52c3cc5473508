"""Run configuration value objects: the validated form of a YAML run config.

See docs/config-reference.md for the contract. Paths are already resolved
against the folder that holds the config file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ._layer_types import Layer

KINDS = ("nngp", "ntk")
DTYPES = ("float32", "float64")
# Axis orders of input files: channels last (NHWC, NLC, NDHWC) or first (NCHW, NCL,
# NCDHW), read as channels last. NHWC, the default, means channels last at any rank
# (rows (N, D) too); every other name needs the rank it spells.
LAYOUTS = ("NHWC", "NCHW", "NLC", "NCL", "NDHWC", "NCDHW")
PARAMETERIZATIONS = ("ntk", "standard")
EXECUTORS = ("local", "ray")
# compute.engine: the engine that computes the kernels (kernelcli.kernels.resolve_engine)
ENGINES = ("auto", "cpu", "native", "accelerator")
PREPROCESS_KINDS = ("standardize", "zca", "random_patches")
# data.preprocess keys of random_patches alone: null for the other kinds, and then left out
# of the configuration's fingerprint, so runs made before them keep theirs
PATCH_KEYS = ("count", "size", "seed", "bias", "pool", "stride", "split")


@dataclass(frozen=True)
class PreprocessSpec:
    """``data.preprocess``: fitted on the training rows (``x1``) only, applied to every set."""

    kind: str                         # standardize | zca | random_patches
    zca_reg: Optional[float] = None   # zca, random_patches: regulariser relative to the mean
    #                                   eigenvalue (random_patches: of the patches')
    per_image: bool = True            # zca only: centre and L2-normalise each example first
    # random_patches only (Coates et al. 2011): patches sampled as filters, their edge, the
    # sampling's seed, the responses' threshold, the average pool's window and stride, and
    # whether both signs of a response are kept (2 * count channels)
    count: Optional[int] = None
    size: Optional[int] = None
    seed: Optional[int] = None
    bias: Optional[float] = None
    pool: Optional[int] = None
    stride: Optional[int] = None
    split: Optional[bool] = None


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
    landmarks: Optional[int] = None     # Nystrom: K(x1, Z), K(test, Z), K(Z, Z), Z in x1

    @property
    def has_labels(self) -> bool:
        return self.labels_key is not None or self.labels is not None


@dataclass(frozen=True)
class Readouts:
    """``architecture.readouts``: ``head`` applied after the first ``after[i]`` body layers
    (top-level layers, ``repeat`` expanded), each a kernel of its own."""

    head: tuple[Layer, ...]
    after: tuple[int, ...]


def readout_name(kind: str, after: int) -> str:
    """The dataset of ``kind`` read out after ``after`` body layers: ``nngp_d3``. Flat
    names (no HDF5 groups), so ``<name>_test`` and ``<name>_test_diag`` follow as for a
    plain kind."""
    return f"{kind}_d{after}"


def base_kind(name: str) -> str:
    """``nngp`` of ``nngp`` and of ``nngp_d3``."""
    return name.split("_d", 1)[0]


def is_kernel_name(name: str) -> bool:
    """Whether ``name`` is a kind (``nngp``) or a readout's dataset (``nngp_d3``)."""
    kind, _, depth = name.partition("_d")
    return kind in KINDS and (name == kind or (depth.isdigit() and depth[0] != "0"))


@dataclass(frozen=True)
class Architecture:
    parameterization: str = "ntk"
    layers: tuple[Layer, ...] = ()
    # not in the repr: run fingerprints are the repr, and runs without readouts keep theirs
    readouts: Optional[Readouts] = field(default=None, repr=False)

    def kernel_names(self, kinds: tuple[str, ...]) -> tuple[str, ...]:
        """The kernels a run of ``kinds`` computes: the kinds, or each readout's."""
        if self.readouts is None:
            return tuple(kinds)
        return tuple(readout_name(k, a) for a in self.readouts.after for k in kinds)

    def truncated(self, after: int) -> Architecture:
        """The network a readout stands for: the first ``after`` body layers, then the
        head."""
        assert self.readouts is not None, "truncated at a readout of a network without"
        return Architecture(self.parameterization,
                            tuple(self.layers[:after]) + tuple(self.readouts.head))


@dataclass(frozen=True)
class KernelSpec:
    kinds: tuple[str, ...] = KINDS
    dtype: str = "float32"
    test_diagonal: bool = False       # also K(x, x) of every test example
    augment: tuple[str, ...] = ()     # flips averaged over (hflip, vflip); () = none


@dataclass(frozen=True)
class ComputeSpec:
    memory: Optional[int] = None      # bytes per device; None = auto
    devices: Optional[int] = None     # None = all local devices
    block: Optional[int] = None       # storage tile edge; None = auto
    executor: str = "local"           # local | ray (tile jobs on kernel actors of a Ray cluster)
    address: Optional[str] = None     # Ray cluster address; None = RAY_ADDRESS or a local one
    engine: str = "auto"              # auto | cpu | native | accelerator (the kernels' execution engine)


@dataclass(frozen=True)
class OutputSpec:
    run_dir: Path
    # False (the default): delete the tiles once kernels.h5 is written and verifies, so a
    # finished run takes the disk of its result alone; True keeps them so that a damaged
    # result can be assembled again without computing
    keep_tiles: bool = False


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
