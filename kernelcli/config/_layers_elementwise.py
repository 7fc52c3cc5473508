"""Elementwise nonlinearities beyond relu/erf/gelu: their dataclasses and declarations.

neural-tangents 0.6.5's ``Sin``/``Cos``, ``Rbf``, ``Exp``, ``Gaussian``, ``Monomial``,
``RectifiedMonomial``, ``Sign`` and ``Hermite``, declared like the layers of
``_layers`` (``TYPES``, which ``_layer_types`` adds to the registry); ``abs``
(``abrelu`` with ``a=-1, b=1``) and ``sigmoid_like`` (an ``erf``) are spellings of
layers declared there. The kernel maps are in ``kernelcli.kernels._elementwise``.

Every one is a nonlinearity: it needs a Gaussian input and ends Gaussianity;
``hermite`` must moreover follow ``layer_norm`` (``_shapes.unit_variance_nonlinearity``).
Scales and shifts are numbers from -1000 to 1000 (``gamma`` from 0), as the slopes of
``abrelu``; degrees are integers (``monomial``: neural-tangents' 0..5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import _shapes as S
from ._layers import ACTIVATION
from ._registry import LayerType, Spelling

MAX_MONOMIAL = 5      # neural-tangents' Monomial takes 0..5
# Not bounded in neural-tangents. The kernel grows like (2n-1)!! v**n, so a degree is
# bounded where float32 still holds a sensible input variance; 5 like monomial.
MAX_RECTIFIED_MONOMIAL = 5
# Not bounded in neural-tangents; after layer_norm the kernel is c**n with |c| <= 1,
# so any degree is finite: 10 keeps the (tested) finite polynomials' coefficients sane.
MAX_HERMITE = 10


def _where():
    return field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Sin:
    """``a * sin(b * x + c)``; ``cos`` is ``c + pi/2`` (as neural-tangents' ``Cos``)."""

    a: float = 1.0
    b: float = 1.0
    c: float = 0.0
    where: str = _where()


@dataclass(frozen=True)
class Rbf:
    """``sqrt(2) * sin(sqrt(2 gamma) * x + pi/4)``: NNGP ``exp(-gamma * |x - x'|**2 / d)``."""

    gamma: float = 1.0
    where: str = _where()


@dataclass(frozen=True)
class Exp:
    """``a * exp(b * x)``."""

    a: float = 1.0
    b: float = 1.0
    where: str = _where()


@dataclass(frozen=True)
class Gaussian:
    """``a * exp(b * x**2)``; for ``b > 0`` finite only for input variances below 1/(4b)."""

    a: float = 1.0
    b: float = -1.0
    where: str = _where()


@dataclass(frozen=True)
class Monomial:
    """``x**degree``."""

    degree: int = 2
    where: str = _where()


@dataclass(frozen=True)
class RectifiedMonomial:
    """``x**degree`` for ``x >= 0``, else 0 (arc-cosine kernel of order ``degree``)."""

    degree: int = 2
    where: str = _where()


@dataclass(frozen=True)
class Sign:
    """``sign(x)``."""

    where: str = _where()


@dataclass(frozen=True)
class Hermite:
    """The probabilists' Hermite polynomial of ``degree``, normalised to unit norm under
    N(0, 1); its kernel assumes unit-variance inputs (hence: after ``layer_norm``)."""

    degree: int = 2
    where: str = _where()


def _sin(p, shift: float = 0.0) -> Sin:
    return Sin(a=p.scale("a", 1.0), b=p.scale("b", 1.0), c=p.scale("c", 0.0) + shift,
               where=p.path)


TYPES = (
    LayerType(Sin, "sin", parameters=("a", "b", "c"), parse=_sin, **ACTIVATION,
              also=(Spelling("cos", ("a", "b", "c"), lambda p: _sin(p, math.pi / 2)),)),
    LayerType(Rbf, "rbf", parameters=("gamma",), **ACTIVATION,
              parse=lambda p: Rbf(gamma=p.scale("gamma", 1.0, minimum=0.0), where=p.path)),
    LayerType(Exp, "exp", parameters=("a", "b"), **ACTIVATION,
              parse=lambda p: Exp(a=p.scale("a", 1.0), b=p.scale("b", 1.0), where=p.path)),
    LayerType(Gaussian, "gaussian", parameters=("a", "b"), **ACTIVATION,
              parse=lambda p: Gaussian(a=p.scale("a", 1.0), b=p.scale("b", -1.0),
                                       where=p.path)),
    LayerType(Monomial, "monomial", parameters=("degree",), **ACTIVATION,
              parse=lambda p: Monomial(degree=p.degree(MAX_MONOMIAL), where=p.path)),
    LayerType(RectifiedMonomial, "rectified_monomial", parameters=("degree",), **ACTIVATION,
              parse=lambda p: RectifiedMonomial(degree=p.degree(MAX_RECTIFIED_MONOMIAL),
                                                where=p.path)),
    LayerType(Sign, "sign", **ACTIVATION),
    LayerType(Hermite, "hermite", S.unit_variance_nonlinearity, ("degree",),
              parse=lambda p: Hermite(degree=p.degree(MAX_HERMITE), where=p.path),
              needs_gaussian=True, reads_variances=True, flip="alike"),
)
