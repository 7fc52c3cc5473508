"""Spatial layers beyond ``conv`` and ``avg_pool``: locally connected and transposed
convolutions, sum pooling. Declared like those of ``_layers`` (a frozen dataclass,
then its ``LayerType(...)``, listed in ``TYPES``), in a module of their own to keep
each file readable; ``_layer_types`` adds them to the registry with the rest.

``conv_local`` and ``conv_transpose`` take ``conv``'s parameters and defaults and,
like it, make the signal Gaussian (``affine``); ``sum_pool`` takes ``avg_pool``'s
(less ``normalize_edges``) and, like every pool, keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from . import _shapes as S
from ._layers import Axes, conv_parser
from ._registry import LayerType

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


# A conv_local's kernel is the conv's on the spatial diagonal (each position's own
# weights change nothing once averaged over their draws), so the window flip rule is
# its. A conv_transpose's output grid depends on how the transposed padding splits:
# no flip rule is written for it, so kernel.augment refuses it.
CONV_LOCAL = LayerType(ConvLocal, "conv_local", S.conv, _CONV_PARAMETERS,
                       parse=conv_parser(ConvLocal), affine=True, flip="window",
                       window=lambda layer: layer.filter)
CONV_TRANSPOSE = LayerType(ConvTranspose, "conv_transpose", S.conv_transpose,
                           _CONV_PARAMETERS, parse=conv_parser(ConvTranspose), affine=True)


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


SUM_POOL = LayerType(SumPool, "sum_pool", S.avg_pool, ("window", "strides", "padding"),
                     parse=_sum_pool, pools=True, flip="window",
                     window=lambda layer: layer.window)
GLOBAL_SUM_POOL = LayerType(GlobalSumPool, "global_sum_pool", S.global_avg_pool, pools=True,
                            flip="alike")

# This family's declarations, in the registry's order (``_layer_types``).
TYPES = (CONV_LOCAL, CONV_TRANSPOSE, SUM_POOL, GLOBAL_SUM_POOL)
