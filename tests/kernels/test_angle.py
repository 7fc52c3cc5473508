"""The vectorised ``atan2`` of the nonlinearities (``kernels/_angle.py``): its error
over the whole range of angles and magnitudes, and exact zeros on the diagonal."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# the angle function and the layer maps that use it: their bits are the point
from kernelcli.kernels._angle import atan2_nonneg
from kernelcli.kernels._xla import x64_scope


def _points(dtype):
    rng = np.random.default_rng(0)
    n = 200_000
    angle = rng.uniform(0, np.pi, n)
    radius = np.exp(rng.uniform(-20, 20, n))
    y = np.abs(radius * np.sin(angle))
    x = radius * np.cos(angle)
    # the edges: y == 0 (angle 0 or pi), x == 0, |x| == y, and tiny y
    y = np.concatenate([y, [0.0, 0.0, 1.0, 1.0, 1.0, 0.0], np.full(5, 1e-9)])
    x = np.concatenate([x, [2.0, -2.0, 1.0, -1.0, 0.0, 0.0], np.linspace(-1, 1, 5)])
    return y.astype(dtype), x.astype(dtype)


def _angle(y, x, float64):
    dtype = y.dtype
    with x64_scope(dtype):
        return np.asarray(jax.jit(lambda a, b: atan2_nonneg(a, b, float64))(
            jnp.asarray(y), jnp.asarray(x)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_angle_error_bound(dtype):
    """float64 within 3 units in the last place of numpy's atan2 (which is within
    one of the exact angle), float32 within 6e-7 rad of the float64 angle (the polynomial's 4e-7 and the
    rounding of the float32 result, half a unit in the last place of pi)."""
    y, x = _points(dtype)
    got = _angle(y, x, dtype == "float64")
    ref = np.arctan2(y.astype(np.float64), x.astype(np.float64))
    err = np.abs(got.astype(np.float64) - ref)
    if dtype == "float64":
        assert np.all(err <= 3 * np.spacing(np.maximum(ref, np.finfo(np.float64).tiny)))
    else:
        assert err.max() < 6e-7


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_angle_exact_at_zero(dtype):
    """y == 0: exactly 0 for x >= 0 and exactly pi (as the dtype rounds it) for x < 0,
    so a self pair's angle is exactly 0."""
    y = np.zeros(4, dtype)
    x = np.array([3.0, 1e-30, 0.0, -2.0], dtype)
    got = _angle(y, x, dtype == "float64")
    assert got[:3].tolist() == [0.0, 0.0, 0.0]
    assert got[3] == np.asarray(np.pi, dtype)


def test_angle_float64_at_breakpoints():
    """float64 around fdlibm's breakpoints (ratios 7/16 and 11/16, and 1 where the
    symmetry ``pi/2 - a`` takes over): within 2 units in the last place of numpy's."""
    big = np.array([1.0, 3.0, 1e-200, 7e150])
    ratios = np.array([7 / 16, 11 / 16, 1.0])
    steps = np.arange(-4, 5)
    t = np.concatenate([ratios[:, None] + steps * np.spacing(ratios)[:, None]]).ravel()
    small = (t[None, :] * big[:, None]).ravel()
    big = np.repeat(big, t.size)
    y = np.concatenate([small, big, small])
    x = np.concatenate([big, small, -big])
    got = _angle(y, x, True)
    ref = np.arctan2(y, x)
    assert np.all(np.abs(got - ref) <= 2 * np.spacing(ref))


def test_float64_relu_of_an_input_with_itself_has_angle_exactly_zero():
    """The float64 ReLU map's ``sqrt(v1 v2)`` is also from per-position square roots
    (``kernels/_nonlinear.abrelu``): c = v1 = v2 must still give angle 0 exactly,
    nngp = v / 2 and the NTK's factor 1/2."""
    # the ReLU map that uses the angle, on a state made here
    from kernelcli.kernels._nonlinear import abrelu
    from kernelcli.kernels._state import State

    def f(c, v1, v2, ntk):
        out = abrelu(State(nngp=c[:, None, None], ntk=ntk[:, None, None], full=True,
                           spatial=True, channels=1), v1[:, None], v2[:, None],
                     0.0, 1.0, True)
        return out.nngp[:, 0, 0], out.ntk[:, 0, 0]

    v = np.exp(np.random.default_rng(0).uniform(-300, 300, 100_000))
    with x64_scope(np.dtype("float64")):
        nngp, ntk = (np.asarray(a) for a in jax.jit(f)(v, v, v, np.ones_like(v)))
    assert np.array_equal(nngp, v / 2)
    assert np.array_equal(ntk, np.full_like(v, 0.5))
