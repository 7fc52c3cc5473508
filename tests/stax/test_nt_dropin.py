"""neural-tangents code runs with only the import changed.

Ten kernel examples from neural-tangents' README and documentation
(``tests/nt_examples.py``, each written once with ``stax`` as its only free name) run
with ``kernelcli.stax`` and match neural-tangents 0.6.5's float64 kernels
(``tests/fixtures/nt_examples.npz``, made by ``bench/nt_examples.py``). The calls are
rectangular (``x1`` against another ``x2``): neural-tangents' own float64 angle at a
self pair is off by ~1e-9, which the reference fixtures' tests handle apart.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import kernelcli.nt as nt
from kernelcli import stax
from kernelcli.errors import ConfigError, DataError, MissingNameError
from nt_examples import EXAMPLES, inputs, kernels

REFERENCE = Path(__file__).parents[1] / "fixtures" / "nt_examples.npz"
FAST = ("readme_fully_connected", "docs_conv_flatten", "residual_block")


@pytest.fixture(scope="module")
def reference():
    with np.load(REFERENCE) as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in EXAMPLES])
def test_a_neural_tangents_example_runs_unchanged_and_matches(name, reference):
    example, _shape, get, _source = EXAMPLES[name]
    x1, x2 = inputs(name)
    got = kernels(example(stax)(x1, x2, get), get)
    assert set(got) == {k.split(".")[1] for k in reference if k.startswith(name + ".")}
    for kind, k in got.items():
        want = reference[f"{name}.{kind}"]
        assert k.dtype == np.float64 and k.shape == want.shape
        np.testing.assert_allclose(k, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())


def test_the_three_functions_and_what_get_returns():
    init_fn, apply_fn, kernel_fn = stax.serial(stax.Dense(8), stax.Relu(), stax.Dense(1))
    x = np.random.default_rng(0).standard_normal((3, 5))
    both = kernel_fn(x, None)
    assert both.nngp.shape == both.ntk.shape == (3, 3) and both.nngp.dtype == np.float64
    np.testing.assert_array_equal(kernel_fn(x, None, "ntk"), both.ntk)
    pair = kernel_fn(x, x[:2], ("ntk", "nngp"))
    assert pair._fields == ("ntk", "nngp") and pair.ntk.shape == (3, 2)
    assert kernel_fn(x.astype(np.float32), None, "nngp").dtype == np.float32
    assert stax.serial(stax.Dense(1))[2](x, None, "nngp").shape == (3, 3)
    with pytest.raises(NotImplementedError, match="^init_fn: kernelcli computes the "
                                                  "infinite-width NNGP and NTK only"):
        init_fn(None, (1, 5))
    with pytest.raises(NotImplementedError, match="^apply_fn: "):
        apply_fn((), x)
    with pytest.raises(ValueError, match=r"^get: 'cov1' is not accepted; kernelcli "
                                         r"computes nngp and ntk"):
        kernel_fn(x, None, "cov1")


def test_numpy_and_jax_scalars_are_numbers():
    """neural-tangents' notebooks write ``W_std=np.sqrt(2.0)`` with ``import jax.numpy
    as np``: a 0-d jax array (or a numpy scalar) is taken wherever a number is."""
    import jax.numpy as jnp

    plain = stax.serial(stax.Conv(4, (3, 3), (1, 1), "SAME", W_std=1.5, b_std=0.25),
                        stax.Erf(2.0), stax.AvgPool((2, 2), (2, 2)), stax.FanOut(2),
                        stax.parallel(stax.Relu(), stax.Identity()), stax.FanInSum(),
                        stax.Flatten(), stax.Dense(3, W_std=1.5))
    scalars = stax.serial(
        stax.Conv(jnp.asarray(4), jnp.asarray([3, 3]), np.array((1, 1)), "SAME",
                  W_std=jnp.asarray(1.5), b_std=np.float32(0.25)),
        stax.Erf(jnp.asarray(2.0)), stax.AvgPool(np.array([2, 2]), (np.int64(2), 2)),
        stax.FanOut(np.int64(2)), stax.parallel(stax.Relu(), stax.Identity()),
        stax.FanInSum(), stax.Flatten(), stax.Dense(np.int32(3), W_std=np.float64(1.5)))
    assert scalars.to_yaml() == plain.to_yaml()


def test_what_neural_tangents_code_does_around_kernel_fn():
    *_, kernel_fn = stax.serial(stax.Dense(8), stax.Relu(), stax.Dense(1))
    x = np.random.default_rng(0).standard_normal((3, 5))
    both = kernel_fn(x, None)
    # results answer block_until_ready(), as neural-tangents' jax arrays do
    assert both.nngp.block_until_ready() is both.nngp
    assert kernel_fn(x, None, "ntk").block_until_ready().shape == (3, 3)
    # diagonal_batch / diagonal_spatial choose what neural-tangents keeps of the
    # intermediate layers: the returned kernels are the same
    np.testing.assert_array_equal(
        kernel_fn(x, None, "ntk", diagonal_spatial=False, diagonal_batch=True), both.ntk)
    with pytest.raises(DataError, match=r"^x1: a Kernel \(kernels a kernel_fn returned\) "
                                        r"is not accepted: kernelcli computes a network's "
                                        r"kernels from its inputs"):
        kernel_fn(both)
    with pytest.raises(ConfigError, match=r"^mask_constant: 0.0 is not accepted; kernelcli "
                                          r"does not mask inputs"):
        kernel_fn(x, None, "ntk", mask_constant=0.0)
    with pytest.raises(ConfigError, match=r"^rng: not a keyword argument of kernelcli's "
                                          r"kernel_fn; it takes dtype, memory"):
        kernel_fn(x, None, "ntk", rng=0)
    with pytest.raises(DataError, match=r"^x1: a traced value .* call it without jit "
                                        r"\(write ker_fn = kernel_fn where"):
        jax.jit(kernel_fn, static_argnums=(2,))(x, None, "nngp")
    # nt.batch: kernelcli plans its own tiles, so the function itself
    assert nt.batch(kernel_fn, batch_size=10) is kernel_fn
    with pytest.raises(ConfigError, match=r"^batch: batch_size=-1 is not accepted"):
        nt.batch(kernel_fn, batch_size=-1)


def test_dropout_is_the_identity_in_test_mode_and_train_mode_is_refused():
    x = np.random.default_rng(1).standard_normal((3, 4))
    *_, with_dropout = stax.serial(stax.Dense(8), stax.Relu(), stax.Dropout(0.5, "test"),
                                   stax.Dense(1))
    *_, without = stax.serial(stax.Dense(8), stax.Relu(), stax.Dense(1))
    np.testing.assert_array_equal(with_dropout(x, None, "ntk"), without(x, None, "ntk"))
    # neural-tangents' default mode, 'train', scales the kernel's diagonal by 1 / rate
    with pytest.raises(ConfigError, match=r"^stax.Dropout: mode='train' is not supported "
                                          r"by kernelcli; accepted: 'test' \(the identity"):
        stax.Dropout(0.5)
    assert stax.Dropout(1.0).to_dict() == stax.Identity().to_dict()  # nothing dropped
    with pytest.raises(ConfigError, match=r"^stax.Dropout: rate=0 is not supported"):
        stax.Dropout(0, "test")


@pytest.mark.parametrize(("module", "name", "says"), [
    (stax, "GlobalSelfAttention", "kernelcli has no attention layer"),
    (stax, "FanInProd", "kernelcli merges branches with FanInSum or FanInConcat only"),
    (stax, "Elementwise", "kernelcli takes no custom nonlinearity; kernelcli's elementwise"),
    (nt, "empirical_ntk_fn", "kernelcli computes the infinite-width NNGP and NTK only"),
])
def test_a_neural_tangents_name_kernelcli_lacks_says_so_in_one_line(module, name, says):
    prefix = "stax" if module is stax else "nt"
    with pytest.raises(MissingNameError) as e:
        getattr(module, name)
    message = str(e.value)
    assert message.startswith(f"{prefix}.{name}: neural-tangents' {name} is not in "
                              f"kernelcli: {says}") and "\n" not in message
    assert not hasattr(module, name)  # an AttributeError too
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        module.NoSuchThing  # noqa: B018 - the attribute's look-up is the test
