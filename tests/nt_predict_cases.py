"""Calls of neural-tangents' ``predict.gradient_descent_mse_ensemble``, written once.

The generator (``tests/fixtures/make_nt_predict.py``, run with neural-tangents) and
``tests/stax/test_nt_predict.py`` (with ``kernelcli.nt``) make the same calls on the
same inputs: ``network(stax)`` is the kernel function, ``CASES`` the arguments of
``gradient_descent_mse_ensemble`` and of the ``predict_fn`` it returns. Each result
is flattened by :func:`flat` into ``{"<case>.<kind>.mean": ..., ".cov": ...}``.
"""

from __future__ import annotations

import numpy as np

N_TRAIN, N_TEST, CLASSES, FEATURES = 10, 4, 3, 6


def network(stax):
    _, _, kernel_fn = stax.serial(
        stax.Dense(512, W_std=1.5, b_std=0.05), stax.Relu(),
        stax.Dense(512, W_std=1.5, b_std=0.05), stax.Relu(),
        stax.Dense(1, W_std=1.5, b_std=0.05))
    return kernel_fn


def inputs():
    """``(x_train, y_train, x_test)``: float64, fixed."""
    rng = np.random.default_rng(7)
    x_train = rng.standard_normal((N_TRAIN, FEATURES))
    x_test = rng.standard_normal((N_TEST, FEATURES))
    y_train = np.eye(CLASSES)[rng.integers(0, CLASSES, N_TRAIN)]
    return x_train, y_train, x_test


# name: (arguments of gradient_descent_mse_ensemble, arguments of predict_fn; a
# "x_test" of True stands for the test inputs, None for the training set)
CASES = {
    "flow": ({}, dict(t=np.array([0.0, 0.5, 3.0, 40.0]), x_test=True, get=None,
                      compute_cov=True)),
    "ridge_solve": ({"diag_reg": 1e-2}, dict(t=None, x_test=True, get=None, compute_cov=True)),
    "ridge_scalar_time": ({"diag_reg": 1e-2}, dict(t=2.0, x_test=True, get="ntk",
                                                   compute_cov=True)),
    "absolute_ridge_rate": ({"diag_reg": 0.05, "diag_reg_absolute_scale": True,
                             "learning_rate": 2.0},
                            dict(t=np.array([[1.0, 5.0]]), x_test=True, get=("ntk", "nngp"),
                                 compute_cov=False)),
    "infinite_time": ({}, dict(t=np.inf, x_test=True, get="nngp", compute_cov=True)),
    "training_set": ({"diag_reg": 1e-2}, dict(t=np.array([0.5, 10.0]), x_test=None, get=None,
                                              compute_cov=True)),
}


def flat(result, get, compute_cov) -> dict:
    """``{"<kind>.mean": array, "<kind>.cov": array}`` of what ``predict_fn`` returned,
    the way neural-tangents returns it (one kind's result, or a named tuple of them,
    each a mean or a ``Gaussian(mean, covariance)``)."""
    kinds = ("nngp", "ntk") if get is None else (get,) if isinstance(get, str) else get
    per_kind = [result] if isinstance(get, str) else [getattr(result, g) for g in kinds]
    out = {}
    for g, r in zip(kinds, per_kind, strict=True):
        if compute_cov:
            out[f"{g}.mean"], out[f"{g}.cov"] = np.asarray(r.mean), np.asarray(r.covariance)
        else:
            out[f"{g}.mean"] = np.asarray(r)
    return out
