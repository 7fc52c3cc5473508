"""The native engine's custom calls, C++ loops built on first use (``native/``):
convolution and ABReLU-family nonlinearity, with or without the global average pool
after them (``layer.cc``); chains of 3 x 3 SAME blocks ending in the global average
pool, on pairs or on each input with itself (``chain.cc``); and runs of 3 x 3 SAME
blocks on spatial diagonals, the state of networks without pooling (``diag.cc``).

Why: on the cpu engine XLA evaluates the nonlinearity's angle once per output kind, does
not vectorise a pool summed inside the nonlinearity's loop, and streams every
``(H W)^2`` intermediate through memory (profiled; BENCHMARKS.md). The C++ loops window
each output row pair, map it and add it to the pool while it is in cache; a chain
runs its layers one covariance diagonal at a time, so no covariance between its
layers is written at all; a diagonal chain runs all its layers on a pair's ``H x W``
diagonal in L1. They apply only where their formulas are kernelcli's exactly
(:func:`applies`, :func:`layer_applies`, :func:`chain_length`, :func:`diag_length`);
every other layer runs the cpu engine's own code.

The library (``_native_library``: its targets, loaded once per process) is compiled
when the package is built, for portable targets, and loaded once its bytes match their
recorded checksum (``_native_build``; docs/native.md); it is built at first use only
where the package carries none this machine can load. Its identity (a hash of the
sources and the flags that decide its bits) is what a run records and a resume must
find again. Where no library can be had, the plan cannot run: :func:`unavailable` says
why; asking for it is refused (exit 2) before any work, and ``auto`` does not choose it
(and says so).
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import jax
import numpy as np

from ..config import ABRelu, AvgPool, Conv, GlobalAvgPool, Relu, bound_axes

# the library's names, also this module's (the plan's routing asks them here)
from ._native_library import (  # noqa: F401
    CHAIN_TARGETS,
    DIAG_TARGETS,
    SYMBOLS,
    TARGETS,
    describe,
    identity_problem,
    library,
    unavailable,
)
from ._spatial import out_size, pads
from ._state import State

# The native engine's revision, which a run records (``engine.native_revision``) and a
# resume keeps: each revision took more layers into custom calls, so its last bits
# differ. 1: blocks, tails and chains on full covariances (runs from before the revision
# was recorded); 2: also the diagonal chain (``diag``); 3: the diagonal chain also
# makes a network's input diagonal from the images.
REVISION = 3

def abrelu_params(layer) -> Optional[tuple[float, float]]:
    """``(a, b)`` of a nonlinearity the tail computes (``relu``, ``abrelu`` and what
    the configuration spells with it: ``leaky_relu``, ``abs``), else ``None``."""
    if isinstance(layer, Relu):
        return 0.0, 1.0
    if isinstance(layer, ABRelu):
        return float(layer.a), float(layer.b)
    return None


def _ab(act) -> tuple[float, float]:
    """``abrelu_params`` of a nonlinearity the routing accepted (``is_block``)."""
    params = abrelu_params(act)
    if params is None:
        raise ValueError(f"native call: {act!r} is not an ABReLU-family nonlinearity")
    return params


def is_block(conv, act) -> bool:
    """Whether ``conv, act`` is a layer pair the custom call computes on a full
    covariance: a stride-1 SAME or VALID convolution, then an ABReLU-family
    nonlinearity."""
    return (isinstance(conv, Conv) and abrelu_params(act) is not None
            and set(np.atleast_1d(conv.strides)) == {1} and conv.padding in ("SAME", "VALID"))


def layer_applies(conv, act, state: State) -> bool:
    """Whether ``conv, act`` on ``state`` is what the custom call computes: the pair of
    :func:`is_block` on a full image covariance."""
    return (is_block(conv, act) and state.full and len(state.spatial_shape) == 2
            and _ntk_mode(state) is not None and (np.dtype(state.nngp.dtype), True) in TARGETS)


def applies(conv, act, pool, state: State) -> bool:
    """Whether ``conv, act, pool`` on ``state`` is the pooled tail: the layer of
    :func:`layer_applies`, then a global average pool."""
    return isinstance(pool, GlobalAvgPool) and layer_applies(conv, act, state)


def _chain_block(conv, act) -> bool:
    return (isinstance(conv, Conv) and abrelu_params(act) is not None
            and bound_axes(conv.filter) == (3, 3) and bound_axes(conv.strides) == (1, 1)
            and conv.padding == "SAME")


def _blocks_at(layers, k: int) -> int:
    """How many 3 x 3 SAME blocks (:func:`_chain_block`) follow one another from
    ``layers[k]``: what either chain can run in one call."""
    m = 0
    while k + 2 * m + 1 < len(layers) and _chain_block(layers[k + 2 * m], layers[k + 2 * m + 1]):
        m += 1
    return m


def _ntk_mode(state: State) -> Optional[int]:
    """How the calls take ``state``'s NTK: 0 none, 1 the raw input's (exactly zero), 2 an
    array; ``None``: a nonzero constant, which they do not take."""
    if state.ntk is None:
        return 0
    if isinstance(state.ntk, float):
        return 1 if state.ntk == 0.0 else None
    return 2


def _stacked(variances):
    """The blocks' ``(v1, v2)`` pairs as two ``(m, P, ...)`` stacks."""
    return (jax.numpy.stack([a for a, _ in variances]),
            jax.numpy.stack([b for _, b in variances]))


def _chain_end(layer) -> Optional[bool]:
    """Whether ``layer`` ends a chain with the global average pool (``True``) or with a
    2 x 2 average pool of stride 2, VALID (``False``); ``None``: it cannot end one."""
    if isinstance(layer, GlobalAvgPool):
        return True
    if (isinstance(layer, AvgPool) and bound_axes(layer.window) == (2, 2)
            and bound_axes(layer.strides) == (2, 2) and layer.padding == "VALID"):
        return False
    return None


def chain_length(layers, k: int, state: State) -> int:
    """How many (convolution, nonlinearity) blocks from ``layers[k]`` the chain's
    custom call runs with the pool after them: 3 x 3 stride-1 SAME convolutions, each
    followed by an ABReLU-family nonlinearity, on a full covariance of two equally
    sized inputs (at least 2 x 2), then a global average pool or a 2 x 2 average pool
    of stride 2 (VALID); 0 when that is not what follows ``k``."""
    if not (k + 1 < len(layers) and layer_applies(layers[k], layers[k + 1], state)):
        return 0
    shape = state.nngp.shape
    if shape[1] != shape[2] or shape[3] != shape[4] or min(shape[1], shape[3]) < 2:
        return 0
    m = _blocks_at(layers, k)
    return m if m and k + 2 * m < len(layers) and _chain_end(layers[k + 2 * m]) is not None \
        else 0


def diag_length(layers, k: int, state: State) -> int:
    """How many (convolution, nonlinearity) blocks from ``layers[k]`` the diagonal
    chain's custom call runs: 3 x 3 stride-1 SAME convolutions, each followed by an
    ABReLU-family nonlinearity, on a spatial diagonal ``(P, H, W)`` (a network without
    pooling, or after its last pool); 0 where none starts at ``k``."""
    if not (state.spatial and not state.full and len(state.spatial_shape) == 2
            and _ntk_mode(state) is not None
            and (np.dtype(state.nngp.dtype), False) in DIAG_TARGETS):
        return 0
    return _blocks_at(layers, k)


def helps(layers, full: bool) -> bool:
    """Whether ``layers`` hold a layer pair some custom call here computes: a block of
    :func:`is_block` in a network that keeps full covariances (``full``), or a 3 x 3
    SAME block, which the diagonal chain computes on a network's diagonals."""
    return any((full and is_block(c, a)) or _chain_block(c, a)
               for c, a in zip(layers, layers[1:], strict=False))


def reads_images(conv, images) -> bool:
    """Whether the first layer's call can make the input's covariance itself from the
    two images ``images`` (a 3 x 3 convolution of 3-channel images): 9 multiply-adds an
    entry instead of reading the covariance XLA would write, 4 MiB a pair at 32 x 32."""
    return (images is not None and isinstance(conv, Conv)
            and bound_axes(conv.filter) == (3, 3)
            and images[0].ndim == 4 and images[0].shape[-1] == 3)


def tail(state: State, conv: Conv, act, v1, v2, standard: bool, images=None) -> State:
    """``global_avg_pool(act(conv(state)))`` by the custom call (``applies`` holds):
    ``v1`` ``(P, Ho, Wo)``, ``v2`` ``(P, Ho', Wo')`` the nonlinearity's per-input
    variances, as ``_fused.conv_pointwise`` takes them; ``images``: the pair's two
    inputs, where ``state`` is their covariance and :func:`reads_images` holds."""
    return _call(state, conv, act, v1, v2, standard, pooled=True, images=images)


def layer(state: State, conv: Conv, act, v1, v2, standard: bool, images=None) -> State:
    """``act(conv(state))`` by the custom call (``layer_applies`` holds): the output's
    full covariances, as ``_fused.conv_pointwise`` gives them in a pair pass;
    ``images`` as for :func:`tail`."""
    return _call(state, conv, act, v1, v2, standard, pooled=False, images=images)


def _call(state: State, conv: Conv, act, v1, v2, standard: bool, pooled: bool,
          images=None) -> State:
    a, b = _ab(act)
    x = state.nngp
    (h, _), (w, _) = state.nngp.shape[1:3], state.nngp.shape[3:5]
    kh, kw = bound_axes(conv.filter)
    sizes = (out_size(h, kh, 1, conv.padding), out_size(w, kw, 1, conv.padding))
    if v1.shape[1:] != sizes or v2.shape[1:] != sizes:
        raise ValueError(f"native tail: variances {v1.shape}, {v2.shape} for outputs {sizes}")
    mode = _ntk_mode(state)
    assert mode is not None  # layer_applies() refused a constant NTK
    p = x.shape[0]
    shape = (p,) if pooled else (p, sizes[0], sizes[0], sizes[1], sizes[1])
    out = (jax.ShapeDtypeStruct(shape, x.dtype),
           jax.ShapeDtypeStruct(shape if mode else (0,) * len(shape), x.dtype))
    call = jax.ffi.ffi_call(TARGETS[np.dtype(x.dtype), pooled], out, vmap_method="sequential")
    args = (x, state.ntk if mode == 2 else x)
    if images is not None:  # the covariance left to XLA's dead-code pass
        args = tuple(i.astype(x.dtype)[..., None] for i in images)
    ntk: Optional[jax.Array]
    nngp, ntk = call(
        *args, v1, v2, from_images=np.int64(images is not None),
        kh=np.int64(kh), kw=np.int64(kw),
        lo_h=np.int64(pads(h, kh, 1, conv.padding)[0]),
        lo_w=np.int64(pads(w, kw, 1, conv.padding)[0]),
        ntk_mode=np.int64(mode), standard=np.int64(bool(standard)),
        has_bias=np.int64(conv.b_std is not None),
        w_var=np.float64(conv.W_std ** 2),
        b_var=np.float64(0.0 if conv.b_std is None else conv.b_std ** 2),
        fan_in=np.float64(state.channels * math.prod(bound_axes(conv.filter))),
        a=np.float64(a),
        b=np.float64(b))
    ntk = None if mode == 0 else ntk
    if pooled:
        return state.replace(nngp=nngp, ntk=ntk, spatial=False, full=False,
                             channels=conv.width)
    return state.replace(nngp=nngp, ntk=ntk, channels=conv.width)


def chain(state: State, layers, variances, standard: bool, images=None) -> State:
    """The ``m`` blocks and the pool ``layers`` (``2 m + 1`` layers, where
    :func:`chain_length` is ``m``) by the chain's custom call; ``variances``: the
    ``m`` nonlinearities' ``(v1, v2)``, each ``(P, H, W)``; ``images`` as for
    :func:`tail`. No covariance between the layers is written."""
    x = state.nngp
    v1, v2 = _stacked(variances)
    if v1.shape[1:] != (x.shape[0], x.shape[1], x.shape[3]) or v2.shape != v1.shape:
        raise ValueError(f"native chain: variances {v1.shape}, {v2.shape} for {x.shape}")
    return _chain_call(state, layers, standard, images, (v1, v2))[0]


def self_chain(state: State, layers, standard: bool, images=None):
    """:func:`chain` for each input with itself (the per-input pass, ``state`` the
    inputs' own covariances): ``(state, variances)``, the ``m`` nonlinearities'
    per-input variances ``(P, H, W)`` made on the way, as the per-input pass records
    them."""
    state, v = _chain_call(state, layers, standard, images, None)
    return state, [v[i] for i in range(v.shape[0])]


def diag(state: State, layers, variances, standard: bool, raw: bool = False) -> State:
    """The ``m`` blocks ``layers`` (``2 m`` layers, where :func:`diag_length` is at least
    ``m``) on a spatial diagonal by the diagonal chain's custom call; ``variances``: what
    :func:`self_diag` recorded for the ``m`` nonlinearities, as ``PairVariances.tables``
    gives them (each table ``(n, H, W)``), which the call reads each pair's rows from.
    ``raw``: ``state`` is the raw input's diagonal, which the call makes from the images
    that come with the tables, where they do (:func:`_images_for`)."""
    v1s, v2s, rows1, rows2, images = variances
    shape = state.nngp.shape
    if (len(v1s) != len(layers) // 2 or len(v2s) != len(v1s)
            or any(v.shape[1:] != shape[1:] for v in (*v1s, *v2s))
            or rows1.shape != shape[:1] or rows2.shape != shape[:1]):
        raise ValueError(f"native diagonal: variances {[v.shape for v in v1s]}, "
                         f"{[v.shape for v in v2s]} for {shape}")
    images = _images_for(state, images) if raw else None
    return _diag_call(state, layers, standard, (rows1, rows2, *v1s, *v2s), images)[0]


def self_diag(state: State, layers, standard: bool, images=None):
    """:func:`diag` for each input with itself (the per-input pass): ``(state, roots)``,
    per nonlinearity ``(P, H, W)``, recorded by the per-input pass where it records
    variances: ``sqrt(max(v, 0))`` of each pre-activation variance ``v``, which is all
    the chain reads of them, taken once per input here rather than twice per pair.
    ``images``: the inputs ``(x, x)``, where ``state`` is their raw diagonal."""
    images = _images_for(state, images)
    state, v = _diag_call(state, layers, standard, None, images)
    return state, [v[i] for i in range(v.shape[0])]


def _images_for(state: State, images):
    """``images`` (two ``(n, H, W, C)`` arrays) where the diagonal chain can make
    ``state``, the raw input's diagonal ``(P, H, W)``, from them, else ``None``."""
    if images is None or _ntk_mode(state) == 2:
        return None
    a, b = images
    want = (*state.nngp.shape[1:], state.channels)
    return images if a.ndim == b.ndim == 4 and a.shape[1:] == b.shape[1:] == want else None


def _diag_call(state: State, layers, standard: bool, tables, images=None):
    """The diagonal chain's call: on pairs, ``tables`` the pairs' rows and the variance
    tables (:func:`diag`); ``None``: on each input with itself, which makes them.
    ``images``: the two inputs' images the call makes ``state`` from (their rows the
    tables'), else ``state`` is read."""
    convs, acts = layers[0::2], layers[1::2]
    x = state.nngp
    mode = _ntk_mode(state)
    assert mode is not None  # the chain's routing refused a constant NTK
    out = [jax.ShapeDtypeStruct(x.shape, x.dtype),
           jax.ShapeDtypeStruct(x.shape if mode else (0, 0, 0), x.dtype)]
    if tables is None:
        out.append(jax.ShapeDtypeStruct((len(convs), *x.shape), x.dtype))
    call = jax.ffi.ffi_call(DIAG_TARGETS[np.dtype(x.dtype), tables is None], tuple(out),
                            vmap_method="sequential")
    args = (x, state.ntk if mode == 2 else x)
    if images is not None:  # the input's diagonal left to XLA's dead-code pass
        args = tuple(i.astype(x.dtype) for i in images)
    got = call(*args, *(tables or ()), from_images=np.int64(images is not None),
               **_block_attrs(state, convs, acts, mode, standard))
    state = state.replace(nngp=got[0], ntk=None if mode == 0 else got[1],
                          channels=convs[-1].width)
    return state, (got[2] if tables is None else None)


def _block_attrs(state: State, convs, acts, mode: int, standard: bool) -> dict:
    """The attributes of a chain's blocks on ``state``, one entry per layer (both
    chains)."""
    f64 = functools.partial(np.asarray, dtype=np.float64)
    widths = [state.channels] + [c.width for c in convs[:-1]]
    params = [_ab(a) for a in acts]
    return dict(ntk_mode=np.int64(mode), standard=np.int64(bool(standard)),
                has_bias=np.asarray([c.b_std is not None for c in convs], dtype=np.int64),
                w_var=f64([c.W_std ** 2 for c in convs]),
                b_var=f64([0.0 if c.b_std is None else c.b_std ** 2 for c in convs]),
                fan_in=f64([9 * c for c in widths]), a=f64([a for a, _ in params]),
                b=f64([b for _, b in params]))


def _chain_call(state: State, layers, standard: bool, images, variances):
    convs, acts, pooled = layers[0:-1:2], layers[1:-1:2], _chain_end(layers[-1])
    assert pooled is not None  # _blocks_at's chains end in a pool
    x = state.nngp
    p, h, w = x.shape[0], x.shape[1], x.shape[3]
    mode = _ntk_mode(state)
    assert mode is not None  # the chain's routing refused a constant NTK
    shape = (p,) if pooled else (p, h // 2, h // 2, w // 2, w // 2)
    out = [jax.ShapeDtypeStruct(shape, x.dtype),
           jax.ShapeDtypeStruct(shape if mode else (0,) * len(shape), x.dtype)]
    if variances is None:
        out.append(jax.ShapeDtypeStruct((len(convs), p, h, w), x.dtype))
    target = CHAIN_TARGETS[np.dtype(x.dtype), variances is None, pooled]
    call = jax.ffi.ffi_call(target, tuple(out), vmap_method="sequential")
    args = (x, state.ntk if mode == 2 else x)
    if images is not None:  # the covariance left to XLA's dead-code pass
        args = tuple(i.astype(x.dtype)[..., None] for i in images)
    got = call(*args, *(variances or ()), lo=np.int64(pads(h, 3, 1, "SAME")[0]),
               from_images=np.int64(images is not None),
               **_block_attrs(state, convs, acts, mode, standard))
    state = state.replace(nngp=got[0], ntk=None if mode == 0 else got[1],
                          spatial=not pooled, full=not pooled, channels=convs[-1].width)
    return state, (got[2] if variances is None else None)
