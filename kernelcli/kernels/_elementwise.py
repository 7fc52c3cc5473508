"""The further elementwise nonlinearities (``kernelcli.config._layers_elementwise``):
closed-form state maps like those of ``_nonlinear``.

Each map reads the covariance ``c = nngp`` and the inputs' variances ``v1``, ``v2``
at the same positions and returns the post-activation NNGP and ``ntk * Kdot``
(``Kdot`` the covariance of the derivative): neural-tangents 0.6.5's formulas, but
written so that float32 stays close to them and nothing on the way is NaN, not even
in a branch that a ``where`` discards:

* ``v1 v2 - c**2`` is computed as ``(s - |c|)(s + |c|)``, ``s = sqrt(v1 v2)``, which
  is exactly 0 for a self pair (as in ``_nonlinear.abrelu``), so ``gaussian``'s
  determinant and the monomials' recurrence lose nothing on the diagonal;
* the exponents of ``sin``/``cos`` and ``rbf`` are never positive (``2c <= v1 + v2``),
  so they cannot overflow; ``exp``'s can, and its infinities are refused with the
  tile that holds them (``kernelcli.pipeline._tile_checks``), like any overflow;
* ``gaussian`` with ``b > 0``: ``E[exp(b u**2) exp(b w**2)]`` is finite only where
  ``I - 2b Sigma`` is positive definite (a self pair: variance below ``1/(4b)``);
  elsewhere the NNGP and NTK are ``+inf``, never NaN (see ``docs/config-reference.md``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from . import _nonlinear
from ._angle import atan2_nonneg
from ._state import State, outer


def _sin_squared(state: State, v1, v2, float64=None):
    """``(c, v1 v2 - c**2 >= 0)``, the second exactly 0 where ``c = v1 = v2``; with
    ``float64`` given (for a map that takes the angle: the dtype's snap) also where
    ``|c|`` is within a few units in the last place of ``sqrt(v1 v2)``
    (``_nonlinear.snap``)."""
    c = state.nngp
    p1, p2 = outer(v1, v2, state)
    s = jnp.sqrt(p1 * p2)
    ac = jnp.abs(c)
    if float64 is not None:
        # The angle, about sqrt(2 (1 - |c| / s)), turns a rounding of c or s into an
        # error of ~1e-8 (float64) where the correlation is +-1 (a self pair, or inputs
        # that are multiples of each other: one feature, no bias), and each engine rounds
        # differently.
        s = _nonlinear.snap(s, ac, float64)
    return c, jnp.maximum((s - ac) * (s + ac), 0)


def _times(ntk, factor):
    return None if ntk is None else ntk * factor


def erf(state: State, v1, v2, a: float, b: float, c: float, float64: bool) -> State:
    """``a * erf(b * x) + c``: ``erf`` of the covariances scaled by ``b**2``, then
    ``a**2 K + c**2`` (``E[erf] = 0``)."""
    b2 = b * b
    scaled = state.replace(nngp=state.nngp * b2, ntk=_times(state.ntk, b2))
    out = _nonlinear.erf(scaled, v1 * b2, v2 * b2, float64)
    return out.replace(nngp=a * a * out.nngp + c * c, ntk=_times(out.ntk, a * a))


def sin(state: State, v1, v2, a: float, b: float, c: float) -> State:
    """``a * sin(b * x + c)`` (``cos``: ``c + pi/2``)."""
    cov = state.nngp
    p1, p2 = outer(v1, v2, state)
    b2 = b * b
    half = -0.5 * (p1 + p2)
    s1 = jnp.exp(b2 * (half + cov))
    s2 = jnp.exp(b2 * (half - cov)) * math.cos(2 * c)
    scale = a * a / 2
    return state.replace(nngp=scale * (s1 - s2), ntk=_times(state.ntk, scale * b2 * (s1 + s2)))


def rbf(state: State, v1, v2, gamma: float, float64: bool) -> State:
    """``sqrt(2) sin(sqrt(2 gamma) x + pi/4)``: ``exp(-gamma (v1 + v2 - 2c))``."""
    p1, p2 = outer(v1, v2, state)
    total = p1 + p2
    exponent = 2 * state.nngp - total
    # A self pair's exponent is 0, but its c and v come from different passes a unit
    # or two in the last place apart, which gamma (v1 + v2) magnifies (a float32 self
    # pair was 3e-6 off 1 at gamma (v1 + v2) = 100): within a few units of v1 + v2,
    # below what the dtype resolves of a distance, the exponent is taken as 0.
    exponent = jnp.where(jnp.abs(exponent) <= total * _nonlinear.snap_width(float64), 0,
                         exponent)
    nngp = jnp.exp(gamma * exponent)
    return state.replace(nngp=nngp, ntk=_times(state.ntk, 2 * gamma * nngp))


def exp(state: State, v1, v2, a: float, b: float) -> State:
    """``a * exp(b * x)``: ``a**2 exp(b**2 ((v1 + v2)/2 + c))``."""
    p1, p2 = outer(v1, v2, state)
    b2 = b * b
    e = jnp.exp(b2 * (0.5 * (p1 + p2) + state.nngp))
    return state.replace(nngp=a * a * e, ntk=_times(state.ntk, a * a * b2 * e))


def gaussian(state: State, v1, v2, a: float, b: float, float64: bool) -> State:
    """``a * exp(b * x**2)``: ``a**2 / sqrt(det(I - 2b Sigma))``, ``+inf`` where that
    matrix is not positive definite (only possible for ``b > 0``)."""
    c, sin2 = _sin_squared(state, v1, v2, float64)
    p1, p2 = outer(v1, v2, state)
    # det(I - 2b Sigma) = (1 - 2b v1)(1 - 2b v2) - 4b^2 c^2, without the cancellation
    # of 4b^2 v1 v2 against 4b^2 c^2: every term is >= 0 when b < 0.
    det2 = 1 - 2 * b * (p1 + p2) + 4 * b * b * sin2
    ok = None
    if b > 0:
        ok = (det2 > 0) & (p1 < 0.5 / b) & (p2 < 0.5 / b)
        det2 = jnp.where(ok, det2, 1)
    r = 1 / jnp.sqrt(det2)
    nngp = a * a * r
    ntk = _times(state.ntk, (a * a * 4 * b * b) * c * (r * r * r))
    if ok is not None:
        nngp = jnp.where(ok, nngp, jnp.inf)
        ntk = None if ntk is None else jnp.where(ok, ntk, jnp.inf)
    return state.replace(nngp=nngp, ntk=ntk)


def _moments(c, sin2, first, second, degree: int):
    """``(k[degree - 1], k[degree])`` of ``k[n] = (2n - 1) c k[n-1] + (n - 1)**2 sin2 k[n-2]``
    from ``k[0] = first``, ``k[1] = second``: ``E[f_n(u) f_n(w)]`` for ``f_n = x**n``
    and ``f_n = max(x, 0)**n`` alike (both satisfy Price's theorem
    ``dk[n]/dc = n**2 k[n-1]``; checked against neural-tangents' closed forms and
    Cho & Saul's arc-cosine kernels)."""
    prev, cur = first, second
    if degree == 0:
        return None, first
    for n in range(2, degree + 1):
        prev, cur = cur, (2 * n - 1) * c * cur + (n - 1) ** 2 * sin2 * prev
    return prev, cur


def _polynomial(state: State, first, second, c, sin2, degree: int) -> State:
    below, nngp = _moments(c, sin2, first, second, degree)
    ntk = state.ntk
    if ntk is not None:  # Kdot = E[f'(u) f'(w)] = degree**2 k[degree - 1]
        ntk = jnp.zeros_like(ntk) if degree == 0 else ntk * (degree * degree * below)
    return state.replace(nngp=nngp, ntk=ntk)


def monomial(state: State, v1, v2, degree: int) -> State:
    """``x**degree``: ``k[0] = 1``, ``k[1] = c``."""
    c, sin2 = _sin_squared(state, v1, v2)
    return _polynomial(state, jnp.ones_like(c), c, c, sin2, degree)


def rectified_monomial(state: State, v1, v2, degree: int, float64: bool) -> State:
    """``max(x, 0)**degree``, Cho & Saul's arc-cosine kernel of order ``degree``:
    ``k[0] = (pi - theta) / (2 pi)``, ``k[1] = (sqrt(v1 v2) sin(theta) + (pi - theta) c)
    / (2 pi)`` (ReLU's), ``theta`` the angle between the inputs. Written without a
    division by ``sin(theta)``, so a self pair (``theta = 0``) is as exact as any
    other, where neural-tangents' autodiff form is NaN."""
    c, sin2 = _sin_squared(state, v1, v2, float64)
    sq = jnp.sqrt(sin2)
    rest = math.pi - atan2_nonneg(sq, c, float64)
    first = rest * (1 / (2 * math.pi))
    second = (sq + rest * c) * (1 / (2 * math.pi))
    return _polynomial(state, first, second, c, sin2, degree)


def sign(state: State, v1, v2, float64: bool) -> State:
    """``sign(x)``: ``1 - 2 theta / pi``; ``Kdot = 0`` (neural-tangents: the derivative
    is 0 almost everywhere). A zero variance (``sign(0) = 0``) gives 0."""
    c, sin2 = _sin_squared(state, v1, v2, float64)
    sq = jnp.sqrt(sin2)
    theta = jnp.where((sq == 0) & (c == 0), math.pi / 2, atan2_nonneg(sq, c, float64))
    ntk = None if state.ntk is None else jnp.zeros_like(state.ntk)
    return state.replace(nngp=1 - theta * (2 / math.pi), ntk=ntk)


def hermite(state: State, v1, v2, degree: int) -> State:
    """Normalised Hermite polynomial of ``degree`` on unit-variance inputs: ``c**degree``,
    ``Kdot = degree c**(degree - 1)``."""
    c = state.nngp
    ntk = state.ntk
    if ntk is not None:
        ntk = jnp.zeros_like(ntk) if degree == 0 else ntk * (degree * c ** (degree - 1))
    return state.replace(nngp=c ** degree, ntk=ntk)
