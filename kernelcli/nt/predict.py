"""neural-tangents' ``predict.gradient_descent_mse_ensemble`` on kernels in memory.

``from kernelcli.nt import predict`` in place of ``from neural_tangents import
predict``: the mean (and with ``compute_cov`` the covariance) of an infinite ensemble
of infinitely wide networks trained by gradient flow on the MSE loss, at time ``t``
(``None``: trained to convergence), for a kernel function such as a
:mod:`kernelcli.stax` network's. Arguments, defaults and results are
neural-tangents 0.6.5's (checked against its numbers in
``tests/stax/test_nt_predict.py``); the maths is kernelcli's gradient flow
(:mod:`kernelcli.solvers`), the one ``kernelcli predict --time`` takes.

For kernels in a run directory (computed by ``kernelcli compute``, or too large for
memory), use ``kernelcli predict RUN_DIR --time T`` (docs/cli.md) instead.

What differs: the results are numpy arrays that answer ``block_until_ready()``
(:class:`kernelcli.stax` results are the same kind); ``t`` must be >= 0 (or inf);
``trace_axes`` is the channel axis only, ``(-1,)``, the default, so ``y_train`` is
``(n, C)``; ``t=None`` is computed from the eigendecomposition (neural-tangents takes a
Cholesky factor there: the two agree to rounding).
"""

from __future__ import annotations

import collections
import math
from typing import Optional

import numpy as np

from ..errors import ConfigError, DataError, MissingNameError

__all__ = ["Gaussian", "gradient_descent_mse_ensemble"]

Gaussian = collections.namedtuple("Gaussian", "mean covariance")
"""A mean and a covariance, as neural-tangents' ``predict.Gaussian``."""

_KINDS = ("nngp", "ntk")


def gradient_descent_mse_ensemble(kernel_fn, x_train, y_train, learning_rate: float = 1.0,
                                  diag_reg: float = 0.0, diag_reg_absolute_scale: bool = False,
                                  trace_axes=(-1,), **kernel_fn_train_train_kwargs):
    """``predict_fn(t=None, x_test=None, get=None, compute_cov=False, **kwargs)``.

    Args:
      kernel_fn: called as ``kernel_fn(x1, x2, get, **kwargs)``, returning for a tuple
        ``get`` an object with ``.nngp`` / ``.ntk`` (or a tuple in ``get``'s order),
        each an ``(N1, N2)`` matrix: a :mod:`kernelcli.stax` network's ``kernel_fn``.
      x_train, y_train: the training inputs and ``(n, C)`` targets.
      learning_rate: ``t`` is read as ``t * learning_rate``.
      diag_reg: added to the diagonal of the training kernel: ``diag_reg`` itself with
        ``diag_reg_absolute_scale=True``, else ``diag_reg * trace / n``.
      trace_axes: ``(-1,)`` (the default) only: the kernels are the same for every
        output channel.
      **kernel_fn_train_train_kwargs: passed to every ``kernel_fn`` call (with those of
        a ``predict_fn`` call on top for its test kernels).

    ``predict_fn``: ``t`` a number or an array of any shape (a leading time axis of
    that shape), ``None`` for infinite time; ``x_test`` the test inputs, ``None`` for
    the training set; ``get`` ``"nngp"``, ``"ntk"``, a tuple of them or ``None`` (both);
    ``compute_cov`` adds the test covariance: a ``Gaussian(mean, covariance)`` per kind.
    A string ``get`` returns that kind's result, otherwise a named tuple ``Gaussians``.
    """
    y = _targets(y_train, trace_axes)
    rate = _number(learning_rate, "learning_rate")
    ridge = _number(diag_reg, "diag_reg")
    trace_scaled = not bool(diag_reg_absolute_scale)
    train: dict = {}  # kind -> K(x_train, x_train), float64
    eigens: dict = {}  # kind -> its eigendecomposition, made once

    def train_kernels(kinds) -> dict:
        missing = tuple(g for g in kinds if g not in train)
        if missing:
            train.update(_kernels(kernel_fn, x_train, None, missing,
                                  kernel_fn_train_train_kwargs, (y.shape[0],) * 2))
        return train

    def eig(g: str):
        from ..solvers import eigen

        if g not in eigens:
            eigens[g] = eigen(train[g], g)
        return eigens[g]

    def predict_fn(t=None, x_test=None, get=None, compute_cov: bool = False,
                   **kernel_fn_test_test_kwargs):
        from ..solvers import regularizer

        kinds = _kinds_of(get)
        needed = tuple(g for g in _KINDS if g in kinds or (g == "nngp" and compute_cov))
        dd = train_kernels(needed)
        n = y.shape[0]
        if x_test is not None:
            kwargs = {**kernel_fn_train_train_kwargs, **kernel_fn_test_test_kwargs}
            m = _rows(x_test)
            td = _kernels(kernel_fn, x_test, x_train, needed, kwargs, (m, n))
            tt = _kernels(kernel_fn, x_test, None, ("nngp",), kwargs, (m, m))["nngp"] \
                if compute_cov else None
        times, shape = _times(t, rate)
        dtype = np.result_type(*(dd[g] for g in needed))
        out = {}
        for g in kinds:
            if x_test is None:
                # the training set, as neural-tangents predicts it: the kind's kernel
                # with its ridge; the NTK's covariance from the NNGP without it
                k_td = dd[g] + regularizer(ridge, eig(g).trace, n, trace_scaled) * np.eye(n)
                nngp_td = k_tt = k_td if g == "nngp" else dd.get("nngp")
            else:
                k_td, nngp_td, k_tt = td[g], td.get("nngp"), tt
            mean, cov = _kind(g, eig(g), k_td, dd.get("nngp"), nngp_td, y, ridge, times,
                              trace_scaled, k_tt if compute_cov else None)
            mean = _shaped(mean, shape, dtype)
            out[g] = mean if cov is None else Gaussian(mean, _shaped(cov, shape, dtype))
        if isinstance(get, str):
            return out[get]
        return collections.namedtuple("Gaussians", kinds)(*(out[g] for g in kinds))

    return predict_fn


def _kind(g, eig, k_td, nngp_dd, nngp_td, y, ridge, times, trace_scaled, k_tt):
    """Mean (T, m, C) and covariance (T, m, m), or None without ``k_tt``, of kind ``g``
    from its test-train kernel ``k_td``; the NTK's covariance needs the NNGP's kernels
    (``nngp_dd``, ``nngp_td``, ``k_tt``): its ensemble's initial functions are NNGP draws."""
    from ..solvers import (
        flow_basis,
        flow_mean,
        flow_weights,
        nngp_flow_covariance,
        ntk_covariance,
        ntk_flow_covariance,
    )

    basis = flow_basis(eig, k_td, y)
    weights = flow_weights(eig, ridge, times, basis.normalization, trace_scaled=trace_scaled)
    mean = flow_mean(basis, weights)
    if k_tt is None:
        return mean, None
    if g == "nngp":
        return mean, nngp_flow_covariance(basis, k_tt, ridge, times, trace_scaled=trace_scaled)
    cov = ntk_covariance(eig, nngp_dd, nngp_td, np.diagonal(k_tt))
    return mean, ntk_flow_covariance(basis, cov, k_tt, weights)


def _shaped(values: np.ndarray, shape: Optional[tuple], dtype):
    from ..stax import ready

    out = values[0] if shape is None else values.reshape(shape + values.shape[1:])
    return ready(out.astype(dtype, copy=False))


def _kinds_of(get) -> tuple:
    kinds = _KINDS if get is None else (get,) if isinstance(get, str) else \
        tuple(get) if isinstance(get, (tuple, list)) else ()
    if not kinds or any(g not in _KINDS for g in kinds) or len(set(kinds)) != len(kinds):
        raise ConfigError(f"get: {get!r} is not accepted; expected 'nngp', 'ntk', a tuple of "
                          f"them (each once) or None for both")
    return kinds


def _number(value, name: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(out) or out < 0:
        raise ConfigError(f"{name}: {value!r} is not accepted; expected a finite number >= 0")
    return out


def _targets(y_train, trace_axes) -> np.ndarray:
    y = np.asarray(y_train, dtype=np.float64)
    axes = tuple(np.atleast_1d(np.asarray(trace_axes)).tolist()) \
        if not isinstance(trace_axes, int) else (trace_axes,)
    if y.ndim != 2:
        raise DataError(f"y_train: an array of shape {y.shape} is not accepted; expected "
                        f"(n, C) targets, one row per training input")
    if axes not in ((-1,), (1,)):
        raise ConfigError(f"trace_axes: {trace_axes!r} is not accepted; kernelcli's kernels "
                          f"are the same for every output channel: (-1,), the default, only")
    return y


def _rows(x) -> int:
    shape = getattr(x, "shape", None) or np.shape(x)
    if not shape:
        raise DataError(f"x_test: {type(x).__name__} is not an array of inputs")
    return int(shape[0])


def _times(t, rate: float) -> tuple:
    """``(times, shape)``: the flat times (each ``t * rate``) and ``t``'s shape, or
    ``((inf,), None)`` for ``t=None``."""
    if t is None:
        return (math.inf,), None
    try:
        values = np.asarray(t, dtype=np.float64) * rate
    except (TypeError, ValueError):
        raise ConfigError(f"t: {t!r} is not a number or an array of numbers") from None
    if np.isnan(values).any() or (values < 0).any():
        raise ConfigError(f"t: {t!r} is not accepted; expected times >= 0 (inf: trained to "
                          f"convergence), or None")
    return tuple(values.ravel().tolist()), values.shape


def _kernels(kernel_fn, x1, x2, kinds: tuple, kwargs: dict, shape: tuple) -> dict:
    """``{kind: (N1, N2) float64}`` of ``kernel_fn(x1, x2, kinds)``."""
    result = kernel_fn(x1, x2, kinds, **kwargs)
    if all(hasattr(result, g) for g in kinds):
        arrays = [getattr(result, g) for g in kinds]
    elif isinstance(result, (tuple, list)) and len(result) == len(kinds):
        arrays = list(result)
    else:
        raise DataError(f"kernel_fn(x1, x2, {kinds!r}) returned {type(result).__name__}; "
                        f"expected the kernels with .nngp / .ntk, as a stax network's "
                        f"kernel_fn returns them")
    out = {}
    for g, a in zip(kinds, arrays, strict=True):
        a = np.asarray(a)
        if a.shape != shape:
            raise DataError(f"kernel_fn's {g} is of shape {a.shape}; expected {shape}: "
                            f"(N1, N2), the same for every output channel")
        out[g] = a
    return out


def __getattr__(name: str):
    if name in ("gradient_descent_mse", "gradient_descent", "gp_inference",
                "max_learning_rate", "ODEState", "Gaussians"):
        raise MissingNameError(
            f"predict.{name}: neural-tangents' {name} is not in kernelcli: it has "
            f"gradient_descent_mse_ensemble only (t=None gives gp_inference's posterior); "
            f"for a run directory's kernels: kernelcli predict RUN_DIR --time T")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
