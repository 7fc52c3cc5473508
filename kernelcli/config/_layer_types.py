"""The layer registry's table, built in one place: every family module's ``TYPES``,
registered in order, and the groups derived from them.

A family module (``_layers``: the core layers; ``_layers_elementwise``: the further
nonlinearities; ``_layers_spatial``: the further spatial layers) holds dataclasses
and their :class:`~kernelcli.config._registry.LayerType` records and imports no other
family but the one it borrows readers from, so no family depends on being imported
by another. A new family is one more import and one more ``TYPES`` below.
``kernelcli.config`` imports this module before anything that looks a layer up.
"""

from __future__ import annotations

from typing import Union

from . import _layers, _layers_elementwise, _layers_spatial
from . import _shapes as S
from ._layers import (
    ABRelu,
    AvgPool,
    Conv,
    Dense,
    Erf,
    Flatten,
    Gelu,
    GlobalAvgPool,
    Identity,
    LayerNorm,
    Parallel,
    Relu,
    Residual,
)
from ._layers_elementwise import Exp, Gaussian, Hermite, Monomial, Rbf, RectifiedMonomial, Sign, Sin
from ._layers_spatial import ConvLocal, ConvTranspose, GlobalSumPool, LocalAvgPool, SumPool
from ._registry import layer_types, register

register(*_layers.TYPES, *_layers_elementwise.TYPES, *_layers_spatial.TYPES)

Layer = Union[Dense, Conv, Relu, Erf, Gelu, ABRelu, AvgPool, GlobalAvgPool,
              Flatten, LayerNorm, Identity, Residual, Sin, Rbf, Exp, Gaussian, Monomial,
              RectifiedMonomial, Sign, Hermite, Parallel, ConvLocal, ConvTranspose, SumPool,
              GlobalSumPool, LocalAvgPool]

# Groups of classes, derived from the declarations (for tests and callers that filter).
NONLINEARITIES = tuple(t.cls for t in layer_types()
                       if t.shape in (S.nonlinearity, S.unit_variance_nonlinearity))
POOLS = tuple(t.cls for t in layer_types() if t.pools)
AFFINE = tuple(t.cls for t in layer_types() if t.affine)
