"""Layer value objects: the validated form of ``architecture.layers``.

Each layer is a frozen dataclass holding only static numbers; the kernel maths
in :mod:`kernelcli.kernels` gives each one its meaning. ``where`` is the YAML
path the layer came from (for example ``architecture.layers[3].conv``), kept
only to name it in error messages; it takes no part in equality.

``repeat`` is expanded when the configuration is read, so it has no class here;
``leaky_relu: {alpha}`` becomes ``ABRelu(a=alpha, b=1)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

PADDINGS = ("SAME", "VALID", "CIRCULAR")


@dataclass(frozen=True)
class Dense:
    """Fully connected on the channel axis (per pixel on images, like a 1x1 conv)."""

    W_std: float = 1.0
    b_std: Optional[float] = 0.0
    width: int = 1
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Conv:
    """2-D convolution over (H, W); ``filter``/``strides`` are (height, width)."""

    filter: Tuple[int, int] = (3, 3)
    strides: Tuple[int, int] = (1, 1)
    padding: str = "SAME"
    W_std: float = 1.0
    b_std: Optional[float] = 0.0
    width: int = 1
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Relu:
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Erf:
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Gelu:
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class ABRelu:
    """``a * min(x, 0) + b * max(x, 0)``."""

    a: float = 0.0
    b: float = 1.0
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class AvgPool:
    window: Tuple[int, int] = (2, 2)
    strides: Tuple[int, int] = (2, 2)
    padding: str = "VALID"
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class GlobalAvgPool:
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Flatten:
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class LayerNorm:
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Identity:
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Residual:
    """``x + f(x)`` with ``f`` the serial composition of ``layers``."""

    layers: Tuple["Layer", ...] = ()
    where: str = field(default="", compare=False, repr=False)


Layer = Union[Dense, Conv, Relu, Erf, Gelu, ABRelu, AvgPool, GlobalAvgPool,
              Flatten, LayerNorm, Identity, Residual]

NONLINEARITIES = (Relu, Erf, Gelu, ABRelu)
POOLS = (AvgPool, GlobalAvgPool)
AFFINE = (Dense, Conv)
