"""Check that an architecture fits its input data and obeys the layer order rules.

Done when the per-example input shape is known (after the data is opened) and
before any kernel is computed, so that a bad network fails at once with the
layer's YAML path instead of deep inside jit.

Shapes are per example: ``(H, W, C)`` for images, ``(D,)`` for vectors. The
channel count after ``dense``/``conv`` is the layer's ``width``.

Order rules (``docs/config.md``, as neural-tangents 0.6.5 enforces them): a
nonlinearity or ``layer_norm`` needs a Gaussian input, that is the output of an
affine layer (``dense``, ``conv``, ``conv_local``, ``conv_transpose``) possibly
passed through pools, ``identity``, ``layer_norm`` or a ``residual``. The raw input is not Gaussian,
nor is anything after a nonlinearity or ``flatten`` until the next
``dense``/``conv``. A ``residual`` needs a Gaussian input and a branch that ends
in ``dense``/``conv`` and keeps the shape.

Each layer's rules are part of its declaration (``_layers``; the rules
themselves are in ``_shapes``): this module only walks the layers.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

from ..errors import ConfigError
from ._config import Architecture
from ._layers import Layer
from ._shapes import Shape, State, step


def _start(input_shape: Sequence[int]) -> State:
    shape = tuple(input_shape)
    if (len(shape) not in (1, 3)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                       for n in shape)):
        raise ConfigError(f"input shape {shape} is not supported; expected (H, W, C) "
                          "images or (D,) vectors of positive sizes")
    return State(shape=shape, gaussian=False)


def layer_shapes(arch: Architecture, input_shape: Sequence[int]) -> List[Tuple[Layer, Shape, Shape]]:
    """``(layer, in_shape, out_shape)`` for each top-level layer, checking each one.

    ``input_shape`` is one example's shape: ``(H, W, C)`` or ``(D,)``.
    Raises ConfigError naming the first layer that breaks a shape or order rule.
    """
    st = _start(input_shape)
    rows = []
    for layer in arch.layers:
        out = step(layer, st)
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
