"""Check that an architecture fits its input data and obeys the layer order rules.

Done when the per-example input shape is known (after the data is opened) and
before any kernel is computed, so that a bad network fails at once with the
layer's YAML path instead of deep inside jit.

Shapes are per example: spatial sizes then channels for inputs with 1 to 3
spatial axes (``(L, C)`` sequences, ``(H, W, C)`` images, ``(D, H, W, C)``
volumes), ``(D,)`` for vectors. The channel count after ``dense``/``conv`` is
the layer's ``width``. A layer's ``filter``, ``window`` and ``strides`` must have
one entry per spatial axis, or be one integer for all of them (``_rank``).

Order rules (``docs/config-reference.md``, as neural-tangents 0.6.5 enforces them): a
nonlinearity or ``layer_norm`` needs a Gaussian input, that is the output of an
affine layer (``dense``, ``conv``, ``conv_local``, ``conv_transpose``) possibly
passed through pools, ``identity``, ``layer_norm``, a ``residual`` or a
``parallel`` with ``merge: sum``. The raw input is not Gaussian, nor is anything
after a nonlinearity, ``flatten`` or a ``parallel`` with ``merge: concat`` until
the next affine layer. A ``residual`` needs a Gaussian input and a branch that ends
in ``dense``/``conv`` and keeps the shape. The branches of a ``parallel`` are
checked like any layer list from its input; ``merge: sum`` needs Gaussian
outputs of one shape, at most one of them from a branch without a
``dense``/``conv`` of its own, and ``merge: concat`` outputs that differ in
their channel (last) axis at most. ``hermite`` must follow ``layer_norm``
(through ``identity`` at most): its kernel assumes unit-variance inputs.

Each layer's rules are part of its declaration (``_layers``; the rules
themselves are in ``_shapes``): this module only walks the layers.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import ConfigError
from ._allowed import Architecture
from ._fields import MAX_AXES
from ._layer_types import Layer
from ._rank import bind_layer
from ._shapes import Shape, State, step


def _start(input_shape: Sequence[int]) -> State:
    shape = tuple(input_shape)
    if (not 1 <= len(shape) <= MAX_AXES + 1
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                       for n in shape)):
        raise ConfigError(f"input shape {shape} is not supported; expected (D,) vectors, "
                          "(L, C) sequences, (H, W, C) images or (D, H, W, C) volumes of "
                          "positive sizes")
    return State(shape=shape, gaussian=False)


def layer_shapes(arch: Architecture, input_shape: Sequence[int]) -> list[tuple[Layer, Shape, Shape]]:
    """``(layer, in_shape, out_shape)`` for each top-level layer, checking each one;
    the layers bound to their input's rank (one ``filter`` entry per spatial axis).

    ``input_shape`` is one example's shape: ``(L, C)``, ``(H, W, C)``,
    ``(D, H, W, C)`` or ``(D,)``.
    Raises ConfigError naming the first layer that breaks a shape or order rule.
    """
    st = _start(input_shape)
    rows = []
    for layer in arch.layers:
        layer = bind_layer(layer, st.shape)
        out = step(layer, st)
        rows.append((layer, st.shape, out.shape))
        st = out
    return rows


def check_architecture(arch: Architecture, input_shape: Sequence[int], *,
                       require_vector_output: bool = True) -> Shape:
    """Check ``arch`` against one example's ``input_shape`` and return its output shape.

    ``input_shape`` is ``(L, C)``, ``(H, W, C)`` or ``(D, H, W, C)`` with spatial
    axes, or ``(D,)`` for vectors. With
    ``require_vector_output`` (the default) the network must end in a vector,
    since a kernel matrix has one entry per pair of examples.
    Raises ConfigError naming the offending layer's YAML path and the shapes.
    """
    rows = layer_shapes(arch, input_shape)
    out = rows[-1][2] if rows else tuple(input_shape)
    if arch.readouts is not None:
        return _check_readouts(arch, input_shape, require_vector_output)
    if require_vector_output and len(out) != 1:
        what = {2: "a sequence", 3: "an image"}.get(len(out), "a volume")
        raise ConfigError(f"architecture.layers: the network outputs shape {out}, {what}; "
                          "expected a vector: add flatten or global_avg_pool before the "
                          "last dense")
    return out


def _check_readouts(arch: Architecture, input_shape: Sequence[int],
                    require_vector_output: bool) -> Shape:
    """Each readout's head from the body's state after ``after[i]`` layers; a head that
    cannot take it fails naming ``architecture.readouts.after[i]``, the count, the state
    it met and the head layer's own rule. Returns the last head's output shape. The
    body's own output is never read past the last count, so it may end anywhere."""
    st = _start(input_shape)
    ro = arch.readouts
    assert ro is not None, "called for a network with readouts"
    after = ro.after
    out = None
    for n, layer in enumerate(arch.layers[:after[-1]], start=1):
        st = step(bind_layer(layer, st.shape), st)
        if n not in after:
            continue
        i = after.index(n)
        head = st
        try:
            for h in ro.head:
                head = step(bind_layer(h, head.shape), head)
            out = head.shape
            if require_vector_output and len(out) != 1:
                raise ConfigError(f"architecture.readouts.head: outputs shape {out} there; "
                                  "expected a vector: add flatten or global_avg_pool before "
                                  "the last dense")
        except ConfigError as e:
            what = "" if st.gaussian else f", not Gaussian ({st.not_gaussian})"
            raise ConfigError(f"architecture.readouts.after[{i}]: {n} reads out shape "
                              f"{st.shape}{what}, which the head cannot take: {e}") from None
    assert out is not None, "the loop reaches after[-1], a count _load checked"
    return out
