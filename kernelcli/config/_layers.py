"""Layer value objects, each declared once: its dataclass and its :class:`LayerType`.

Each layer is a frozen dataclass holding only static numbers; the kernel maths
in :mod:`kernelcli.kernels` gives each one its meaning. ``where`` is the YAML
path the layer came from (for example ``architecture.layers[3].conv``), kept
only to name it in error messages; it takes no part in equality.

Right after each dataclass comes the spec's whole knowledge of that layer, as
one ``LayerType(...)``: its YAML name(s) and parameters with the
reader that builds it, its shape rule (from ``_shapes``), its order flags and its
flip rule (``kernel.augment``). ``TYPES`` lists them; ``_layer_types`` builds the
registry from this module's and the other families' lists.
Parsing (``_parse_layers``) and the shape check (``_check``) look layers up in
the registry instead of testing classes, so adding a layer here (and its kernel
map, see CONTRIBUTING.md) is all they need.

``repeat`` is expanded when the configuration is read, so it has no class here;
``leaky_relu: {alpha}`` becomes ``ABRelu(a=alpha, b=1)``, ``abs`` ``ABRelu(a=-1, b=1)``,
``sigmoid_like`` neural-tangents' ``Erf(0.5, 1/2.4020563531719796, 0.5)``. The other
elementwise nonlinearities (``sin``, ``exp``, ``hermite``...) are declared in
``_layers_elementwise``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from . import _shapes as S
from ._registry import LayerType, Spelling

# A composite layer's members: each a ``Layer`` (the union ``_layer_types`` builds from
# this module's classes and the other families'). Named here as that union, it would be
# an import of ``_layer_types``, which imports this module: a cycle, type-only or not.
Member = Any

PADDINGS = ("SAME", "VALID", "CIRCULAR")

# Sizes along the spatial axes (``filter``, ``window``, ``strides``): a tuple with one
# entry per spatial axis, or, as parsed before the input's rank is known, one int
# meaning that size along every axis. The shape check and the kernels see the
# layers bound to the input (``_rank.bind_layer``): tuples of the input's length.
Axes = Union[int, tuple[int, ...]]


@dataclass(frozen=True)
class Dense:
    """Fully connected on the channel axis (per pixel on images, like a 1x1 conv)."""

    W_std: float = 1.0
    b_std: Optional[float] = 0.0
    width: int = 1
    where: str = field(default="", compare=False, repr=False)


DENSE = LayerType(
    Dense, "dense", S.dense, ("W_std", "b_std", "width"), affine=True, flip="alike",
    parse=lambda p: Dense(W_std=p.w_std(), b_std=p.b_std(), width=p.width(), where=p.path))


@dataclass(frozen=True)
class Conv:
    """Convolution over the spatial axes (1 to 3 of them: ``(L,)``, ``(H, W)``,
    ``(D, H, W)``); ``filter``/``strides`` give one size per axis, or one int for
    every axis (see :data:`Axes`)."""

    filter: Axes = 3
    strides: Axes = 1
    padding: str = "SAME"
    W_std: float = 1.0
    b_std: Optional[float] = 0.0
    width: int = 1
    where: str = field(default="", compare=False, repr=False)


def conv_parser(cls):
    """The reader of a layer with ``conv``'s parameters and defaults (``conv``,
    ``conv_local``, ``conv_transpose``)."""
    def parse(p):
        return cls(filter=p.pair("filter", 3, "a filter size"),
                   strides=p.pair("strides", 1, "a stride"),
                   padding=p.padding("SAME"), W_std=p.w_std(), b_std=p.b_std(),
                   width=p.width(), where=p.path)
    return parse


_conv = conv_parser(Conv)


CONV = LayerType(Conv, "conv", S.conv,
                 ("filter", "strides", "padding", "W_std", "b_std", "width"),
                 parse=_conv, affine=True, flip="window", window=lambda layer: layer.filter)


@dataclass(frozen=True)
class Relu:
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Erf:
    """``a * erf(b * x) + c``; bare ``erf`` is ``a=1, b=1, c=0``."""

    a: float = 1.0
    b: float = 1.0
    c: float = 0.0
    where: str = field(default="", compare=False, repr=False)


# neural-tangents' Sigmoid_like: 0.5 * erf(x / 2.4020563531719796) + 0.5
SIGMOID_LIKE = dict(a=0.5, b=1 / 2.4020563531719796, c=0.5)


@dataclass(frozen=True)
class Gelu:
    where: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class ABRelu:
    """``a * min(x, 0) + b * max(x, 0)``."""

    a: float = 0.0
    b: float = 1.0
    where: str = field(default="", compare=False, repr=False)


# A nonlinearity acts alike at every position, so it keeps a flip equivariance.
ACTIVATION: dict[str, Any] = dict(shape=S.nonlinearity, needs_gaussian=True,
                                  reads_variances=True, flip="alike")
ACTIVATIONS = (
    LayerType(Relu, "relu", **ACTIVATION),
    LayerType(Erf, "erf", parameters=("a", "b", "c"), **ACTIVATION,
              parse=lambda p: Erf(a=p.scale("a", 1.0), b=p.scale("b", 1.0),
                                  c=p.scale("c", 0.0), where=p.path),
              also=(Spelling("sigmoid_like", (),
                             lambda p: Erf(**SIGMOID_LIKE, where=p.path)),)),
    LayerType(Gelu, "gelu", **ACTIVATION),
    LayerType(ABRelu, "abrelu", parameters=("a", "b"), **ACTIVATION,
              parse=lambda p: ABRelu(a=p.slope("a"), b=p.slope("b"), where=p.path),
              also=(Spelling("leaky_relu", ("alpha",),
                             lambda p: ABRelu(a=p.slope("alpha"), b=1.0, where=p.path)),
                    Spelling("abs", (), lambda p: ABRelu(a=-1.0, b=1.0, where=p.path)))),
)


@dataclass(frozen=True)
class AvgPool:
    """``normalize_edges``: under SAME padding, divide by the positions inside the
    input instead of the whole window (neural-tangents' option; no effect otherwise)."""

    window: Axes = 2
    strides: Axes = 2
    padding: str = "VALID"
    normalize_edges: bool = False
    where: str = field(default="", compare=False, repr=False)


def _avg_pool(p) -> AvgPool:
    window = p.pair("window", 2, "a window size")
    return AvgPool(window=window, strides=p.pair("strides", window, "a stride"),
                   padding=p.padding("VALID"),
                   normalize_edges=p.boolean("normalize_edges", False), where=p.path)


AVG_POOL = LayerType(AvgPool, "avg_pool", S.avg_pool,
                     ("window", "strides", "padding", "normalize_edges"),
                     parse=_avg_pool, pools=True, flip="window",
                     window=lambda layer: layer.window)


@dataclass(frozen=True)
class GlobalAvgPool:
    where: str = field(default="", compare=False, repr=False)


GLOBAL_AVG_POOL = LayerType(GlobalAvgPool, "global_avg_pool", S.global_avg_pool, pools=True,
                            flip="alike")


@dataclass(frozen=True)
class Flatten:
    where: str = field(default="", compare=False, repr=False)


FLATTEN = LayerType(Flatten, "flatten", S.flatten, flip="alike")


@dataclass(frozen=True)
class LayerNorm:
    where: str = field(default="", compare=False, repr=False)


LAYER_NORM = LayerType(LayerNorm, "layer_norm", S.normalize, needs_gaussian=True,
                       reads_variances=True, flip="alike")


@dataclass(frozen=True)
class Identity:
    where: str = field(default="", compare=False, repr=False)


IDENTITY = LayerType(Identity, "identity", S.keep, flip="alike")


@dataclass(frozen=True)
class Residual:
    """``x + f(x)`` with ``f`` the serial composition of ``layers``."""

    layers: tuple[Member, ...] = ()
    where: str = field(default="", compare=False, repr=False)


# `residual: [...]` is `residual: {layers: [...]}`. As in neural-tangents, FanOut(2),
# parallel(Identity, serial(layers)), FanInSum: its branches are the identity and f.
RESIDUAL = LayerType(Residual, "residual", S.residual, ("layers",), needs_gaussian=True,
                     parse=lambda p: Residual(layers=p.layers("layers"), where=p.path),
                     branches=lambda layer: ((), layer.layers), bare="layers",
                     flip="branches")


MERGES = ("sum", "concat")


@dataclass(frozen=True)
class Parallel:
    """neural-tangents' ``serial(FanOut(k), parallel(*branches), FanInSum())`` (``merge:
    sum``) or ``FanInConcat(axis=-1)`` (``merge: concat``); an empty branch is the
    identity."""

    branches: tuple[tuple[Member, ...], ...] = ()
    merge: str = "sum"
    where: str = field(default="", compare=False, repr=False)


PARALLEL = LayerType(Parallel, "parallel", S.parallel, ("branches", "merge"),
                     parse=lambda p: Parallel(branches=p.branches("branches"),
                                              merge=p.choice("merge", MERGES, "a merge"),
                                              where=p.path),
                     branches=lambda layer: layer.branches, flip="branches")


# This family's declarations, in the registry's order (``_layer_types``).
TYPES = (DENSE, CONV) + ACTIVATIONS + (AVG_POOL, GLOBAL_AVG_POOL, FLATTEN, LAYER_NORM,
                                       IDENTITY, RESIDUAL, PARALLEL)
