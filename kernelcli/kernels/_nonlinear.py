"""Elementwise nonlinearities and layer normalisation: closed-form state maps.

Each map reads the state's covariance ``c = nngp`` and the two inputs'
variances ``v1``, ``v2`` at the same positions (from ``variances(state)``),
and returns the post-activation NNGP and the NTK ``ntk * Kdot``, with ``Kdot``
the covariance of the activation's derivative (neural-tangents 0.6.5 formulas;
the weight layer that follows applies ``W_std``, ``b_std`` and adds its own
gradient's term to the NTK).
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from ._angle import SNAP32, SNAP64, atan2_nonneg
from ._state import State, outer


def _safe_sqrt(x):
    return jnp.sqrt(jnp.maximum(x, 0))


def snap_width(float64: bool) -> float:
    """The snap's width in the dtype (float64's where ``float64``, else float32's):
    native/atan.inc's."""
    return SNAP64 if float64 else SNAP32


def snap(s, ac, float64: bool):
    """``s = sqrt(v1 v2)``, or ``ac = |c|`` where that is within a few units in the last
    place of ``s``: an angle from ``sqrt((s - |c|)(s + |c|))`` is exactly 0 (or pi) there
    (see ``abrelu``)."""
    return jnp.where(s - ac <= s * snap_width(float64), ac, s)


def abrelu(state: State, v1, v2, a: float, b: float, float64: bool) -> State:
    """``a*min(x,0) + b*max(x,0)``; ReLU is ``a=0, b=1`` (arc-cosine kernel of order 1)."""
    c = state.nngp
    # sqrt(v1 v2) sin(theta) = sqrt((s - |c|)(s + |c|)), s = sqrt(v1 v2). Not the
    # textbook sqrt(v1 v2 - c^2): a fused multiply-add may evaluate that as
    # v1 v2 - round(c^2), which is not 0 where it must be (an input with itself,
    # c = v1 = v2), giving an angle of ~sqrt(eps) instead of 0. sqrt(round(v*v)) is v
    # exactly, so here the difference is exactly 0 there.
    ac = jnp.abs(c)
    # How s is formed: the square root of the product v1 v2 (one square root per entry)
    # where the state holds one variance per entry (no outer product: a diagonal or no
    # spatial axes) in float64, and on every spatial state in float32 (the ReLU's square
    # roots and division set its pace there: bench/native_loop.py and bench/roofline.py
    # measure it); elsewhere the outer product of per-position square roots (no square root
    # per entry; in float64 a vector square root costs several times a float32 one per
    # element).
    per_entry = float64 and not (state.spatial and state.full)
    if per_entry or (not float64 and state.spatial):
        p1, p2 = outer(v1, v2, state)
        s = jnp.sqrt(p1 * p2)
    else:
        r1, r2 = outer(_safe_sqrt(v1), _safe_sqrt(v2), state)
        s = r1 * r2
    # |c| within a few units in the last place of s is taken as s, so a self pair's
    # angle is exactly 0. sqrt(v)^2 is v only to a few units in the last place; and
    # even sqrt(round(v*v)), which is v exactly, does not make c == v: a pair pass
    # (a self pair in it: x2 holding x1's rows) computes c by other code than the
    # per-input pass computed v (the native engine's custom calls, without XLA's fused
    # multiply-adds, or XLA's own other fusion of the pair program), a unit or two in
    # the last place apart, and sqrt of that difference, about 2e-8 rad, would set the
    # NTK's Kdot (linear in the angle) 1e-9 off. Elsewhere the snap changes only
    # angles the dtype's rounding of c already decides (float32: below 7e-4, where
    # 1 - |c|/s is below 2.4e-7; float64: below 3.4e-7, the snap 64 units wide there
    # since the native engine's pair pass may sum a window in another order than the
    # per-input pass: native/atan.inc).
    s = snap(s, ac, float64)
    sq = _safe_sqrt((s - ac) * (s + ac))
    theta = atan2_nonneg(sq, c, float64)
    factor = (a - b) ** 2 / (2 * math.pi)
    kdot = (a * a + b * b) / 2 - factor * theta
    nngp = factor * sq + kdot * c
    ntk = None if state.ntk is None else state.ntk * kdot
    return state.replace(nngp=nngp, ntk=ntk)


def erf(state: State, v1, v2, float64: bool) -> State:
    """``erf(x)``: ``nngp' = (2/pi) asin(2c / sqrt((1+2v1)(1+2v2)))``."""
    c = state.nngp
    p1, p2 = outer(1 + 2 * v1, 1 + 2 * v2, state)
    sq = _safe_sqrt(p1 * p2 - 4 * c * c)
    # asin(2c/sqrt(p)) == atan2(2c, sqrt(p - 4c^2)); atan2 with y >= 0 via symmetry.
    theta = atan2_nonneg(jnp.abs(2 * c), sq, float64)
    nngp = (2 / math.pi) * jnp.sign(c) * theta
    ntk = None
    if state.ntk is not None:
        ntk = state.ntk * ((4 / math.pi) / sq)
    return state.replace(nngp=nngp, ntk=ntk)


def gelu(state: State, v1, v2, float64: bool) -> State:
    """``x * Phi(x)`` (exact GELU), closed form of arXiv:2002.08517 as in neural-tangents."""
    c = state.nngp
    p1, p2 = outer(v1, v2, state)
    q1, q2 = outer(v1 + 1, v2 + 1, state)
    prod, prod1 = p1 * p2, q1 * q2
    delta2 = prod1 - c * c
    delta = _safe_sqrt(delta2)
    ang = jnp.sign(c) * atan2_nonneg(jnp.abs(c), delta, float64)  # atan2(c, delta), delta >= 0
    nngp = ((c * c + prod * delta2) / (prod1 * delta) + c * ang) / (2 * math.pi) + 0.25 * c
    ntk = None
    if state.ntk is not None:
        first = (1 / delta2 + (1 - prod) / prod1 + 1) * c / delta / (2 * math.pi)
        kdot = first + 0.25 + ang / (2 * math.pi)
        ntk = state.ntk * kdot
    return state.replace(nngp=nngp, ntk=ntk)


def layer_norm(state: State, v1, v2) -> State:
    """Normalisation over channels: divide by ``sqrt(v1 * v2)`` at each position pair."""
    p1, p2 = outer(v1 + 1e-12, v2 + 1e-12, state)
    inv = 1 / jnp.sqrt(p1 * p2)
    ntk = None if state.ntk is None else state.ntk * inv
    return state.replace(nngp=state.nngp * inv, ntk=ntk)
