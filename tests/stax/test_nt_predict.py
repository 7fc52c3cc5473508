"""``kernelcli.nt.predict.gradient_descent_mse_ensemble`` against neural-tangents
0.6.5's own (tests/fixtures/nt_predict.npz, made by tests/fixtures/make_nt_predict.py
on the calls of tests/nt_predict_cases.py; neural-tangents itself is not needed):
with neural-tangents' kernels, and with kernelcli's kernels of the same network."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

import kernelcli.nt as nt
from kernelcli import stax
from kernelcli.errors import ConfigError, DataError, MissingNameError
from nt_predict_cases import CASES, flat, inputs, network

REFERENCE = Path(__file__).parents[1] / "fixtures" / "nt_predict.npz"


@pytest.fixture(scope="module")
def reference():
    with np.load(REFERENCE) as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def kernelcli_kernel_fn():
    return network(stax)  # built once: each case's kernels then reuse its programs


def stored_kernels(reference, x_train):
    """A kernel function that hands out neural-tangents' own kernels of the inputs."""

    def kernel_fn(x1, x2, get, **kwargs):
        block = "train" if x1 is x_train else "test" if x2 is None else "test_train"
        return collections.namedtuple("Kernel", get)(
            *(reference[f"k_{g}_{block}"] for g in get))

    return kernel_fn


@pytest.mark.parametrize("kernels", ["neural-tangents'", "kernelcli's"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_ensemble_matches_neural_tangents(name, kernels, reference, kernelcli_kernel_fn):
    x_train, y_train, x_test = inputs()
    kernel_fn = stored_kernels(reference, x_train) if kernels == "neural-tangents'" \
        else kernelcli_kernel_fn
    ensemble, call = CASES[name]
    predict_fn = nt.predict.gradient_descent_mse_ensemble(kernel_fn, x_train, y_train,
                                                          **ensemble)
    got = flat(predict_fn(**dict(call, x_test=x_test if call["x_test"] is True else None)),
               call["get"], call["compute_cov"])
    assert set(got) == {k.split(".", 1)[1] for k in reference if k.startswith(name + ".")}
    for key, value in got.items():
        want = reference[f"{name}.{key}"]
        assert value.shape == want.shape and value.dtype == np.float64
        np.testing.assert_allclose(value, want, rtol=0, atol=1e-12 * np.abs(want).max())


def test_what_predict_fn_returns_and_refuses(kernelcli_kernel_fn):
    x_train, y_train, x_test = inputs()
    calls = []
    kernel_fn = kernelcli_kernel_fn

    def counted(*args, **kwargs):
        calls.append((args[0] is x_train, args[2]))
        return kernel_fn(*args, **kwargs)

    predict_fn = nt.predict.gradient_descent_mse_ensemble(counted, x_train, y_train)
    both = predict_fn(None, x_test)
    assert both._fields == ("nngp", "ntk") and both.ntk.shape == (len(x_test), 3)
    assert both.ntk.block_until_ready() is both.ntk  # as neural-tangents' jax arrays
    ntk = predict_fn(1.0, x_test, "ntk", compute_cov=True)
    assert ntk._fields == ("mean", "covariance") and ntk.covariance.shape == (4, 4)
    # the training kernels computed once, the test kernels at each call
    assert [c for c in calls if c[0]] == [(True, ("nngp", "ntk"))] and len(calls) == 4
    with pytest.raises(ConfigError, match=r"^get: 'cov1' is not accepted"):
        predict_fn(1.0, x_test, "cov1")
    with pytest.raises(ConfigError, match=r"^t: -1.0 is not accepted; expected times >= 0"):
        predict_fn(-1.0, x_test)
    with pytest.raises(ConfigError, match=r"^trace_axes: \(\) is not accepted"):
        nt.predict.gradient_descent_mse_ensemble(kernel_fn, x_train, y_train, trace_axes=())
    with pytest.raises(DataError, match=r"^y_train: an array of shape \(10,\) is not"):
        nt.predict.gradient_descent_mse_ensemble(kernel_fn, x_train, y_train[:, 0])
    with pytest.raises(MissingNameError, match=r"^predict.gp_inference: neural-tangents' "
                                               r"gp_inference is not in kernelcli: it has "
                                               r"gradient_descent_mse_ensemble only"):
        nt.predict.gp_inference  # noqa: B018 - the attribute's look-up is the test
    assert "kernelcli predict" in nt.predict.__doc__
