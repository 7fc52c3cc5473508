"""The kernel map of each layer type: the kernels' half of a layer's declaration.

The spec declares what a layer is (``kernelcli.spec.layer_type``: its YAML
name, shape rule and flags); this table says what it does to a covariance.
Keyed by the same dataclasses, it is the one place in the kernels to touch when
a layer is added (``_compose`` and ``_repeat`` only look layers up here), and
``tests/test_layer_registry.py`` checks that every registered layer type has
an entry of the kind its spec flags call for.

An entry has exactly one of:

* ``linear(state, layer, standard) -> state``: a map that needs nothing but the
  covariances (dense, conv, pooling, flatten, identity);
* ``pointwise(layer, exact) -> f``, ``f(state, v1, v2) -> state``: a map that
  also reads each input's own variances ``v1``, ``v2`` (nonlinearities and
  ``layer_norm``; spec flag ``reads_variances``). These are what a convolution
  fuses with on a full covariance (``_compose._block``);
* ``branch(state, out) -> state``: how a layer holding a branch (spec flag
  ``branch``) joins its input ``state`` with the branch's output ``out``.

The maps are the very functions the engine compiled before the table existed,
called in the same order, so the compiled programs are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from ..spec import (ABRelu, AvgPool, Conv, ConvLocal, ConvTranspose, Dense, Erf, Flatten,
                    Gelu, GlobalAvgPool, GlobalSumPool, Identity, LayerNorm, Relu, Residual,
                    SumPool)
from . import _linear, _linear_spatial, _nonlinear
from ._state import State


@dataclass(frozen=True)
class KernelMap:
    linear: Optional[Callable[[State, Any, bool], State]] = None
    pointwise: Optional[Callable[[Any, bool], Callable]] = None
    branch: Optional[Callable[[State, State], State]] = None


def _residual_sum(state: State, out: State) -> State:
    """``x + f(x)``: the two branches are independent, so their kernels add."""
    ntk = None if state.ntk is None else state.ntk + out.ntk
    return out.replace(nngp=state.nngp + out.nngp, ntk=ntk)


KERNEL_MAPS: Dict[type, KernelMap] = {
    Dense: KernelMap(linear=_linear.dense),
    Conv: KernelMap(linear=_linear.conv),
    AvgPool: KernelMap(linear=lambda state, layer, standard: _linear.avg_pool(state, layer)),
    GlobalAvgPool: KernelMap(linear=lambda state, layer, standard:
                             _linear.global_avg_pool(state)),
    Flatten: KernelMap(linear=lambda state, layer, standard: _linear.flatten(state)),
    Identity: KernelMap(linear=lambda state, layer, standard: state),
    Relu: KernelMap(pointwise=lambda layer, exact: lambda s, v1, v2:
                    _nonlinear.abrelu(s, v1, v2, 0.0, 1.0, exact)),
    ABRelu: KernelMap(pointwise=lambda layer, exact: lambda s, v1, v2:
                      _nonlinear.abrelu(s, v1, v2, layer.a, layer.b, exact)),
    Erf: KernelMap(pointwise=lambda layer, exact: lambda s, v1, v2:
                   _nonlinear.erf(s, v1, v2, exact)),
    Gelu: KernelMap(pointwise=lambda layer, exact: lambda s, v1, v2:
                    _nonlinear.gelu(s, v1, v2, exact)),
    LayerNorm: KernelMap(pointwise=lambda layer, exact: _nonlinear.layer_norm),
    Residual: KernelMap(branch=_residual_sum),
    ConvLocal: KernelMap(linear=_linear_spatial.conv_local),
    ConvTranspose: KernelMap(linear=_linear_spatial.conv_transpose),
    SumPool: KernelMap(linear=lambda state, layer, standard:
                       _linear_spatial.sum_pool(state, layer)),
    GlobalSumPool: KernelMap(linear=lambda state, layer, standard:
                             _linear_spatial.global_sum_pool(state)),
}


def kernel_map(layer: Any) -> KernelMap:
    try:
        return KERNEL_MAPS[type(layer)]
    except KeyError:  # unreachable after the spec's checks
        raise TypeError(f"no kernel map for layer {layer!r}") from None


def is_pointwise(layer: Any) -> bool:
    """Whether ``layer`` (``None``: past the last layer) has a pointwise map."""
    return layer is not None and kernel_map(layer).pointwise is not None
