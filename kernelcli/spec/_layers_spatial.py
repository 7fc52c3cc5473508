"""Spatial layers beyond ``conv`` and ``avg_pool``: locally connected and transposed
convolutions, sum pooling. Declared like those of ``_layers`` (a frozen dataclass,
then its ``register(LayerType(...))``), in a module of their own to keep each file
readable; ``_layers`` imports this one, so they register with the rest.

``conv_local`` and ``conv_transpose`` take ``conv``'s parameters and defaults and,
like it, make the signal Gaussian (``affine``); ``sum_pool`` takes ``avg_pool``'s
(less ``normalize_edges``) and, like every pool, keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from . import _shapes as S
from ._layers import Axes, conv_parser
from ._registry import LayerType, register

_CONV_PARAMETERS = ("filter", "strides", "padding", "W_std", "b_std", "width")


@dataclass(frozen=True)
class ConvLocal:
    """Locally connected layer: a convolution whose weights (and bias) differ at every
    output position. Its kernel reads only the spatial diagonal of its input's
    covariance, and its output covariance is zero between different positions."""

    filter: Axes = 3
    strides: Axes = 1
    padding: str = "SAME"
    W_std: float = 1.0
    b_std: Optional[float] = 0.0
    width: int = 1
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class ConvTranspose:
    """Transposed convolution (``lax.conv_transpose``): each axis grows by its stride."""

    filter: Axes = 3
    strides: Axes = 1
    padding: str = "SAME"
    W_std: float = 1.0
    b_std: Optional[float] = 0.0
    width: int = 1
    where: str = field(default="", compare=False, repr=False)


register(
    LayerType(ConvLocal, "conv_local", S.conv, _CONV_PARAMETERS, parse=conv_parser(ConvLocal),
              affine=True),
    LayerType(ConvTranspose, "conv_transpose", S.conv_transpose, _CONV_PARAMETERS,
              parse=conv_parser(ConvTranspose), affine=True),
)


@dataclass(frozen=True)
class SumPool:
    window: Axes = 2
    strides: Axes = 2
    padding: str = "VALID"
    where: str = field(default="", compare=False, repr=False)


def _sum_pool(p) -> SumPool:
    window = p.pair("window", 2, "a window size")
    return SumPool(window=window, strides=p.pair("strides", window, "a stride"),
                   padding=p.padding("VALID"), where=p.path)


@dataclass(frozen=True)
class GlobalSumPool:
    where: str = field(default="", compare=False, repr=False)


register(
    LayerType(SumPool, "sum_pool", S.avg_pool, ("window", "strides", "padding"),
              parse=_sum_pool, pools=True),
    LayerType(GlobalSumPool, "global_sum_pool", S.global_avg_pool, pools=True),
)
