"""Shape rules: what each kind of layer does to one example's shape, and to
whether what flows is Gaussian (the order rules of ``docs/config-reference.md``).

Shapes are per example: spatial sizes then channels, ``(L, C)``, ``(H, W, C)`` or
``(D, H, W, C)``, or ``(D,)`` for vectors. A rule is ``(layer, state) -> state``
and raises ConfigError, naming the layer's YAML path, when the layer cannot take
the state. The layer declarations (``_layer_types``) pick one rule per layer
type; ``step`` applies the right one (and the ``needs_gaussian`` order rule
before it) to the layer bound to its input's rank (``_rank.bind_layer``: its
``filter``, ``window`` and ``strides`` have one entry per spatial axis), so the
check itself (``_check``) knows no layer by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

from ..errors import ConfigError
from ._fields import short_path
from ._rank import bind_layer
from ._registry import branches, layer_type, layer_types

Shape = tuple[int, ...]


def _either(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def affine_names() -> str:
    """The layers whose output is a fresh Gaussian (``dense or conv`` and the others
    declared ``affine``), as messages list them."""
    return _either(t.name for t in layer_types() if t.affine)


def keepers() -> str:
    """The layers a Gaussian signal passes through, from the declarations: the pools,
    ``identity`` and ``layer_norm`` (by name), then the layers holding branches (a
    ``parallel`` only with ``merge: sum``)."""
    plain = sorted(t.name for t in layer_types() if not t.branch and t.shape not in ENDS
                   and (t.pools or t.shape in (keep, normalize)))
    held = [("a parallel with merge sum" if t.shape is parallel else t.name)
            for t in layer_types() if t.branch]
    return _either(plain + held)


def vector_makers() -> str:
    """The layers that drop the spatial axes (``flatten``, the global pools)."""
    return _either(sorted(t.name for t in layer_types()
                          if t.shape in (flatten, global_avg_pool, local_avg_pool)))


def gaussian_hint() -> str:
    """What a layer that needs a Gaussian input must follow."""
    return f"it must follow {affine_names()} (possibly through {keepers()})"


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
    follows: Any = None                    # the last layer but identity (None: the input)


def label(layer: Any) -> str:
    return short_path(layer.where) if layer.where else layer_type(layer).name


def yaml_name(layer: Any) -> str:
    """The YAML name the user wrote (``leaky_relu`` too, though it became an ABRelu)."""
    return layer.where.rsplit(".", 1)[-1] if layer.where else layer_type(layer).name


def fail(layer: Any, message: str) -> ConfigError:
    return ConfigError(f"{label(layer)}: {message}")


SPATIAL_SHAPES = "a sequence (L, C), an image (H, W, C) or a volume (D, H, W, C)"


def needs_image(layer: Any, st: State) -> Shape:
    """The input's shape (spatial sizes, then channels) when it has spatial axes
    (1 to 3 of them); else the error that a spatial layer gets a vector."""
    if len(st.shape) >= 2:
        return st.shape
    name = yaml_name(layer)
    if st.vector_by:
        raise fail(layer, f"{name} needs spatial axes ({SPATIAL_SHAPES}) but gets a vector "
                          f"of shape {st.shape} made by {st.vector_by}; spatial layers cannot "
                          f"follow {vector_makers()}")
    raise fail(layer, f"{name} needs spatial axes ({SPATIAL_SHAPES}) but the input is a "
                      f"vector of shape {st.shape}; expected no spatial layer for vector data")


def needs_gaussian(layer: Any, st: State) -> None:
    if not st.gaussian:
        raise fail(layer, f"{yaml_name(layer)} acts on {st.not_gaussian}, which is not "
                          f"Gaussian; {gaussian_hint()}")


def step(layer: Any, st: State) -> State:
    """The state after ``layer``: its order rule, then its shape rule."""
    t = layer_type(layer)
    if t.needs_gaussian:
        needs_gaussian(layer, st)
    out = t.shape(bind_layer(layer, st.shape), st)
    # identity is transparent to the order rules that look one layer back (hermite's)
    return out if t.shape is keep else replace(out, follows=layer)


def _window(layer: Any, st: State, window: Sequence[int], strides: Sequence[int],
            padding: str, channels: int, noun: str) -> Shape:
    """The shape after a windowed layer (conv, avg_pool), checking that the window fits.
    ``window``, ``strides``: one entry per spatial axis (the layer bound by ``step``)."""
    sizes = needs_image(layer, st)[:-1]
    out = tuple(spatial_out(n, k, s, padding)
                for n, k, s in zip(sizes, window, strides, strict=True))
    if min(out) < 1:
        raise fail(layer, f"{noun} {tuple(window)} does not fit the input of shape "
                          f"{st.shape} under VALID padding; expected a {noun} no larger "
                          f"than {sizes}, or padding SAME or CIRCULAR")
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
                for n, k, s in zip(sizes, layer.filter, layer.strides, strict=True))
    return replace(st, shape=out + (layer.width,), gaussian=True)


def avg_pool(layer: Any, st: State) -> State:
    shape = _window(layer, st, layer.window, layer.strides, layer.padding, st.shape[-1],
                    "window")
    return replace(st, shape=shape)


def global_avg_pool(layer: Any, st: State) -> State:
    channels = needs_image(layer, st)[-1]
    return replace(st, shape=(channels,), vector_by=label(layer))


def flatten(layer: Any, st: State) -> State:
    # Flattening a vector changes nothing but still ends Gaussianity (config-reference.md).
    made = label(layer) if len(st.shape) > 1 else st.vector_by
    return replace(st, shape=(math.prod(st.shape),), gaussian=False,
                   not_gaussian=f"the output of flatten at {label(layer)}", vector_by=made)


def local_avg_pool(layer: Any, st: State) -> State:
    """``local_avg_pool``: a ``flatten`` averaged over translations within its window
    (``_layers_spatial.LocalAvgPool``), whose offsets must be symmetric about no shift
    (an odd window) or every offset (the whole axis), each at most once."""
    shape = needs_image(layer, st)
    for axis, (n, w) in enumerate(zip(shape[:-1], layer.window, strict=True)):
        if w > n or (w % 2 == 0 and w != n):
            raise fail(layer, f"window {tuple(layer.window)} has {w} along spatial axis "
                              f"{axis} of the input of shape {st.shape}; expected an odd "
                              f"window of at most {n} (the translations -(w-1)/2 .. (w-1)/2),"
                              f" or {n}, the whole axis (every translation)")
    return replace(st, shape=(math.prod(shape),), gaussian=False,
                   not_gaussian=f"the output of local_avg_pool at {label(layer)}",
                   vector_by=label(layer))


# Layers whose output is a vector that is not Gaussian (a pool among them passes no
# Gaussian on, so the order rules' messages do not list it with the keepers).
ENDS = (flatten, local_avg_pool)


def nonlinearity(layer: Any, st: State) -> State:
    return replace(st, gaussian=False,
                   not_gaussian=f"the output of {yaml_name(layer)} at {label(layer)}")


def unit_variance_nonlinearity(layer: Any, st: State) -> State:
    """``hermite``: its kernel (neural-tangents') assumes inputs of unit variance, which
    only ``layer_norm`` guarantees, so it must follow one (through identity at most)."""
    before = st.follows
    if before is None or layer_type(before).shape is not normalize:
        what = f"{yaml_name(before)} at {label(before)}" if before is not None else "the input"
        raise fail(layer, f"{yaml_name(layer)} follows {what}; expected it to follow "
                          "layer_norm directly (identity may stand between), since its kernel "
                          "assumes inputs of unit variance")
    return nonlinearity(layer, st)


def keep(layer: Any, st: State) -> State:
    """``identity``: changes nothing, not even what the next layer follows."""
    return st


def normalize(layer: Any, st: State) -> State:
    """``layer_norm`` (whose order rule is ``needs_gaussian``): keeps shape and Gaussianity."""
    return st


def _through(layers: Sequence[Any], st: State) -> State:
    """The state after a branch: ``layers`` in order (none: the identity)."""
    for inner in layers:
        st = step(inner, st)
    return st


def residual(layer: Any, st: State) -> State:
    if not layer.layers:
        raise fail(layer, "the branch is empty; expected a list of at least one layer")
    out = _through(layer.layers, st)
    last = layer.layers[-1]
    if not layer_type(last).affine:
        raise fail(layer, f"the branch ends in {yaml_name(last)}; expected it to end in "
                          f"{affine_names()}, since x + f(x) adds two independent Gaussians")
    if out.shape != st.shape:
        raise fail(layer, f"the branch maps shape {st.shape} to {out.shape}; expected it "
                          "to keep the shape, since its output is added to its input")
    return st  # x + f(x): Gaussian, and of the input's shape


def fresh(layers: Sequence[Any]) -> bool:
    """Whether a branch's output is independent of its input: it holds a dense or conv
    of its own, or a layer all of whose branches do (a residual's identity does not)."""
    return any(layer_type(inner).affine
               or (layer_type(inner).branch and all(fresh(b) for b in branches(inner)))
               for inner in layers)


def parallel(layer: Any, st: State) -> State:
    outs = [_through(branch, st) for branch in layer.branches]
    vector_by = next((o.vector_by for o in outs if o.vector_by), st.vector_by)
    if layer.merge == "concat":
        return _concat(layer, outs, vector_by)
    if len(outs) == 1:  # a sum of one: the branch itself (neural-tangents' FanInSum)
        return outs[0]
    for i, out in enumerate(outs):
        if not out.gaussian:
            given = "" if layer.branches[i] else " (empty: the identity)"
            raise fail(layer, f"merge sum needs Gaussian branch outputs, but branches[{i}]"
                              f"{given} gives {out.not_gaussian}, which is not Gaussian; "
                              f"expected each branch to end in {affine_names()} (possibly "
                              f"through {keepers()})")
    for i, out in enumerate(outs[1:], 1):
        if out.shape != outs[0].shape:
            raise fail(layer, f"merge sum adds outputs of shape {outs[0].shape} from "
                              f"branches[0] and {out.shape} from branches[{i}]; expected "
                              "one shape, since the outputs are added")
    shared = [f"branches[{i}]" for i, b in enumerate(layer.branches) if not fresh(b)]
    if len(shared) > 1:
        names = ", ".join(shared[:-1]) + " and " + shared[-1]
        raise fail(layer, f"merge sum adds {names}, which have no dense or "
                          "conv of their own; expected at most one such branch, since the "
                          "sum would count copies of one signal as independent")
    return replace(outs[0], vector_by=vector_by)  # a sum of Gaussians


def _concat(layer: Any, outs: Sequence[State], vector_by: str) -> State:
    for i, out in enumerate(outs[1:], 1):
        if out.shape[:-1] != outs[0].shape[:-1]:
            raise fail(layer, f"merge concat joins outputs of shape {outs[0].shape} from "
                              f"branches[0] and {out.shape} from branches[{i}]; expected "
                              "the same shape but for the channel (last) axis")
    channels = sum(out.shape[-1] for out in outs)
    return State(shape=outs[0].shape[:-1] + (channels,), gaussian=False,
                 not_gaussian=f"the output of parallel (merge concat) at {label(layer)}",
                 vector_by=vector_by)
