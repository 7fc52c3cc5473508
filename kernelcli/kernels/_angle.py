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
* float64 (argument ``float64`` true): fdlibm's ``atan`` (Sun Microsystems, 1993; also
  musl's and Java's ``StrictMath``), with one division per element and no rational function
  (a second division would cost more than the polynomial: a vector float64 division
  is several times a float32 one per element, and the angle is evaluated once per
  entry and kind). ``t = small / big`` is reduced to an argument ``r`` with
  ``|r| < 7/16`` by fdlibm's breakpoints: ``t < 7/16``: ``r = t``; ``t < 11/16``:
  ``r = (2 small - big) / (2 big + small)`` and ``atan(1/2)`` added; otherwise
  ``r = (small - big) / (small + big)`` and ``pi/4`` added. ``2 small - big`` and
  ``small - big`` are exact there (Sterbenz), so each reduced argument has only the
  rounding of its denominator and its division. Then ``atan(r) = r - r z P(z)``,
  ``z = r**2``, fdlibm's degree-10 polynomial ``P`` on ``|r| < 7/16``
  (error below 2**-58 of ``atan(r)``, fdlibm's bound), and the constant added in two
  parts (rounded, and what the rounding lost). Error within a few units in the last
  place of ``numpy.arctan2`` over the whole range (tested): the float64 kernels
  keep their accuracy against the exact recursion.

``y == 0`` gives exactly 0 (or pi) in both, so a diagonal entry, where
``y = sqrt(v1*v2 - c**2)`` is exactly zero, gets exactly angle 0.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import jax.numpy as jnp

# The constants are written once, in ``native/atan.inc``, which the native engine's C++
# includes; read here by a strict parser (no eval): each statement
# ``constexpr <float|double> NAME[N] = {lit, ..., lit};`` with N decimal literals, a
# float's with the suffix ``f``, and only ``//`` comments on lines of their own beside.
_CONSTANTS = Path(__file__).with_name("native") / "atan.inc"
_STATEMENT = re.compile(r"constexpr (float|double) (k\w+)\[(\d+)\] = \{([^{}]*)\}")
_LITERAL = re.compile(r"-?\d+\.\d+(?:e[-+]\d+)?")


def read_constants(text: str) -> dict:
    """``{name: tuple of floats}`` from the text of ``atan.inc``; ``ValueError`` naming
    the statement for anything it does not read exactly. A float's literal is given
    as the float64 of its digits, as Python writes it; its float32 is then what C++
    makes of the literal wherever rounding twice gives the rounding once (tested)."""
    code = "\n".join(line for line in text.splitlines()
                     if line.strip() and not line.strip().startswith("//"))
    *statements, rest = code.split(";")
    if rest.strip():
        raise ValueError(f"{_CONSTANTS.name}: text after the last statement: {rest.strip()!r}")
    out = {}
    for statement in statements:
        m = _STATEMENT.fullmatch(" ".join(statement.split()))
        if m is None:
            raise ValueError(f"{_CONSTANTS.name}: not a constant array: {statement.strip()!r}")
        kind, name, size, body = m.groups()
        items = [i.strip() for i in body.split(",")]
        suffix = "f" if kind == "float" else ""
        if (len(items) != int(size) or name in out
                or not all(i.endswith(suffix) and _LITERAL.fullmatch(i[:len(i) - len(suffix)])
                           for i in items)):
            raise ValueError(f"{_CONSTANTS.name}: {name}: expected {size} {kind} literals, "
                             f"once: {body.strip()!r}")
        out[name] = tuple(float(i[:len(i) - len(suffix)]) for i in items)
    return out


_READ = read_constants(_CONSTANTS.read_text())
# float32: atan(t) ~= t * P(t^2) on [0, 1]; coefficients of P, lowest order first.
_ATAN_COEFFS = _READ["kAtan32"]
# float64: fdlibm s_atan.c, atan(r) ~= r - r z P(z), z = r^2, |r| < 7/16; lowest
# order first (hex in fdlibm: 0x3FD555555555550D ... 0x3F90AD3AE322DA11).
_FDLIBM_AT = _READ["kAt64"]
# atan(1/2) and atan(1) = pi/4, each as its float64 rounding and what it lost.
_ATAN_HALF = _READ["kAtanHalf"]
_ATAN_ONE = _READ["kAtanOne"]
# the snap's width, float64's and float32's (atan.inc says why; _nonlinear.snap)
SNAP64, SNAP32 = _READ["kSnap"]


def _atan_unit(t):
    """float32: ``atan(t)`` for ``t`` in ``[0, 1]``."""
    u = t * t
    p = _ATAN_COEFFS[-1]
    for c in reversed(_ATAN_COEFFS[:-1]):
        p = p * u + c
    return t * p


def _atan_ratio64(small, big):
    """float64: ``atan(small / big)`` for ``0 <= small <= big``, ``big > 0``."""
    mid = small >= 0.4375 * big       # t >= 7/16
    upper = small >= 0.6875 * big     # t >= 11/16
    num = jnp.where(upper, small - big, jnp.where(mid, 2 * small - big, small))
    den = jnp.where(upper, small + big, jnp.where(mid, 2 * big + small, big))
    r = num / den
    z = r * r
    p = _FDLIBM_AT[-1]
    for c in reversed(_FDLIBM_AT[:-1]):
        p = p * z + c
    a = r - r * (z * p)
    hi = jnp.where(upper, _ATAN_ONE[0], jnp.where(mid, _ATAN_HALF[0], 0.0))
    lo = jnp.where(upper, _ATAN_ONE[1], jnp.where(mid, _ATAN_HALF[1], 0.0))
    return hi + (a + lo)


def atan2_nonneg(y, x, float64: bool):
    """Angle in ``[0, pi]`` of the point ``(x, y)`` with ``y >= 0``; ``float64``: the
    float64 approximation, else the float32 one (see the module's docstring)."""
    ax = jnp.abs(x)
    big = jnp.maximum(ax, y)
    small = jnp.minimum(ax, y)
    # big == 0 only when x == y == 0; atan2(0, 0) is 0 by convention.
    big = jnp.where(big > 0, big, 1)
    a = _atan_ratio64(small, big) if float64 else _atan_unit(small / big)
    a = jnp.where(y > ax, (math.pi / 2) - a, a)
    return jnp.where(x < 0, math.pi - a, a)
