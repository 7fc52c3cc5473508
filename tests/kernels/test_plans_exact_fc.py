"""Both execution engines of random fully connected networks (``dense``, ``relu``,
``sign``, ``identity``, ``layer_norm``, ``hermite``) against the same closed-form
recursion evaluated in 50-digit decimal arithmetic.

An input and a multiple of it are perfectly correlated (``+-1``) after a ``dense``
without a bias, and so are all inputs of one feature: there an angle ``sqrt(2 (1 - |c| / sqrt(v1 v2)))`` turns one
rounding of ``c`` into an error of ~1e-8 in float64, which each plan rounded
differently (``sign`` 1e-8 apart, a ``relu`` after it 2e-5 in the NTK) until the
angle of every map took the self pair's snap (``kernels._nonlinear.snap``). The
decimal recursion's angles there are below 1e-24, so it resolves 1e-12 easily.
"""

from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np
import pytest

import kernelcli

TOL = 1e-12  # the engines' documented agreement in float64 (docs/config-reference.md, engine)
EPS_LN = Decimal(1e-12)  # layer_norm's variance offset, as neural-tangents'
PREC = 50


def _atan(x: Decimal) -> Decimal:
    """``atan(x)``, ``x >= 0``: halve the angle until ``x < 1e-3``, then its series."""
    halvings = 0
    while x > Decimal("1e-3"):
        x = x / (1 + (1 + x * x).sqrt())
        halvings += 1
    total, term, n, x2 = Decimal(0), x, 1, x * x
    while abs(term) > Decimal(10) ** -(PREC + 5):
        total += term / n
        term, n = -term * x2, n + 2
    return total * 2 ** halvings


def _pi() -> Decimal:
    return 4 * _atan(Decimal(1))


def _angle(sq: Decimal, c: Decimal) -> Decimal:
    """``atan2(sq, c)`` for ``sq >= 0``."""
    if c > 0:
        return _atan(sq / c)
    if c < 0:
        return _pi() - _atan(sq / -c)
    return _pi() / 2


def _layer(layer, c, v1, v2, ntk):
    """One layer's map of a pair's ``(nngp, v1, v2, ntk)`` (neural-tangents 0.6.5)."""
    name, args = (layer, {}) if isinstance(layer, str) else next(iter(layer.items()))
    if name == "dense":
        w2, b2 = Decimal(args.get("W_std", 1.0)) ** 2, Decimal(args.get("b_std", 0.0)) ** 2
        c, v1, v2 = (w2 * t + b2 for t in (c, v1, v2))
        return c, v1, v2, w2 * ntk + c
    if name == "identity":
        return c, v1, v2, ntk
    if name == "layer_norm":
        inv = 1 / ((v1 + EPS_LN) * (v2 + EPS_LN)).sqrt()
        return c * inv, v1 / (v1 + EPS_LN), v2 / (v2 + EPS_LN), ntk * inv
    if name == "hermite":
        n = args.get("degree", 2)
        kdot = n * c ** (n - 1) if n else Decimal(0)
        return c ** n, v1 ** n, v2 ** n, ntk * kdot
    s = (v1 * v2).sqrt()
    sq = max((s - abs(c)) * (s + abs(c)), Decimal(0)).sqrt()
    theta = _angle(sq, c) if s else _pi() / 2
    pi = _pi()
    if name == "relu":
        out = (sq + (pi - theta) * c) / (2 * pi)
        return out, v1 / 2, v2 / 2, ntk * (pi - theta) / (2 * pi)
    if name == "sign":
        one = Decimal(1) if v1 else Decimal(0)
        return 1 - 2 * theta / pi, one, Decimal(1) if v2 else Decimal(0), 0 * ntk
    raise AssertionError(name)


def decimal_kernels(layers, x: np.ndarray):
    """The ``(nngp, ntk)`` matrices of ``layers`` on the rows of ``x``, in 50 digits."""
    n, d = x.shape
    rows = [[Decimal(float(t)) for t in row] for row in x]
    out = np.zeros((2, n, n))
    with localcontext() as ctx:
        ctx.prec = PREC
        for i in range(n):
            for j in range(n):
                def dot(a, b):
                    return sum(p * q for p, q in zip(rows[a], rows[b])) / d
                state = (dot(i, j), dot(i, i), dot(j, j), Decimal(0))
                for layer in layers:
                    state = _layer(layer, *state)
                out[0, i, j], out[1, i, j] = float(state[0]), float(state[3])
    return out


def random_network(seed: int):
    """1-3 dense layers, each followed by one of relu, sign, identity, layer_norm or
    layer_norm + hermite; a dense readout."""
    r = np.random.default_rng(seed)
    layers = []
    for _ in range(r.integers(1, 4)):
        layers.append({"dense": {"W_std": float(r.uniform(0.5, 2.0)),
                                 "b_std": float(r.choice([0.0, 0.3]))}})
        pick = int(r.integers(0, 5))
        if pick == 4:
            layers += ["layer_norm", {"hermite": {"degree": int(r.integers(1, 4))}}]
        else:
            layers.append(["relu", "sign", "identity", "layer_norm"][pick])
    return layers + ["dense"]


# sign before a relu, and sign alone: the pairs that were 2e-5 and 1e-8 apart
KNOWN = [[{"dense": {"W_std": 0.5004680527565055, "b_std": 0.0}}, "sign",
          {"dense": {"W_std": 1.052043945485248, "b_std": 0.0}}, "relu", "dense"],
         [{"dense": {"W_std": 1.26, "b_std": 0.0}}, "sign",
          {"dense": {"W_std": 0.9, "b_std": 0.3}}, "identity", "dense"],
         [{"dense": {"W_std": 1.1, "b_std": 0.0}}, "layer_norm", {"hermite": {"degree": 3}},
          {"dense": {"W_std": 1.3, "b_std": 0.0}}, "sign", "dense"]]


def inputs(kind: str) -> np.ndarray:
    """``multiples``: two generic inputs and a multiple of each (pairs of correlation -1
    and +1; the multiples are powers of 2, so exact: a rounded ``1.7 x`` is 1e-32 off
    correlation -1, which a sign makes 1e-16 and a relu after it 1e-9 in the NTK, a
    difference no float64 computation resolves); ``one feature``: every pair at +-1."""
    r = np.random.default_rng(0)
    if kind == "one feature":
        return r.standard_normal((5, 1))
    x = r.standard_normal((2, 3))
    return np.concatenate([x, -2.0 * x[:1], 0.5 * x[1:]])


CASES = ([(layers, kind) for layers in KNOWN for kind in ("multiples", "one feature")]
         + [(random_network(seed), "multiples") for seed in range(3)])


def _name(case):
    layers, kind = case
    return "-".join(str(t if isinstance(t, str) else next(iter(t))) for t in layers) + (
        f" ({kind})")


@pytest.mark.parametrize("case", CASES, ids=_name)
def test_both_plans_give_the_high_precision_kernels_of_fully_connected_networks(case):
    layers, kind = case
    x = inputs(kind)
    want = decimal_kernels(layers, x)
    fn = kernelcli.kernel_fn({"layers": layers})
    got = {e: np.asarray(fn(x, get=("nngp", "ntk"), dtype="float64", engine=e))
           for e in ("cpu", "accelerator")}
    scale = np.max(np.abs(want), axis=(1, 2))[:, None, None]
    for engine, kernels in got.items():
        err = np.max(np.abs(kernels - want) / np.maximum(scale, 1e-300), axis=(1, 2))
        assert np.all(err <= TOL), (engine, err)
    apart = np.max(np.abs(got["cpu"] - got["accelerator"]) / np.maximum(scale, 1e-300))
    assert apart <= TOL, apart


@pytest.mark.parametrize("engine", ["cpu", "accelerator"])
def test_rbf_self_pairs_are_exact_in_float32_where_gamma_magnifies_the_rounding(engine):
    """A self pair's exponent ``gamma (2c - v1 - v2)`` is 0, but c and v come from
    different passes; at ``gamma (v1 + v2)`` about 100 their units in the last place were
    3e-6 of the kernel."""
    layers = [{"dense": {"W_std": 3.0}}, {"rbf": {"gamma": 3.0}}, "dense"]
    x = np.random.default_rng(0).standard_normal((6, 5))
    fn = kernelcli.kernel_fn({"layers": layers})
    got = np.asarray(fn(x, get=("nngp", "ntk"), dtype="float32", engine=engine), np.float64)
    want = np.asarray(fn(x, get=("nngp", "ntk"), dtype="float64", engine="cpu"))
    diagonal = np.abs(np.diagonal(got - want, axis1=1, axis2=2)) / np.max(np.abs(want))
    assert np.max(diagonal) <= 2e-7, np.max(diagonal)
