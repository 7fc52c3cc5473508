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

import numpy as np
import pytest

from kernelcli import stax
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
