"""The kernel map of each layer type: the kernels' half of a layer's declaration.

The spec declares what a layer is (``kernelcli.config.layer_type``: its YAML
name, shape rule and flags); this table says what it does to a covariance.
Keyed by the same dataclasses, it is the one place in the kernels to touch when
a layer is added (``_compose`` and ``_repeat`` only look layers up here), and
``tests/config/test_layer_registry.py`` checks that every registered layer type has
an entry of the kind its spec flags call for.

An entry has exactly one of:

* ``linear(state, layer, standard) -> state``: a map that needs nothing but the
  covariances (dense, conv, pooling, flatten, identity);
* ``pointwise(layer, float64) -> f``, ``f(state, v1, v2) -> state``: a map that
  also reads each input's own variances ``v1``, ``v2`` (nonlinearities and
  ``layer_norm``; spec flag ``reads_variances``). These are what a convolution
  fuses with on a full covariance (``_compose._block``);
* ``merge(layer, outs) -> state``: how a layer holding branches (spec flag
  ``branch``) joins the states ``outs`` its branches end in, one per branch in
  order (a residual's: its input, the identity, and its branch's output).

and the flags the engine's special cases read, so that no stage tests a layer's
class: ``fuses`` (a convolution that runs with the pointwise layer after it as one
block, ``_compose._block``, and whose identical pairs run as one loop, ``_repeat``:
``conv``), ``reads_diagonal`` (it reads only the spatial diagonal of its input's
covariance and its output is zero off the diagonal, so no full covariance is kept
before it: ``conv_local``), ``flattens`` (first in a network, it makes the kernel
depend on a pair only through the inputs' dot product, the Gram-matrix route of
``_flat``: ``flatten``). ``reads(layer, shape) -> entries``: how many entries of
its input's covariance (per array, per pair) a layer that reads only part of it
reads, ``shape`` its input's (``local_avg_pool``: the band its window covers), for the
cost model (``_cost``); ``None``: the whole of the layout it takes.

The maps are the very functions the engine compiled before the table existed,
called in the same order, so the compiled programs are unchanged.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..config import (
    ABRelu,
    AvgPool,
    Conv,
    ConvLocal,
    ConvTranspose,
    Dense,
    Erf,
    Exp,
    Flatten,
    Gaussian,
    Gelu,
    GlobalAvgPool,
    GlobalSumPool,
    Hermite,
    Identity,
    LayerNorm,
    LocalAvgPool,
    Monomial,
    Parallel,
    Rbf,
    RectifiedMonomial,
    Relu,
    Residual,
    Sign,
    Sin,
    SumPool,
)
from . import _elementwise, _linear, _linear_spatial, _nonlinear
from ._state import State


@dataclass(frozen=True)
class KernelMap:
    linear: Optional[Callable[[State, Any, bool], State]] = None
    pointwise: Optional[Callable[[Any, bool], Callable]] = None
    merge: Optional[Callable[[Any, Sequence[State]], State]] = None
    fuses: bool = False
    reads_diagonal: bool = False
    flattens: bool = False
    reads: Optional[Callable[[Any, tuple], int]] = None


def _sum(outs: Sequence[State]) -> State:
    """FanInSum: the branches' outputs are independent Gaussians, so their kernels add."""
    def total(ks):
        return functools.reduce(operator.add, ks)

    ntk = None if outs[0].ntk is None else total([o.ntk for o in outs])
    return outs[-1].replace(nngp=total([o.nngp for o in outs]), ntk=ntk)


def _concat(outs: Sequence[State]) -> State:
    """FanInConcat on the channel axis: the kernel is the mean over all channels, each
    branch's weighted by its channel count (neural-tangents' plain mean when the counts
    are equal, as it computes it), whatever the parameterization."""
    widths = [o.channels for o in outs]
    weights = [1] * len(outs) if len(set(widths)) == 1 else widths

    def mean(ks):
        return sum(k * w for k, w in zip(ks, weights, strict=True)) / sum(weights)

    ntk = None if outs[0].ntk is None else mean([o.ntk for o in outs])
    return outs[0].replace(nngp=mean([o.nngp for o in outs]), ntk=ntk, channels=sum(widths))


def _erf(layer: Erf, float64: bool) -> Callable:
    """Bare ``erf`` keeps the map (and compiled program) it always had."""
    if (layer.a, layer.b, layer.c) == (1.0, 1.0, 0.0):
        return lambda s, v1, v2: _nonlinear.erf(s, v1, v2, float64)
    return lambda s, v1, v2: _elementwise.erf(s, v1, v2, layer.a, layer.b, layer.c, float64)


KERNEL_MAPS: dict[type, KernelMap] = {
    Dense: KernelMap(linear=_linear.dense),
    Conv: KernelMap(linear=_linear.conv, fuses=True),
    AvgPool: KernelMap(linear=lambda state, layer, standard: _linear.avg_pool(state, layer)),
    GlobalAvgPool: KernelMap(linear=lambda state, layer, standard:
                             _linear.global_avg_pool(state)),
    Flatten: KernelMap(linear=lambda state, layer, standard: _linear.flatten(state),
                       flattens=True),
    Identity: KernelMap(linear=lambda state, layer, standard: state),
    Relu: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                    _nonlinear.abrelu(s, v1, v2, 0.0, 1.0, float64)),
    ABRelu: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                      _nonlinear.abrelu(s, v1, v2, layer.a, layer.b, float64)),
    Erf: KernelMap(pointwise=lambda layer, float64: _erf(layer, float64)),
    Gelu: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                    _nonlinear.gelu(s, v1, v2, float64)),
    LayerNorm: KernelMap(pointwise=lambda layer, float64: _nonlinear.layer_norm),
    Sin: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                   _elementwise.sin(s, v1, v2, layer.a, layer.b, layer.c)),
    Rbf: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                   _elementwise.rbf(s, v1, v2, layer.gamma, float64)),
    Exp: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                   _elementwise.exp(s, v1, v2, layer.a, layer.b)),
    Gaussian: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                        _elementwise.gaussian(s, v1, v2, layer.a, layer.b, float64)),
    Monomial: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                        _elementwise.monomial(s, v1, v2, layer.degree)),
    RectifiedMonomial: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                                 _elementwise.rectified_monomial(s, v1, v2, layer.degree,
                                                                 float64)),
    Sign: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                    _elementwise.sign(s, v1, v2, float64)),
    Hermite: KernelMap(pointwise=lambda layer, float64: lambda s, v1, v2:
                       _elementwise.hermite(s, v1, v2, layer.degree)),
    Residual: KernelMap(merge=lambda layer, outs: _sum(outs)),
    Parallel: KernelMap(merge=lambda layer, outs:
                        _sum(outs) if layer.merge == "sum" else _concat(outs)),
    ConvLocal: KernelMap(linear=_linear_spatial.conv_local, reads_diagonal=True),
    ConvTranspose: KernelMap(linear=_linear_spatial.conv_transpose),
    SumPool: KernelMap(linear=lambda state, layer, standard:
                       _linear_spatial.sum_pool(state, layer)),
    GlobalSumPool: KernelMap(linear=lambda state, layer, standard:
                             _linear_spatial.global_sum_pool(state)),
    LocalAvgPool: KernelMap(linear=lambda state, layer, standard:
                            _linear_spatial.local_avg_pool(state, layer),
                            reads=lambda layer, shape: _linear_spatial.band_entries(
                                shape[:-1], layer.window)),
}


def kernel_map(layer: Any) -> KernelMap:
    try:
        return KERNEL_MAPS[type(layer)]
    except KeyError:  # unreachable after the spec's checks
        raise TypeError(f"no kernel map for layer {layer!r}") from None


def is_pointwise(layer: Any) -> bool:
    """Whether ``layer`` (``None``: past the last layer) has a pointwise map."""
    return layer is not None and kernel_map(layer).pointwise is not None
