"""Serial composition of layer maps, and which covariance each layer needs.

``forward`` walks the layers in order, exactly like neural-tangents' ``serial``;
a layer holding branches (``parallel``; ``residual``, which is FanOut(2) ->
parallel(identity, serial(branch)) -> FanInSum) runs each branch from its input,
in order, and merges their outputs by its kernel map.

Memory rule: the full spatial covariance (``(H*W)^2`` numbers per pair; the
square of the product of the spatial sizes for any number of spatial axes) is
only needed while a pooling layer lies ahead, in any branch; a convolution or a
nonlinearity maps the spatial diagonal to itself, so after the last pooling
layer the state is cut down to its diagonal (``H*W`` numbers per pair), and
networks without pooling never hold more than the diagonal. Inside the branches
of the last layer that pools, each branch is cut after its own last pool (at
once when it has none), so the branches end in one layout. A ``conv_local``
reads only the diagonal, so the layers before it hold only the diagonal too
unless a pool lies between (``full_needed``).
"""

from __future__ import annotations

from typing import Sequence

from jax import lax

from ..config import Engine, branches, layer_type, walk
from . import _batched, _diagonal_conv, _linear, _native
from ._fused import conv_pointwise
from ._linear_spatial import to_full
from ._maps import is_pointwise, kernel_map
from ._repeat import repeat_layers, repeats
from ._state import PairVariances, SelfVariances, State, diagonal, to_diagonal

SLAB_BYTES = 128 << 10  # one slab of a covariance: fits a core's L2 cache
CPU = Engine("cpu")


def _by_slabs(f, state: State, v1, v2) -> State:
    """Apply the pointwise map ``f(state, v1, v2)`` one cache-sized slab at a time,
    in place: one row ``h`` of a full covariance (``(P, 1, H', W, W')``; a row
    along the first spatial axis whatever their number), or a group of pairs of a
    diagonal one (``(S, H, W)``).

    A nonlinearity is a chain of elementwise operations with expensive links
    (sqrt, divide) that XLA's CPU backend will not duplicate, so it splits the
    chain into several loops, each writing a full intermediate; on a slab those
    stay in L2 instead of streaming through memory.

    The loop is also a fusion boundary that XLA respects (its optimisation
    barriers are dropped on CPU): without one, a deep network without pooling
    becomes one expression in which each layer's 3x3 window re-evaluates the
    layer before it, compile time and work growing with 9^depth (a 21-layer
    flatten network took 313 s to compile and 11 ms per pair; now 16 s).
    """
    if not state.spatial:
        return f(state, v1, v2)
    has_ntk = state.ntk is not None
    p = state.nngp.shape[0]
    if state.full or p == 1:  # rows of one pair's covariance
        axis, size = 1, 1
        steps = state.nngp.shape[1]
    else:  # groups of pairs; at least two, so the loop is never simplified away
        per_pair = state.nngp[0].size * state.nngp.dtype.itemsize
        size = max(1, min(p // 2, SLAB_BYTES // per_pair))
        while p % size:  # slabs must tile the batch exactly
            size -= 1
        axis, steps = 0, p // size
    if steps == 1:  # a 1 x 1 feature map of one pair: nothing to cut
        return f(state, v1, v2)

    def body(r, carry):
        def part(a):
            return lax.dynamic_slice_in_dim(a, r * size, size, axis=axis)

        nngp, ntk = carry
        out = f(state.replace(nngp=part(nngp), ntk=part(ntk) if has_ntk else None),
                part(v1), v2 if state.full else part(v2))
        nngp = lax.dynamic_update_slice_in_dim(nngp, out.nngp, r * size, axis=axis)
        if has_ntk:
            ntk = lax.dynamic_update_slice_in_dim(ntk, out.ntk, r * size, axis=axis)
        return nngp, ntk

    nngp, ntk = lax.fori_loop(0, steps, body,
                              (state.nngp, state.ntk if has_ntk else state.nngp))
    return state.replace(nngp=nngp, ntk=ntk if has_ntk else None)


def full_needed(layers: Sequence, out: bool = False) -> list:
    """``need[k]``: whether the input of layer ``k`` of ``layers`` must be the full
    spatial covariance; ``need[len(layers)] = out``, the output's (at top level:
    never). It must while a pooling layer lies ahead, unless a ``conv_local`` comes
    first: that layer reads only the diagonal, and its output is zero off the
    diagonal (``_linear_spatial``), so the full covariance after it is rebuilt from
    its diagonal. A layer holding branches needs it where any branch's first layer
    does, each branch ending in the layout the layer's output needs."""
    need = [False] * len(layers) + [out]
    for k in range(len(layers) - 1, -1, -1):
        layer = layers[k]
        if layer_type(layer).pools:
            need[k] = True
        elif kernel_map(layer).reads_diagonal:
            need[k] = False
        elif branches(layer):
            need[k] = any(full_needed(b, need[k + 1])[0] for b in branches(layer))
        else:
            need[k] = need[k + 1]
    return need


def any_full(layers: Sequence, out: bool = False) -> bool:
    """Whether any layer of ``layers`` (branches included) takes a full covariance."""
    need = full_needed(layers, out)
    return any(need) or any(any_full(b, need[k + 1]) for k, layer in enumerate(layers)
                            for b in branches(layer))


def count_variance_layers(layers: Sequence) -> int:
    """How many layers read per-input variances (nonlinearities and layer_norm)."""
    return sum(layer_type(layer).reads_variances for layer in walk(layers))


def live_states(layers: Sequence) -> int:
    """States alive at once while ``layers`` run, at most: a layer's input and output;
    while branch ``j`` of a layer runs, the layer's input (each branch starts from it),
    the ``j`` outputs before it and what the branch holds."""
    return max([2] + [1 + j + live_states(branch) for layer in layers
                      for j, branch in enumerate(branches(layer))])


def _apply(layer, state: State, variances, standard: bool, float64: bool, out: bool,
           seen, engine: Engine) -> State:
    """One layer through its kernel map (``_maps``); ``out``, ``seen``, ``engine``: as
    for ``forward``, for the branches of a layer that holds some (on the native engine
    they run as the cpu engine's: its custom calls take layers of the main line only)."""
    m = kernel_map(layer)
    batched = engine.batched
    if m.linear is not None:
        if not batched and _diagonal_conv.applies(layer, state):
            return _diagonal_conv.conv(state, layer, standard)
        return m.linear(state, layer, standard)
    if m.merge is not None:
        inner = CPU if engine.native else engine
        merged = m.merge(layer, [forward(branch, state, variances, standard, float64, out,
                                         seen, inner) for branch in branches(layer)])
        return _batched.boundary(merged) if batched else merged
    assert m.pointwise is not None  # a map is linear, a merge or pointwise
    v1, v2 = variances(state)
    if batched:
        return _batched.boundary(m.pointwise(layer, float64)(state, v1, v2))
    return _by_slabs(m.pointwise(layer, float64), state, v1, v2)


def _block(conv, act, standard: bool, float64: bool, batched: bool = False,
           custom_calls: bool = False, images=None):
    """One (convolution, nonlinearity) pair as ``(state, va, vb, spare) -> (state, v)``
    (``conv``: a layer whose kernel map ``fuses``).

    ``va``, ``vb``: the nonlinearity's per-input variances; ``None`` in the
    per-input pass, where they are the convolved input diagonal (a joint shift
    maps the diagonal to itself) and are returned as ``v``. On a full covariance
    the two layers run row by row (``conv_pointwise``), writing into ``spare``; in
    the native engine's pair pass (``custom_calls``), where ``_native.layer_applies``, one
    custom call (``images``: as ``forward``'s ``inputs``, for the first layer).
    """
    pointwise_of = kernel_map(act).pointwise
    assert pointwise_of is not None  # the layer after a fusing one is pointwise
    pointwise = pointwise_of(act, float64)
    if batched:
        return _batched.block(conv, pointwise, standard)

    def run(state: State, va, vb, spare):
        self_pair = va is None
        if state.full:
            if custom_calls and not self_pair and _native.layer_applies(conv, act, state):
                return _native.layer(state, conv, act, va, vb, standard, images), va
            if self_pair:
                diag = state.replace(nngp=diagonal(state.nngp, True), ntk=None, full=False)
                va = vb = _linear.conv(diag, conv, standard).nngp
            return conv_pointwise(state, conv, pointwise, va, vb, standard,
                                  self_pair=self_pair, spare=spare), va
        if not self_pair:
            return _diagonal_conv.block(state, conv, pointwise, va, vb, standard), va
        state = _diagonal_conv.conv(state, conv, standard)
        return _by_slabs(pointwise, state, state.nngp, state.nngp), state.nngp

    return run


def _layout(state: State, full: bool) -> State:
    """``state`` with the full covariance dropped, or rebuilt (after a ``conv_local``,
    whose covariance is zero off the diagonal), as ``full`` says."""
    if state.full and not full:
        return to_diagonal(state)
    if full and state.spatial and not state.full:
        return to_full(state)
    return state


def _native_tail_at(layers: Sequence, k: int, state: State) -> bool:
    """Whether ``layers[k:k + 3]`` is the native engine's tail (``_native.applies``)."""
    return k + 2 < len(layers) and _native.applies(layers[k], layers[k + 1], layers[k + 2],
                                                   state)


def forward(layers: Sequence, state: State, variances, standard: bool, float64: bool,
            out: bool = False, seen=None, engine: Engine = CPU, inputs=None) -> State:
    """Apply ``layers`` in order, keeping the full covariance only where
    ``full_needed(layers, out)`` says (``out``: whether the output must be full;
    a branch's input is cut at once when the branch needs only its diagonal).
    ``seen(state)``, when given, is called with the state after every layer
    (branches included): how the engine measures its largest covariance.
    ``engine``: the accelerator engine's layers (``_batched``) are each one pass over the
    whole batch, no row or slab loops; the native engine's custom calls (``_native``),
    those of its revision, take the blocks, tails and chains they compute, and every
    other layer runs as the cpu engine's. ``inputs``: the pair's two inputs, whose
    covariance ``state`` is, for a native first layer that makes it itself
    (``_native.reads_images``; from revision 3 the diagonal chain, ``_native.diag``)."""
    need = full_needed(layers, out)
    batched, revision = engine.batched, engine.native_revision or 0
    chains = bool(revision) and isinstance(variances, (PairVariances, SelfVariances))
    diagonals = chains and revision >= 2  # revision 2's diagonal chains
    from_images = chains and revision >= 3  # revision 3's: the input's diagonal made in them
    # the pair pass's custom calls (the per-input pass records what its chains make)
    custom_calls = bool(revision) and isinstance(variances, PairVariances)
    state = _layout(state, need[0])
    spare = None  # the covariances of the input of the layer before: dead, reusable
    k = 0
    while k < len(layers):
        before = state
        layer, after = layers[k], layers[k + 1] if k + 1 < len(layers) else None
        images = (inputs if chains and k == 0 and state.full
                  and _native.reads_images(layer, inputs) else None)
        chain = _native.chain_length(layers, k, state) if chains else 0
        diag = 0 if chain or not diagonals else _native.diag_length(layers, k, state)
        if chain or diag:  # the blocks (and the pool after a chain's): one custom call
            blocks = layers[k:k + 2 * chain + 1] if chain else layers[k:k + 2 * diag]
            if custom_calls and chain:
                got = [variances(state) for _ in range(chain)]
                state = _native.chain(state, blocks, got, standard, images)
            elif custom_calls:
                got = variances.tables(diag, state.nngp.shape[0], inputs)
                state = _native.diag(state, blocks, got, standard, from_images and k == 0)
            else:  # the per-input pass: the chain records what it makes (the diagonal
                # chain: the variances' roots, all its pair pass reads of them)
                raw = inputs if from_images and k == 0 else None
                state, made = (_native.self_chain(state, blocks, standard, images) if chain
                               else _native.self_diag(state, blocks, standard, raw))
                variances.recorded.extend(made)
            k += len(blocks)
            state = _layout(state, need[k])
            if seen is not None:
                seen(state)
            spare = None
            continue
        if custom_calls and _native_tail_at(layers, k, state):
            v1, v2 = variances(state)
            state = _native.tail(state, layer, after, v1, v2, standard, images)
            if seen is not None:
                seen(state)
            spare = None
            k += 3
            continue
        m = repeats(layers, k, state)
        if m and custom_calls and _native_tail_at(layers, k + 2 * (m - 1), state):
            m = m - 1 if m > 2 else 0  # the run's last block is the native tail's
        if m:  # a run of identical blocks: one loop over layers
            at = variances.run(m) if isinstance(variances, PairVariances) else None
            state, spare, recs = repeat_layers(
                state, m, _block(layer, after, standard, float64, batched, custom_calls), at,
                spare)
            if recs is not None:
                variances.runs.append((len(variances.recorded), m))
                variances.recorded.extend(recs[t] for t in range(m))
            k += 2 * m
            continue
        if kernel_map(layer).fuses and is_pointwise(after) and (
                state.full or batched or _diagonal_conv.fuses(layer, state, variances)):
            if isinstance(variances, PairVariances):
                v1, v2 = variances(state)
            else:
                v1 = v2 = None
            state, v = _block(layer, after, standard, float64, batched, custom_calls,
                              images)(state, v1, v2, spare)
            if v1 is None:
                variances.recorded.append(v)
            k += 1  # the nonlinearity is done too
        else:
            state = _apply(layer, state, variances, standard, float64, need[k + 1], seen,
                           engine)
        state = _layout(state, need[k + 1])
        if seen is not None:
            seen(state)
        spare = (before.nngp, before.ntk) if before.full else None
        k += 1
    return state
