"""Check that an architecture fits its input data and obeys the layer order rules.

Done when the per-example input shape is known (after the data is opened) and
before any kernel is computed, so that a bad network fails at once with the
layer's YAML path instead of deep inside jit.

Shapes are per example: ``(H, W, C)`` for images, ``(D,)`` for vectors. The
channel count after ``dense``/``conv`` is the layer's ``width``.

Order rules (``docs/config.md``, as neural-tangents 0.6.5 enforces them): a
nonlinearity or ``layer_norm`` needs a Gaussian input, that is the output of
``dense``/``conv`` possibly passed through ``avg_pool``, ``global_avg_pool``,
``identity``, ``layer_norm`` or a ``residual``. The raw input is not Gaussian,
nor is anything after a nonlinearity or ``flatten`` until the next
``dense``/``conv``. A ``residual`` needs a Gaussian input and a branch that ends
in ``dense``/``conv`` and keeps the shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import List, Sequence, Tuple

from ..errors import ConfigError
from ._config import Architecture
from ._fields import short_path
from ._layers import (AFFINE, NONLINEARITIES, ABRelu, AvgPool, Conv, Dense, Erf, Flatten,
                      Gelu, GlobalAvgPool, Identity, Layer, LayerNorm, Relu, Residual)

Shape = Tuple[int, ...]

_NAMES = {Dense: "dense", Conv: "conv", Relu: "relu", Erf: "erf", Gelu: "gelu",
          ABRelu: "abrelu", AvgPool: "avg_pool", GlobalAvgPool: "global_avg_pool",
          Flatten: "flatten", LayerNorm: "layer_norm", Identity: "identity",
          Residual: "residual"}
_GAUSSIAN_HINT = ("it must follow dense or conv (possibly through avg_pool, global_avg_pool, "
                  "identity, layer_norm or residual)")


def spatial_out(size: int, k: int, s: int, padding: str) -> int:
    """Output length along one spatial axis of a window ``k`` with stride ``s`` (lax rules).

    VALID: ``floor((size - k) / s) + 1``, which is below 1 when the window does
    not fit (callers must check). SAME and CIRCULAR: ``ceil(size / s)``, for any
    window size.
    """
    if padding == "VALID":
        return (size - k) // s + 1
    if padding in ("SAME", "CIRCULAR"):
        return -(-size // s)
    raise ValueError(f"{padding!r} is not a padding; expected one of SAME, VALID, CIRCULAR")


@dataclass(frozen=True)
class _State:
    """What flows between layers: the shape, and whether it is Gaussian and why not."""

    shape: Shape
    gaussian: bool
    not_gaussian: str = "the raw input"    # what made it non-Gaussian, for messages
    vector_by: str = ""                    # the flatten/global_avg_pool that made it a vector


def _label(layer: Layer) -> str:
    return short_path(layer.where) if layer.where else _NAMES[type(layer)]


def _name(layer: Layer) -> str:
    """The YAML name the user wrote (``leaky_relu`` too, though it became an ABRelu)."""
    return layer.where.rsplit(".", 1)[-1] if layer.where else _NAMES[type(layer)]


def _fail(layer: Layer, message: str) -> ConfigError:
    return ConfigError(f"{_label(layer)}: {message}")


def _needs_image(layer: Layer, st: _State) -> Tuple[int, int, int]:
    if len(st.shape) == 3:
        return st.shape  # type: ignore[return-value]
    name = _name(layer)
    if st.vector_by:
        raise _fail(layer, f"{name} needs an image (H, W, C) but gets a vector of shape "
                           f"{st.shape} made by {st.vector_by}; spatial layers cannot "
                           "follow flatten or global_avg_pool")
    raise _fail(layer, f"{name} needs an image (H, W, C) but the input is a vector of "
                       f"shape {st.shape}; expected no spatial layer for vector data")


def _needs_gaussian(layer: Layer, st: _State) -> None:
    if not st.gaussian:
        raise _fail(layer, f"{_name(layer)} acts on {st.not_gaussian}, which is not "
                           f"Gaussian; {_GAUSSIAN_HINT}")


def _window(layer: Layer, st: _State, window: Sequence[int], strides: Sequence[int],
            padding: str, channels: int) -> Shape:
    """The shape after a windowed layer (conv, avg_pool), checking that the window fits."""
    h, w, _ = _needs_image(layer, st)
    out = tuple(spatial_out(n, k, s, padding) for n, k, s in zip((h, w), window, strides))
    if min(out) < 1:
        noun = "filter" if isinstance(layer, Conv) else "window"
        raise _fail(layer, f"{noun} {tuple(window)} does not fit the input of shape "
                           f"{st.shape} under VALID padding; expected a {noun} no larger "
                           f"than {(h, w)}, or padding SAME or CIRCULAR")
    return out + (channels,)


def _step(layer: Layer, st: _State) -> _State:
    """The state after ``layer``; raises ConfigError when ``layer`` cannot take ``st``."""
    if isinstance(layer, Dense):
        # On images dense acts per pixel, on the channel axis, like a 1x1 conv.
        return replace(st, shape=st.shape[:-1] + (layer.width,), gaussian=True)
    if isinstance(layer, Conv):
        shape = _window(layer, st, layer.filter, layer.strides, layer.padding, layer.width)
        return replace(st, shape=shape, gaussian=True)
    if isinstance(layer, AvgPool):
        shape = _window(layer, st, layer.window, layer.strides, layer.padding, st.shape[-1])
        return replace(st, shape=shape)
    if isinstance(layer, GlobalAvgPool):
        channels = _needs_image(layer, st)[2]
        return replace(st, shape=(channels,), vector_by=_label(layer))
    if isinstance(layer, Flatten):
        # Flattening a vector changes nothing but still ends Gaussianity (config.md).
        made = _label(layer) if len(st.shape) > 1 else st.vector_by
        return replace(st, shape=(math.prod(st.shape),), gaussian=False,
                       not_gaussian=f"the output of flatten at {_label(layer)}",
                       vector_by=made)
    if isinstance(layer, NONLINEARITIES):
        _needs_gaussian(layer, st)
        return replace(st, gaussian=False,
                       not_gaussian=f"the output of {_name(layer)} at {_label(layer)}")
    if isinstance(layer, LayerNorm):
        _needs_gaussian(layer, st)
        return st
    if isinstance(layer, Identity):
        return st
    if isinstance(layer, Residual):
        return _residual(layer, st)
    raise TypeError(f"{layer!r} is not a layer")  # a programming error, not the user's


def _residual(layer: Residual, st: _State) -> _State:
    _needs_gaussian(layer, st)
    if not layer.layers:
        raise _fail(layer, "the branch is empty; expected a list of at least one layer")
    out = st
    for inner in layer.layers:
        out = _step(inner, out)
    last = layer.layers[-1]
    if not isinstance(last, AFFINE):
        raise _fail(layer, f"the branch ends in {_name(last)}; expected it to end in "
                           "dense or conv, since x + f(x) adds two independent Gaussians")
    if out.shape != st.shape:
        raise _fail(layer, f"the branch maps shape {st.shape} to {out.shape}; expected it "
                           "to keep the shape, since its output is added to its input")
    return st  # x + f(x): Gaussian, and of the input's shape


def _start(input_shape: Sequence[int]) -> _State:
    shape = tuple(input_shape)
    if (len(shape) not in (1, 3)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                       for n in shape)):
        raise ConfigError(f"input shape {shape} is not supported; expected (H, W, C) "
                          "images or (D,) vectors of positive sizes")
    return _State(shape=shape, gaussian=False)


def layer_shapes(arch: Architecture, input_shape: Sequence[int]) -> List[Tuple[Layer, Shape, Shape]]:
    """``(layer, in_shape, out_shape)`` for each top-level layer, checking each one.

    ``input_shape`` is one example's shape: ``(H, W, C)`` or ``(D,)``.
    Raises ConfigError naming the first layer that breaks a shape or order rule.
    """
    st = _start(input_shape)
    rows = []
    for layer in arch.layers:
        out = _step(layer, st)
        rows.append((layer, st.shape, out.shape))
        st = out
    return rows


def check_architecture(arch: Architecture, input_shape: Sequence[int], *,
                       require_vector_output: bool = True) -> Shape:
    """Check ``arch`` against one example's ``input_shape`` and return its output shape.

    ``input_shape`` is ``(H, W, C)`` for images or ``(D,)`` for vectors. With
    ``require_vector_output`` (the default) the network must end in a vector,
    since a kernel matrix has one entry per pair of examples.
    Raises ConfigError naming the offending layer's YAML path and the shapes.
    """
    rows = layer_shapes(arch, input_shape)
    out = rows[-1][2] if rows else tuple(input_shape)
    if require_vector_output and len(out) != 1:
        raise ConfigError(f"architecture.layers: the network outputs shape {out}, an image; "
                          "expected a vector: add flatten or global_avg_pool before the "
                          "last dense")
    return out
