"""Layer value objects, each declared once: its dataclass and its :class:`LayerType`.

Each layer is a frozen dataclass holding only static numbers; the kernel maths
in :mod:`kernelcli.kernels` gives each one its meaning. ``where`` is the YAML
path the layer came from (for example ``architecture.layers[3].conv``), kept
only to name it in error messages; it takes no part in equality.

Right after each dataclass comes the spec's whole knowledge of that layer, as
one ``register(LayerType(...))``: its YAML name(s) and parameters with the
reader that builds it, its shape rule (from ``_shapes``) and its order flags.
Parsing (``_parse_layers``) and the shape check (``_check``) look layers up in
the registry instead of testing classes, so adding a layer here (and its kernel
map, see CONTRIBUTING.md) is all they need.

``repeat`` is expanded when the configuration is read, so it has no class here;
``leaky_relu: {alpha}`` becomes ``ABRelu(a=alpha, b=1)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

from . import _shapes as S
from ._registry import LayerType, Spelling, layer_types, register

PADDINGS = ("SAME", "VALID", "CIRCULAR")


@dataclass(frozen=True)
class Dense:
    """Fully connected on the channel axis (per pixel on images, like a 1x1 conv)."""

    W_std: float = 1.0
    b_std: Optional[float] = 0.0
    width: int = 1
    where: str = field(default="", compare=False, repr=False)


register(LayerType(
    Dense, "dense", S.dense, ("W_std", "b_std", "width"), affine=True,
    parse=lambda p: Dense(W_std=p.w_std(), b_std=p.b_std(), width=p.width(), where=p.path)))


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


def _conv(p) -> Conv:
    return Conv(filter=p.pair("filter", (3, 3), "a filter size"),
                strides=p.pair("strides", (1, 1), "a stride"),
                padding=p.padding("SAME"), W_std=p.w_std(), b_std=p.b_std(),
                width=p.width(), where=p.path)


register(LayerType(Conv, "conv", S.conv,
                   ("filter", "strides", "padding", "W_std", "b_std", "width"),
                   parse=_conv, affine=True))


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


_ACTIVATION = dict(shape=S.nonlinearity, needs_gaussian=True, reads_variances=True)
register(
    LayerType(Relu, "relu", **_ACTIVATION),
    LayerType(Erf, "erf", **_ACTIVATION),
    LayerType(Gelu, "gelu", **_ACTIVATION),
    LayerType(ABRelu, "abrelu", parameters=("a", "b"), **_ACTIVATION,
              parse=lambda p: ABRelu(a=p.slope("a"), b=p.slope("b"), where=p.path),
              also=(Spelling("leaky_relu", ("alpha",),
                             lambda p: ABRelu(a=p.slope("alpha"), b=1.0, where=p.path)),)),
)


@dataclass(frozen=True)
class AvgPool:
    """``normalize_edges``: under SAME padding, divide by the positions inside the
    image instead of the whole window (neural-tangents' option; no effect otherwise)."""

    window: Tuple[int, int] = (2, 2)
    strides: Tuple[int, int] = (2, 2)
    padding: str = "VALID"
    normalize_edges: bool = False
    where: str = field(default="", compare=False, repr=False)


def _avg_pool(p) -> AvgPool:
    window = p.pair("window", (2, 2), "a window size")
    return AvgPool(window=window, strides=p.pair("strides", window, "a stride"),
                   padding=p.padding("VALID"),
                   normalize_edges=p.boolean("normalize_edges", False), where=p.path)


register(LayerType(AvgPool, "avg_pool", S.avg_pool,
                   ("window", "strides", "padding", "normalize_edges"),
                   parse=_avg_pool, pools=True))


@dataclass(frozen=True)
class GlobalAvgPool:
    where: str = field(default="", compare=False, repr=False)


register(LayerType(GlobalAvgPool, "global_avg_pool", S.global_avg_pool, pools=True))


@dataclass(frozen=True)
class Flatten:
    where: str = field(default="", compare=False, repr=False)


register(LayerType(Flatten, "flatten", S.flatten))


@dataclass(frozen=True)
class LayerNorm:
    where: str = field(default="", compare=False, repr=False)


register(LayerType(LayerNorm, "layer_norm", S.keep, needs_gaussian=True, reads_variances=True))


@dataclass(frozen=True)
class Identity:
    where: str = field(default="", compare=False, repr=False)


register(LayerType(Identity, "identity", S.keep))


@dataclass(frozen=True)
class Residual:
    """``x + f(x)`` with ``f`` the serial composition of ``layers``."""

    layers: Tuple["Layer", ...] = ()
    where: str = field(default="", compare=False, repr=False)


# Parsed by _parse_layers (the branch is a layer list); `residual: [...]` works too.
register(LayerType(Residual, "residual", S.residual, ("layers",), needs_gaussian=True,
                   branch=True))


# The spatial family registers here, before the groups below are derived.
from ._layers_spatial import ConvLocal, ConvTranspose, GlobalSumPool, SumPool  # noqa: E402

Layer = Union[Dense, Conv, Relu, Erf, Gelu, ABRelu, AvgPool, GlobalAvgPool,
              Flatten, LayerNorm, Identity, Residual, ConvLocal, ConvTranspose, SumPool,
              GlobalSumPool]

# Groups of classes, derived from the declarations (for tests and callers that filter).
NONLINEARITIES = tuple(t.cls for t in layer_types() if t.shape is S.nonlinearity)
POOLS = tuple(t.cls for t in layer_types() if t.pools)
AFFINE = tuple(t.cls for t in layer_types() if t.affine)
