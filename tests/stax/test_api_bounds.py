"""The Python API's refusals at its edge: an output larger than host memory, arguments of
the wrong type, a call traced by jax, and input dtypes accepted alike by the API and the
CLI's readers (one list: ``kernelcli.data.NUMERIC``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kernelcli
from conftest import one_device
from kernelcli.data import open_array
from kernelcli.errors import BudgetError, ConfigError, DataError
from kernelcli.run import check_output

NET = {"layers": [{"dense": {"W_std": 1.5, "b_std": 0.1}}, "relu", {"dense": {}}]}


@pytest.fixture(scope="module")
def kfn():
    return kernelcli.kernel_fn(NET)


def test_an_output_beyond_host_memory_is_refused_naming_size_budget_and_levers():
    with pytest.raises(BudgetError) as e:
        check_output(300_000, 300_000, ("nngp", "ntk"), "float32",
                     available=(64 * 2**30, "MemAvailable"))
    assert str(e.value) == (
        "x1, x2: the output, 2 matrices of shape (300000, 300000) in float32, takes "
        "720000000000 bytes (670.6 GiB), more than the 54975581389 bytes of host memory "
        "this call may use (MemAvailable less headroom); accepted: fewer inputs, or "
        "`kernelcli compute`, which writes the kernels to disk by tiles")
    check_output(1000, 1000, ("nngp",), "float64", available=(2**30, "MemAvailable"))


def test_a_call_whose_output_cannot_fit_is_refused_before_computing():
    kfn = kernelcli.kernel_fn(NET)
    # 300,000 inputs: a 335 GiB matrix; refused before a kernel is built or memory taken
    with pytest.raises(BudgetError, match=r"^x1, x2: the output, 1 matrix of shape "
                                          r"\(300000, 300000\) in float32, takes "
                                          r"360000000000 bytes \(335.3 GiB\), more than"):
        kfn(np.zeros((300_000, 2), np.float32), get="nngp")
    with pytest.raises(BudgetError, match=r"\(300000, 200000\) in float64"):
        kfn(np.zeros((300_000, 2)), np.zeros((200_000, 2)), get="ntk", dtype="float64",
            memory=2**40)  # memory is the tiles' budget per device, not the output's
    assert not kfn._built


@pytest.mark.parametrize("kwargs, message", [
    (dict(get=None), "get: None is not accepted; expected 'nngp', 'ntk' or a tuple of them, "
                     "each at most once"),
    (dict(get=3), "get: 3 is not accepted; expected"),
    (dict(get=("nngp", ["ntk"])), "get: ('nngp', ['ntk']) is not accepted; expected"),
    (dict(devices=["cpu"]), "devices: ['cpu'] is not accepted; expected a non-empty list of "
                            "jax devices (such as jax.local_devices()), or None for all local "
                            "ones"),
    (dict(devices="cpu"), "devices: 'cpu' is not accepted; expected"),
    (dict(devices=[]), "devices: [] is not accepted; expected"),
])
def test_arguments_of_the_wrong_type_are_refused_naming_them(kfn, kwargs, message):
    with pytest.raises(ConfigError) as e:
        kfn(np.ones((3, 2), np.float32), **kwargs)
    assert str(e.value).startswith(message)


def test_a_call_inside_jit_says_it_is_not_traceable(kfn):
    x = np.ones((3, 2), np.float32)
    with pytest.raises(DataError) as e:
        jax.jit(lambda a: kfn(a, get="nngp"))(x)
    assert str(e.value) == (
        "x1: a traced value (DynamicJaxprTracer, inside jax.jit, vmap or grad) is not "
        "accepted: a kernel function call is not traceable, as it computes its matrices "
        "tiled, on the host; call it outside jit, with arrays of values (its outputs are "
        "numpy arrays)")
    with pytest.raises(DataError, match="^x2: a traced value"):
        jax.jit(lambda a: kfn(x, a, get="nngp"))(x)
    from kernelcli import stax

    *_, dropin = stax.serial(stax.Dense(8), stax.Relu(), stax.Dense(1))
    with pytest.raises(DataError, match="^x1: a traced value"):  # neural-tangents' form
        jax.jit(lambda a: dropin(a, None, "nngp"))(x)


def test_bool_inputs_are_read_as_the_compute_dtype_by_api_and_cli(kfn, tmp_path):
    x = np.array([[1, 0], [0, 1], [1, 1]], dtype=bool)
    want = kfn(x.astype(np.float32), get="nngp", devices=one_device())
    np.testing.assert_array_equal(kfn(jnp.asarray(x), get="nngp", devices=one_device()), want)
    np.save(tmp_path / "b.npy", x)
    with open_array(tmp_path / "b.npy") as src:  # the CLI's reader
        np.testing.assert_array_equal(src.read(0, 3), x.astype(np.float32))


def test_bfloat16_is_refused_alike_by_api_and_cli(kfn, tmp_path):
    x = jnp.ones((3, 2), jnp.bfloat16)
    hint = ("which is not numeric; bfloat16 is not one of numpy's numeric types and a .npy "
            "file holds it as raw 2-byte values (V2): cast it to float32 first; accepted: a "
            "numeric array (bool, integer or float)")
    with pytest.raises(DataError) as e:
        kfn(x, get="nngp")
    assert str(e.value) == f"x1: an array of shape (3, 2) has dtype bfloat16, {hint}"
    np.save(tmp_path / "h.npy", np.asarray(x))
    with pytest.raises(DataError) as e:
        open_array(tmp_path / "h.npy")
    assert str(e.value) == f"data.x1: {tmp_path / 'h.npy'} has dtype |V2, {hint}"
    np.testing.assert_array_equal(kfn(x.astype(jnp.float32), get="nngp", devices=one_device()),
                                  kfn(np.ones((3, 2), np.float16), get="nngp",
                                      devices=one_device()))
