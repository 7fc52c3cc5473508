"""The finite-width network of each layer type: the Monte-Carlo oracle's half of a
layer's declaration (``tests/kernels/test_kernels_montecarlo.py``).

Each layer class maps to a :class:`FiniteNet`: how to draw its parameters and how
to run it on a batch, in plain JAX, NTK parameterization:
``z = W_std / sqrt(fan_in) * (W x) + b_std * b`` with standard normal ``W``, ``b``;
conv through ``jax.lax.conv_general_dilated`` (SAME / VALID; CIRCULAR as a wrap
pad then VALID), over 1 to 3 spatial axes (channels last). The layers are bound to
the input's rank first (``kernelcli.config.bind_layers``), so every ``filter``,
``window`` and ``strides`` has one entry per spatial axis. A layer added to the
registry without an entry here fails ``tests/config/test_layer_registry.py``.

Parameters come from a seeded numpy generator, drawn layer by layer in order
(``W`` then ``b``), so every run draws the same networks.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import erf as jerf

from kernelcli.config import (
    ABRelu,
    AvgPool,
    Conv,
    ConvLocal,
    ConvTranspose,
    Dense,
    Erf,
    Exp,
    Flatten,
    Gaussian,
    Gelu,
    GlobalAvgPool,
    GlobalSumPool,
    Hermite,
    Identity,
    LayerNorm,
    LocalAvgPool,
    Monomial,
    Parallel,
    Rbf,
    RectifiedMonomial,
    Relu,
    Residual,
    Sign,
    Sin,
    SumPool,
    bind_layers,
    transpose_out,
)

# lax dimension numbers of channels-last inputs with 1, 2, 3 spatial axes
_DIMENSIONS = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"),
               3: ("NDHWC", "DHWIO", "NDHWC")}


@dataclass(frozen=True)
class FiniteNet:
    """``forward(layer, x, p, run) -> x`` on a batch ``x`` with the layer's parameters
    ``p`` (``run(layers, x, params)`` runs a branch). ``init(layer, shape, rng, c_out,
    init_branch) -> (p, shape)`` draws ``p`` for one example's ``shape`` and returns the
    output shape; ``c_out`` is the layer's output channels (the readout's for the last
    layer), ``init_branch(layers, shape)`` draws a branch. ``None``: no parameters,
    ``out_shape(layer, shape)`` gives the shape."""

    forward: Callable
    init: Optional[Callable] = None
    out_shape: Callable[[Any, tuple], tuple] = lambda layer, shape: shape


def _pads(size: int, k: int, s: int):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def _out_len(n: int, k: int, s: int, padding: str) -> int:
    return (n - k) // s + 1 if padding == "VALID" else -(-n // s)


def _weights(rng: np.random.Generator, w_shape, c_out: int):
    return (rng.standard_normal(w_shape, dtype=np.float32),
            rng.standard_normal((c_out,), dtype=np.float32))


def _affine(layer, z, b, fan_in: int):
    x = (layer.W_std / math.sqrt(fan_in)) * z
    if layer.b_std is not None:
        x = x + layer.b_std * b
    return x


def _dense_init(layer, shape, rng, c_out, init_branch):
    return _weights(rng, (shape[-1], c_out), c_out), tuple(shape[:-1]) + (c_out,)


def _dense(layer, x, p, run):
    w, b = p
    return _affine(layer, x @ w, b, x.shape[-1])


def _conv_init(layer, shape, rng, c_out, init_branch):
    out = tuple(_out_len(n, k, s, layer.padding) for n, k, s in
                zip(shape[:-1], layer.filter, layer.strides)) + (c_out,)
    return _weights(rng, tuple(layer.filter) + (shape[-1], c_out), c_out), out


def _conv(layer, x, p, run):
    w, b = p
    c_in = x.shape[-1]
    padding = layer.padding
    if padding == "CIRCULAR":
        pads = [_pads(n, k, s) for n, k, s in zip(x.shape[1:-1], layer.filter, layer.strides)]
        x = jnp.pad(x, [(0, 0)] + pads + [(0, 0)], mode="wrap")
        padding = "VALID"
    z = lax.conv_general_dilated(x, w, tuple(layer.strides), padding,
                                 dimension_numbers=_DIMENSIONS[x.ndim - 2])
    return _affine(layer, z, b, c_in * math.prod(layer.filter))


def _window_sum(layer, x):
    window = (1,) + tuple(layer.window) + (1,)
    strides = (1,) + tuple(layer.strides) + (1,)
    if layer.padding == "CIRCULAR":
        x = jnp.pad(x, ((0, 0),) + tuple(_pads(n, k, s) for n, k, s in zip(
            x.shape[1:-1], layer.window, layer.strides)) + ((0, 0),), mode="wrap")
    padding = "VALID" if layer.padding == "CIRCULAR" else layer.padding
    # the init value a constant (np) zero: reduce_window is differentiable only so
    return lax.reduce_window(x, np.zeros((), x.dtype), lax.add, window, strides, padding)


def _avg_pool(layer, x, p, run):
    s = _window_sum(layer, x)
    if layer.normalize_edges and layer.padding == "SAME":   # divide by the taps inside
        return s / _window_sum(layer, jnp.ones_like(x[:1]))
    return s / math.prod(layer.window)     # zero padding counts


def _pool_shape(layer, shape):
    return tuple(_out_len(n, k, s, layer.padding)
                 for n, k, s in zip(shape[:-1], layer.window, layer.strides)) + (shape[-1],)


def _local_init(layer, shape, rng, c_out, init_branch):
    out = tuple(_out_len(n, k, s, layer.padding) for n, k, s in
                zip(shape[:-1], layer.filter, layer.strides))
    fan_in = shape[-1] * math.prod(layer.filter)
    return (rng.standard_normal(out + (fan_in, c_out), dtype=np.float32),
            rng.standard_normal(out + (c_out,), dtype=np.float32)), out + (c_out,)


def _local(layer, x, p, run):
    """Every output position's own weights on its input patch (and its own bias)."""
    w, b = p
    n = x.ndim - 2
    out = w.shape[:n]
    if layer.padding != "VALID":
        pads = tuple(_pads(m, k, s) for m, k, s in zip(x.shape[1:-1], layer.filter,
                                                        layer.strides))
        x = jnp.pad(x, ((0, 0),) + pads + ((0, 0),),
                    mode="wrap" if layer.padding == "CIRCULAR" else "constant")
    # patches: (N, *out, C * prod(filter)), one input slice per filter offset
    patches = jnp.concatenate([
        x[(slice(None),) + tuple(slice(a, a + (o - 1) * s + 1, s) for a, o, s in
                                 zip(offset, out, layer.strides))]
        for offset in itertools.product(*(range(k) for k in layer.filter))], axis=-1)
    axes = "dhw"[-n:]
    z = jnp.einsum(f"n{axes}f,{axes}fo->n{axes}o", patches, w)
    return _affine(layer, z, b, patches.shape[-1])


def _transpose_init(layer, shape, rng, c_out, init_branch):
    out = tuple(transpose_out(n, k, s, layer.padding) for n, k, s in
                zip(shape[:-1], layer.filter, layer.strides)) + (c_out,)
    return _weights(rng, tuple(layer.filter) + (shape[-1], c_out), c_out), out


def _transpose(layer, x, p, run):
    """``lax.conv_transpose``; CIRCULAR as neural-tangents defines it: the VALID output
    folded onto ``n*s`` positions, offset by half the filter's overhang."""
    w, b = p
    c_in = x.shape[-1]
    padding = "VALID" if layer.padding == "CIRCULAR" else layer.padding
    z = lax.conv_transpose(x, w, tuple(layer.strides), padding,
                           dimension_numbers=_DIMENSIONS[x.ndim - 2])
    if layer.padding == "CIRCULAR":
        for axis, n, k, s in zip(range(1, x.ndim - 1), x.shape[1:-1], layer.filter,
                                 layer.strides):
            size = n * s
            where = (np.arange(z.shape[axis]) - max(k - s, 0) // 2) % size
            moved = jnp.moveaxis(z, axis, 0)
            z = jnp.moveaxis(jnp.zeros((size,) + moved.shape[1:], z.dtype).at[where].add(moved),
                             0, axis)
    return _affine(layer, z, b, c_in * math.prod(layer.filter))


def _local_avg_pool(layer, x, p, run):
    from kernelcli.config import bound_axes

    axes = tuple(range(1, x.ndim - 1))
    shifts = [range(-(w // 2), w // 2 + 1) if w < n else range(n)
              for n, w in zip(x.shape[1:-1], bound_axes(layer.window), strict=True)]
    total = 0
    for s in itertools.product(*shifts):
        total = total + jnp.roll(x, s, axis=axes)
    return (total / np.prod([len(r) for r in shifts])).reshape(x.shape[0], -1)


def _layer_norm(layer, x, p, run):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-12)


def _hermite(layer, x, p, run):
    """``He_n(x) / sqrt(n!)``, the probabilists' Hermite polynomial of unit norm."""
    coeffs = np.polynomial.hermite_e.herme2poly([0] * layer.degree + [1])
    y = jnp.zeros_like(x)
    for k in reversed(range(len(coeffs))):
        y = y * x + float(coeffs[k])
    return y / math.sqrt(math.factorial(layer.degree))


def _residual_init(layer, shape, rng, c_out, init_branch):
    p, branch_shape = init_branch(layer.layers, shape)
    assert branch_shape == tuple(shape), (branch_shape, shape)
    return p, shape


def _parallel_init(layer, shape, rng, c_out, init_branch):
    params, shapes = zip(*(init_branch(branch, shape) for branch in layer.branches))
    if layer.merge == "sum":
        return list(params), shapes[0]
    return list(params), shapes[0][:-1] + (sum(s[-1] for s in shapes),)


def _parallel(layer, x, p, run):
    outs = [run(branch, x, q) for branch, q in zip(layer.branches, p)]
    return sum(outs[1:], outs[0]) if layer.merge == "sum" else jnp.concatenate(outs, -1)


FINITE_NETS: dict[type, FiniteNet] = {
    Dense: FiniteNet(_dense, init=_dense_init),
    Conv: FiniteNet(_conv, init=_conv_init),
    Relu: FiniteNet(lambda layer, x, p, run: jnp.maximum(x, 0)),
    ABRelu: FiniteNet(lambda layer, x, p, run:
                      layer.a * jnp.minimum(x, 0) + layer.b * jnp.maximum(x, 0)),
    Erf: FiniteNet(lambda layer, x, p, run: layer.a * jerf(layer.b * x) + layer.c),
    # exact GELU: x * Phi(x)
    Gelu: FiniteNet(lambda layer, x, p, run: x * 0.5 * (1 + jerf(x / math.sqrt(2)))),
    AvgPool: FiniteNet(_avg_pool, out_shape=_pool_shape),
    SumPool: FiniteNet(lambda layer, x, p, run: _window_sum(layer, x), out_shape=_pool_shape),
    GlobalSumPool: FiniteNet(lambda layer, x, p, run:
                             jnp.sum(x, axis=tuple(range(1, x.ndim - 1))),
                             out_shape=lambda layer, shape: (shape[-1],)),
    ConvLocal: FiniteNet(_local, init=_local_init),
    ConvTranspose: FiniteNet(_transpose, init=_transpose_init),
    GlobalAvgPool: FiniteNet(lambda layer, x, p, run:
                             jnp.mean(x, axis=tuple(range(1, x.ndim - 1))),
                             out_shape=lambda layer, shape: (shape[-1],)),
    Flatten: FiniteNet(lambda layer, x, p, run: x.reshape(x.shape[0], -1),
                       out_shape=lambda layer, shape: (int(np.prod(shape)),)),
    # local_avg_pool's network: the mean over the window's circular translations of the
    # feature map (a stride-1 circular average pool), then flatten
    LocalAvgPool: FiniteNet(_local_avg_pool,
                            out_shape=lambda layer, shape: (int(np.prod(shape)),)),
    LayerNorm: FiniteNet(_layer_norm),
    Identity: FiniteNet(lambda layer, x, p, run: x),
    Residual: FiniteNet(lambda layer, x, p, run: x + run(layer.layers, x, p),
                        init=_residual_init),
    Sin: FiniteNet(lambda layer, x, p, run: layer.a * jnp.sin(layer.b * x + layer.c)),
    Rbf: FiniteNet(lambda layer, x, p, run:
                   math.sqrt(2) * jnp.sin(math.sqrt(2 * layer.gamma) * x + math.pi / 4)),
    Exp: FiniteNet(lambda layer, x, p, run: layer.a * jnp.exp(layer.b * x)),
    Gaussian: FiniteNet(lambda layer, x, p, run: layer.a * jnp.exp(layer.b * x * x)),
    Monomial: FiniteNet(lambda layer, x, p, run: x ** layer.degree),
    RectifiedMonomial: FiniteNet(lambda layer, x, p, run:
                                 jnp.where(x >= 0, jnp.maximum(x, 0) ** layer.degree, 0)),
    Sign: FiniteNet(lambda layer, x, p, run: jnp.sign(x)),
    Hermite: FiniteNet(_hermite),
    Parallel: FiniteNet(_parallel, init=_parallel_init),
}


def init_params(layers: Sequence, shape, rng: np.random.Generator, width: int, out: int,
                top: bool = True):
    """Standard-normal ``(W, b)`` (float32, numpy) for every dense/conv in ``layers``,
    as a list aligned with them (``None`` for parameter-free layers, a nested list for
    a residual branch, a list of those for the branches of a parallel); a hidden
    dense/conv gets ``width`` times its own ``width`` units (1 unless set, so the
    ratios of widths that a concat weighs its branches by carry over), the last
    top-level layer, the readout, ``out`` units.
    Returns ``(params, output shape)``; ``shape`` is one example's shape."""
    def init_branch(branch, shape):
        return init_params(branch, shape, rng, width, out, top=False)

    layers = bind_layers(layers, shape)
    params = []
    for idx, layer in enumerate(layers):
        net = FINITE_NETS[type(layer)]
        if net.init is None:
            p, shape = None, net.out_shape(layer, shape)
        else:
            last = top and idx == len(layers) - 1
            c_out = out if last else width * getattr(layer, "width", 1)
            p, shape = net.init(layer, shape, rng, c_out, init_branch)
        params.append(p)
    return params, tuple(shape)


def apply(layers: Sequence, x, params):
    """Forward pass of a batch ``x`` with the parameters from ``init_params``."""
    for layer, p in zip(bind_layers(layers, x.shape[1:]), params):
        x = FINITE_NETS[type(layer)].forward(layer, x, p, apply)
    return x
