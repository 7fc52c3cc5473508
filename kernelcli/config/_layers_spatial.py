"""Spatial layers beyond ``conv`` and ``avg_pool``: locally connected and transposed
convolutions, sum pooling, local average pooling. Declared like those of ``_layers`` (a frozen dataclass,
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

@dataclass(frozen=True)
class LocalAvgPool:
    """Local average pooling (LAP; Li, Wang, Yu, Du, Hu, Salakhutdinov, Arora, "Enhanced
    Convolutional Neural Tangent Kernels", 2019, arXiv:1911.00809): the kernel of the
    network so far read out by ``flatten``, averaged over the circular translations
    ``s, s'`` of the two inputs, each within the window, independently,

        K(x, x') = mean over s, s' in D of  mean over p of  Sigma(x, x')[p + s, p + s'],

    ``Sigma`` the covariance of the layer's input, ``p`` every position, ``D`` the
    window's translations: ``-(w - 1) / 2 .. (w - 1) / 2`` along an axis where ``window``
    is an odd ``w`` (centred on no shift), every one where ``w`` is the axis's size. It
    reads the band of the covariance around its spatial diagonal that the offsets
    ``s' - s`` cover, each weighted by its share of the pairs. Window 1 is ``flatten``;
    the whole image is ``global_avg_pool``; any window is ``avg_pool`` at stride 1,
    CIRCULAR, then ``flatten`` (at the cost of the whole covariance), so it is the
    kernel of a network, positive semi-definite. For a network whose layers all pad
    circularly at stride 1 it is the kernel of the data augmented by the window's
    translations (docs/config-reference.md, "local_avg_pool: local average pooling"). Its output,
    like ``flatten``'s, is a vector that is not Gaussian, and the layers after it see
    ``C * H * W`` channels."""

    window: Axes = 1
    where: str = field(default="", compare=False, repr=False)


def _local_avg_pool(p) -> LocalAvgPool:
    p.required("window", "a window size: an odd integer, or a list of one per spatial axis")
    return LocalAvgPool(window=p.pair("window", 1, "a window size"), where=p.path)


# An odd window is symmetric about no shift, and a whole axis is every shift, so
# flipping both inputs maps the window's offsets onto themselves: its kernel is kept.
LOCAL_AVG_POOL = LayerType(LocalAvgPool, "local_avg_pool", S.local_avg_pool, ("window",),
                           parse=_local_avg_pool, pools=True, flip="alike")

# This family's declarations, in the registry's order (``_layer_types``).
TYPES = (CONV_LOCAL, CONV_TRANSPOSE, SUM_POOL, GLOBAL_SUM_POOL, LOCAL_AVG_POOL)
