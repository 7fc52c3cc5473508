"""The float32 ReLU map's ``sqrt(v1 v2)`` from per-position square roots
(``kernels/_nonlinear.abrelu``): exact on the diagonal, float32-accurate elsewhere."""

import jax
import numpy as np

# the ReLU map on its own in float32, where its rounding is the point
from kernelcli.kernels._nonlinear import abrelu
from kernelcli.kernels._state import State


def _relu(c, v1, v2, ntk):
    def f(c, v1, v2, ntk):
        out = abrelu(State(nngp=c, ntk=ntk, full=False, spatial=False, channels=1),
                     v1, v2, 0.0, 1.0, False)
        return out.nngp, out.ntk

    return [np.asarray(a) for a in jax.jit(f)(c, v1, v2, ntk)]


def test_an_input_with_itself_has_angle_exactly_zero():
    """c = v1 = v2: sqrt(v)^2 is v only to a few units in the last place, and the map
    must still give the angle 0 exactly: nngp = v / 2, the NTK's factor 1/2."""
    v = np.exp(np.random.default_rng(0).uniform(-20, 20, 100_000)).astype(np.float32)
    ntk = np.ones_like(v)
    nngp, got_ntk = _relu(v, v, v, ntk)
    assert np.array_equal(nngp, v / 2)
    assert np.array_equal(got_ntk, ntk / 2)


def test_pairs_match_the_float64_closed_form():
    rng = np.random.default_rng(1)
    n = 100_000
    v1, v2 = (np.exp(rng.uniform(-5, 5, n)) for _ in range(2))
    cos = np.concatenate([rng.uniform(-1, 1, n - 4), [1.0, -1.0, 0.0, 0.999]])
    c = cos * np.sqrt(v1 * v2)
    theta = np.arccos(np.clip(cos, -1, 1))
    want = (np.sqrt(v1 * v2) * np.sin(theta) + (np.pi - theta) * c) / (2 * np.pi)
    want_kdot = (np.pi - theta) / (2 * np.pi)
    f32 = [a.astype(np.float32) for a in (c, v1, v2)]
    nngp, kdot = _relu(*f32, np.ones(n, np.float32))
    scale = np.sqrt(v1 * v2)
    assert np.max(np.abs(nngp - want) / scale) < 1e-6
    # the derivative's angle is float32's rounding of c amplified near |cos| = 1
    # (d theta / d cos = 1 / sin); elsewhere it is as accurate as the angle
    away = np.abs(cos) < 0.999
    assert np.max(np.abs(kdot - want_kdot)[away]) < 1e-5
    assert np.max(np.abs(kdot - want_kdot)) < 1e-3
