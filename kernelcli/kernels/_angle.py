"""``atan2(y, x)`` for ``y >= 0`` as fused, vectorised arithmetic, in both dtypes.

XLA:CPU has no vector ``atan2``: it calls the scalar library function once per
element, about 20 times the cost of the multiply-adds around it, and the angle is
evaluated once per covariance entry per nonlinearity, so it would set the pace
(float64 spent three quarters of a ReLU network's time there). Both dtypes
therefore reduce the point to an argument ``t`` in ``[0, 1]`` from
``small = min(|x|, y)`` and ``big = max(|x|, y)``, evaluate ``atan(t)`` by
multiply-adds and a division, which XLA vectorises, and undo the symmetries:
``pi/2 - a`` where ``y > |x|``, ``pi - a`` where ``x < 0``.

* float32: ``t = small / big`` and a degree-6 polynomial in ``t**2`` (least squares
  on Chebyshev nodes); error below 4e-7 rad on the whole range (tested), far
  inside float32's own rounding of the inputs.
* float64 (``exact``): Cephes' ``atan`` (S. L. Moshier): where ``small > 0.66 big``
  the argument is ``(small - big) / (small + big)``, which is ``atan(t) - pi/4``'s
  tangent (the subtraction is exact there, Sterbenz), so ``|t| <= 0.66`` always;
  then ``t + t z P(z) / Q(z)``, ``z = t**2``, a (4, 5) rational approximation with
  relative error about 1e-17, and ``pi/4`` added in two parts (``pi/4`` rounded, and
  what the rounding lost). Error within a few units in the last place of
  ``numpy.arctan2`` over the whole range (tested): the float64 kernels keep their
  accuracy against the exact recursion.

``y == 0`` gives exactly 0 (or pi) in both, so a diagonal entry, where
``y = sqrt(v1*v2 - c**2)`` is exactly zero, gets exactly angle 0.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

# float32: atan(t) ~= t * P(t^2) on [0, 1]; coefficients of P, lowest order first.
_ATAN_COEFFS = (0.99999562, -0.33316001, 0.19796881, -0.13195862,
                0.0789991, -0.03310461, 0.00665807)

# float64: Cephes atan.c, atan(t) ~= t + t z P(z) / Q(z), z = t^2, |t| <= 0.66;
# highest order first, Q's leading coefficient 1.
_CEPHES_P = (-8.750608600031904122785e-1, -1.615753718733365076637e1,
             -7.500855792314704667340e1, -1.228866684490136173410e2,
             -6.485021904942025371773e1)
_CEPHES_Q = (2.485846490142306297962e1, 1.650270098316988542046e2,
             4.328810604912902668951e2, 4.853903996359136964868e2,
             1.945506571482613964425e2)
_PI_4_LOW = 3.061616997868382943065e-17  # pi/4 - float64(pi/4)


def _horner(z, coeffs, leading=None):
    p = coeffs[0] if leading is None else z + coeffs[0]
    for c in coeffs[1:]:
        p = p * z + c
    return p


def _atan_unit(t):
    """float32: ``atan(t)`` for ``t`` in ``[0, 1]``."""
    u = t * t
    p = _ATAN_COEFFS[-1]
    for c in reversed(_ATAN_COEFFS[:-1]):
        p = p * u + c
    return t * p


def _atan_ratio64(small, big):
    """float64: ``atan(small / big)`` for ``0 <= small <= big``, ``big > 0``."""
    upper = small > 0.66 * big
    t = jnp.where(upper, small - big, small) / jnp.where(upper, small + big, big)
    z = t * t
    r = t + t * (z * _horner(z, _CEPHES_P) / _horner(z, _CEPHES_Q, leading=1.0))
    return jnp.where(upper, (math.pi / 4) + (r + _PI_4_LOW), r)


def atan2_nonneg(y, x, exact: bool):
    """Angle in ``[0, pi]`` of the point ``(x, y)`` with ``y >= 0``; ``exact``: the
    float64 approximation (see the module's docstring)."""
    ax = jnp.abs(x)
    big = jnp.maximum(ax, y)
    small = jnp.minimum(ax, y)
    # big == 0 only when x == y == 0; atan2(0, 0) is 0 by convention.
    big = jnp.where(big > 0, big, 1)
    a = _atan_ratio64(small, big) if exact else _atan_unit(small / big)
    a = jnp.where(y > ax, (math.pi / 2) - a, a)
    return jnp.where(x < 0, math.pi - a, a)
