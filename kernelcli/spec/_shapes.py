"""Shape rules: what each kind of layer does to one example's shape, and to
whether what flows is Gaussian (the order rules of ``docs/config.md``).

Shapes are per example: ``(H, W, C)`` for images, ``(D,)`` for vectors. A rule
is ``(layer, state) -> state`` and raises ConfigError, naming the layer's YAML
path, when the layer cannot take the state. The layer declarations
(``_layer_types``) pick one rule per layer type; ``step`` applies the right one
(and the ``needs_gaussian`` order rule before it), so the check itself
(``_check``) knows no layer by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence, Tuple

from ..errors import ConfigError
from ._fields import short_path
from ._registry import layer_type, layer_types

Shape = Tuple[int, ...]

def _either(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def affine_names() -> str:
    """The layers whose output is a fresh Gaussian (``dense or conv`` and the others
    declared ``affine``), as messages list them."""
    return _either(t.name for t in layer_types() if t.affine)


def gaussian_hint() -> str:
    """What a layer that needs a Gaussian input must follow, from the declarations:
    an affine layer, possibly through pools, ``keep`` layers and branches."""
    through = (t.name for t in layer_types() if t.pools or t.branch or t.shape is keep)
    return f"it must follow {affine_names()} (possibly through {_either(through)})"


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


def transpose_out(size: int, k: int, s: int, padding: str) -> int:
    """Output length along one axis of a transposed convolution (``lax.conv_transpose``
    and neural-tangents' ``ConvTranspose``): ``size * s`` under SAME and CIRCULAR,
    ``size * s + max(k - s, 0)`` under VALID; never below 1."""
    if padding == "VALID":
        return size * s + max(k - s, 0)
    if padding in ("SAME", "CIRCULAR"):
        return size * s
    raise ValueError(f"{padding!r} is not a padding; expected one of SAME, VALID, CIRCULAR")


@dataclass(frozen=True)
class State:
    """What flows between layers: the shape, and whether it is Gaussian and why not."""

    shape: Shape
    gaussian: bool
    not_gaussian: str = "the raw input"    # what made it non-Gaussian, for messages
    vector_by: str = ""                    # the flatten/global_avg_pool that made it a vector


def label(layer: Any) -> str:
    return short_path(layer.where) if layer.where else layer_type(layer).name


def yaml_name(layer: Any) -> str:
    """The YAML name the user wrote (``leaky_relu`` too, though it became an ABRelu)."""
    return layer.where.rsplit(".", 1)[-1] if layer.where else layer_type(layer).name


def fail(layer: Any, message: str) -> ConfigError:
    return ConfigError(f"{label(layer)}: {message}")


def needs_image(layer: Any, st: State) -> Tuple[int, int, int]:
    if len(st.shape) == 3:
        return st.shape  # type: ignore[return-value]
    name = yaml_name(layer)
    if st.vector_by:
        raise fail(layer, f"{name} needs an image (H, W, C) but gets a vector of shape "
                          f"{st.shape} made by {st.vector_by}; spatial layers cannot "
                          "follow flatten or global_avg_pool")
    raise fail(layer, f"{name} needs an image (H, W, C) but the input is a vector of "
                      f"shape {st.shape}; expected no spatial layer for vector data")


def needs_gaussian(layer: Any, st: State) -> None:
    if not st.gaussian:
        raise fail(layer, f"{yaml_name(layer)} acts on {st.not_gaussian}, which is not "
                          f"Gaussian; {gaussian_hint()}")


def step(layer: Any, st: State) -> State:
    """The state after ``layer``: its order rule, then its shape rule."""
    t = layer_type(layer)
    if t.needs_gaussian:
        needs_gaussian(layer, st)
    return t.shape(layer, st)


def _window(layer: Any, st: State, window: Sequence[int], strides: Sequence[int],
            padding: str, channels: int, noun: str) -> Shape:
    """The shape after a windowed layer (conv, avg_pool), checking that the window fits."""
    h, w, _ = needs_image(layer, st)
    out = tuple(spatial_out(n, k, s, padding) for n, k, s in zip((h, w), window, strides))
    if min(out) < 1:
        raise fail(layer, f"{noun} {tuple(window)} does not fit the input of shape "
                          f"{st.shape} under VALID padding; expected a {noun} no larger "
                          f"than {(h, w)}, or padding SAME or CIRCULAR")
    return out + (channels,)


# --- the rules ---------------------------------------------------------------------

def dense(layer: Any, st: State) -> State:
    # On images dense acts per pixel, on the channel axis, like a 1x1 conv.
    return replace(st, shape=st.shape[:-1] + (layer.width,), gaussian=True)


def conv(layer: Any, st: State) -> State:
    shape = _window(layer, st, layer.filter, layer.strides, layer.padding, layer.width,
                    "filter")
    return replace(st, shape=shape, gaussian=True)


def conv_transpose(layer: Any, st: State) -> State:
    sizes = needs_image(layer, st)[:-1]
    out = tuple(transpose_out(n, k, s, layer.padding)
                for n, k, s in zip(sizes, layer.filter, layer.strides))
    return replace(st, shape=out + (layer.width,), gaussian=True)


def avg_pool(layer: Any, st: State) -> State:
    shape = _window(layer, st, layer.window, layer.strides, layer.padding, st.shape[-1],
                    "window")
    return replace(st, shape=shape)


def global_avg_pool(layer: Any, st: State) -> State:
    channels = needs_image(layer, st)[2]
    return replace(st, shape=(channels,), vector_by=label(layer))


def flatten(layer: Any, st: State) -> State:
    # Flattening a vector changes nothing but still ends Gaussianity (config.md).
    made = label(layer) if len(st.shape) > 1 else st.vector_by
    return replace(st, shape=(math.prod(st.shape),), gaussian=False,
                   not_gaussian=f"the output of flatten at {label(layer)}", vector_by=made)


def nonlinearity(layer: Any, st: State) -> State:
    return replace(st, gaussian=False,
                   not_gaussian=f"the output of {yaml_name(layer)} at {label(layer)}")


def keep(layer: Any, st: State) -> State:
    """``identity``, and ``layer_norm`` (whose order rule is ``needs_gaussian``)."""
    return st


def residual(layer: Any, st: State) -> State:
    if not layer.layers:
        raise fail(layer, "the branch is empty; expected a list of at least one layer")
    out = st
    for inner in layer.layers:
        out = step(inner, out)
    last = layer.layers[-1]
    if not layer_type(last).affine:
        raise fail(layer, f"the branch ends in {yaml_name(last)}; expected it to end in "
                          f"{affine_names()}, since x + f(x) adds two independent Gaussians")
    if out.shape != st.shape:
        raise fail(layer, f"the branch maps shape {st.shape} to {out.shape}; expected it "
                          "to keep the shape, since its output is added to its input")
    return st  # x + f(x): Gaussian, and of the input's shape
