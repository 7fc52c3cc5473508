"""The elementwise nonlinearities in the specification: YAML spellings and defaults,
bad parameters and positions (one line naming the key, the value and what is
accepted; exit status 2), the ``kernelcli.stax`` builders, and what ``compute``
does where ``gaussian`` with ``b > 0`` diverges.

The kernels themselves: ``test_kernels_elementwise.py`` and the ``elem_*`` fixtures.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import kernelcli
from helpers_cli import error_line, invoke, write_config
from kernelcli import stax
from kernelcli.config import (
    ABRelu,
    Erf,
    Exp,
    Gaussian,
    Hermite,
    Monomial,
    Rbf,
    RectifiedMonomial,
    Sign,
    Sin,
    check_architecture,
    parse_config,
)
from kernelcli.errors import ConfigError

L1 = "config.yaml: architecture.layers[1]"
SCALE = "expected a number from -1000 to 1000"


def config(*items: str) -> str:
    return "data: {x1: train.npy}\narchitecture:\n  layers:\n" + "".join(
        f"    - {item}\n" for item in items)


def layers_of(*items: str):
    return parse_config(config(*items), base_dir=Path("/cfg"),
                        source=Path("/cfg/config.yaml")).architecture


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, base_dir=Path("/cfg"), source=Path("/cfg/config.yaml"))
    message = str(info.value)
    assert "\n" not in message
    return message


def check_error(*items: str, shape=(10,)) -> str:
    with pytest.raises(ConfigError) as info:
        check_architecture(layers_of(*items), shape)
    assert "\n" not in str(info.value)
    return str(info.value)


# --- spellings and defaults ------------------------------------------------------

@pytest.mark.parametrize("item, layer", [
    ("sin", Sin(1.0, 1.0, 0.0)),
    ("sin: {a: 2, b: -0.5, c: 1.0e-1}", Sin(2.0, -0.5, 0.1)),
    ("cos", Sin(1.0, 1.0, math.pi / 2)),
    ("cos: {a: 0.9, c: -0.2}", Sin(0.9, 1.0, -0.2 + math.pi / 2)),
    ("erf", Erf()),
    ("erf: {a: 1.5, b: 0.7, c: 0.2}", Erf(1.5, 0.7, 0.2)),
    ("sigmoid_like", Erf(0.5, 1 / 2.4020563531719796, 0.5)),
    ("rbf", Rbf(1.0)),
    ("rbf: {gamma: 0}", Rbf(0.0)),
    ("exp", Exp(1.0, 1.0)),
    ("gaussian", Gaussian(1.0, -1.0)),
    ("gaussian: {b: 0.2}", Gaussian(1.0, 0.2)),
    ("monomial", Monomial(2)),
    ("monomial: {degree: 0}", Monomial(0)),
    ("rectified_monomial: {degree: 5}", RectifiedMonomial(5)),
    ("sign", Sign()),
    ("abs", ABRelu(-1.0, 1.0)),
    ("hermite: {degree: 10}", Hermite(10)),
])
def test_spellings_and_defaults_are_neural_tangents(item, layer):
    arch = layers_of("dense", "layer_norm", item, "dense")
    assert arch.layers[2] == layer
    assert arch.layers[2].where == f"architecture.layers[2].{item.split(':')[0]}"
    check_architecture(arch, (10,))


def test_bare_erf_is_erf_with_its_defaults():
    assert layers_of("erf").layers[0] == layers_of("erf: {a: 1, b: 1, c: 0}").layers[0]


# --- bad parameters ------------------------------------------------------------------

@pytest.mark.parametrize("item, message", [
    ("monomial: {degree: 2.5}", "monomial.degree: 2.5 is not an integer; expected an integer "
                                "from 0 to 5"),
    ("monomial: {degree: 6}", "monomial.degree: 6 is too large; expected an integer from 0 "
                              "to 5"),
    ("monomial: {degree: -1}", "monomial.degree: -1 is negative; expected an integer from 0 "
                               "to 5"),
    ("monomial: {degree: true}", "monomial.degree: true is not an integer; expected an integer "
                                 "from 0 to 5"),
    ("monomial: {degree: null}", "monomial.degree: null is not an integer; expected an "
                                 "integer from 0 to 5"),
    ("rectified_monomial: {degree: 2.0}", "rectified_monomial.degree: 2.0 is not an integer; "
                                          "expected an integer from 0 to 5"),
    ("rectified_monomial: {degree: 7}", "rectified_monomial.degree: 7 is too large; expected "
                                        "an integer from 0 to 5"),
    ("hermite: {degree: 11}", "hermite.degree: 11 is too large; expected an integer from 0 "
                              "to 10"),
    ("hermite: {degree: '3'}", "hermite.degree: '3' is not an integer; expected an integer "
                               "from 0 to 10"),
    ("rbf: {gamma: -0.5}", "rbf.gamma: -0.5 is negative; expected a number from 0 to 1000"),
    ("rbf: {gamma: 1.0e+4}", "rbf.gamma: 10000.0 is too large; expected a number from 0 to "
                             "1000"),
    ("sin: {a: x}", f"sin.a: 'x' is not a number; {SCALE}"),
    ("cos: {b: 1001}", f"cos.b: 1001 is too large; {SCALE}"),
    ("erf: {c: -.inf}", f"erf.c: -inf is below -1000; {SCALE}"),
    ("exp: {b: .nan}", f"exp.b: nan is not a number; {SCALE}"),
    ("gaussian: {a: [1]}", f"gaussian.a: [1] is not a number; {SCALE}"),
    ("sin: {d: 1}", "sin: unknown parameter 'd'; expected a, b, c"),
    ("rbf: {sigma: 1}", "rbf: unknown parameter 'sigma'; expected gamma"),
    ("monomial: {degre: 2}", "monomial: unknown parameter 'degre'; expected degree; did you "
                             "mean 'degree'?"),
    ("sign: {a: 1}", "sign: sign takes no parameters; got {'a': 1}"),
    ("abs: {a: 1}", "abs: abs takes no parameters; got {'a': 1}"),
    ("sigmoid_like: {c: 0.5}", "sigmoid_like: sigmoid_like takes no parameters; got {'c': 0.5}"),
])
def test_bad_parameters_name_the_key_the_value_and_what_is_accepted(item, message):
    assert error_of(config("dense", item, "dense")) == f"{L1}.{message}"


def test_a_bad_parameter_exits_2_with_one_line(tmp_path, keep_process_state):
    np.save(tmp_path / "x.npy", np.ones((3, 4), np.float32))
    cfg = write_config(tmp_path, x1="x.npy", layers=["dense", {"monomial": {"degree": 9}},
                                                     "dense"])
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2
    assert error_line(result) == ("Error: cfg.yaml: architecture.layers[1].monomial.degree: 9 is "
                                  "too large; expected an integer from 0 to 5")


# --- positions ---------------------------------------------------------------------

HERMITE = ("expected it to follow layer_norm directly (identity may stand between), since "
           "its kernel assumes inputs of unit variance")


@pytest.mark.parametrize("items, message", [
    (("dense", "hermite", "dense"),
     f"architecture.layers[1].hermite: hermite follows dense at architecture.layers[0].dense; "
     f"{HERMITE}"),
    (("dense", "layer_norm", "dense", "hermite: {degree: 3}", "dense"),
     f"architecture.layers[3].hermite: hermite follows dense at architecture.layers[2].dense; "
     f"{HERMITE}"),
    (("dense", "layer_norm", "residual: [relu, dense]", "hermite", "dense"),
     f"architecture.layers[3].hermite: hermite follows residual at "
     f"architecture.layers[2].residual; {HERMITE}"),
    (("dense", "layer_norm", "identity", "avg_pool", "hermite", "dense"),
     None),   # vectors: avg_pool is refused first, as anywhere
])
def test_hermite_must_follow_layer_norm(items, message):
    if message is None:
        assert "avg_pool needs spatial axes" in check_error(*items)
        return
    assert check_error(*items) == message


@pytest.mark.parametrize("items", [
    ("dense", "layer_norm", "hermite", "dense"),
    ("dense", "layer_norm", "identity", "identity", "hermite", "dense"),
    ("dense", "layer_norm", "residual: [identity, hermite, dense]", "dense"),
])
def test_hermite_after_layer_norm_is_accepted(items):
    check_architecture(layers_of(*items), (10,))


@pytest.mark.parametrize("act", ["sin", "cos", "sigmoid_like", "rbf", "exp", "gaussian",
                                 "monomial", "rectified_monomial", "sign", "abs",
                                 "erf: {a: 2}"])
def test_the_new_nonlinearities_end_gaussianity_like_relu(act):
    name = act.split(":")[0]
    assert check_error("dense", act, act, "dense") == (
        f"architecture.layers[2].{name}: {name} acts on the output of {name} at "
        f"architecture.layers[1].{name}, which is not Gaussian; it must follow dense, conv, "
        "conv_local or conv_transpose (possibly through avg_pool, global_avg_pool, "
        "global_sum_pool, identity, layer_norm, sum_pool, residual or a parallel with merge "
        "sum)")
    assert check_error(act, "dense").startswith(
        f"architecture.layers[0].{name}: {name} acts on the raw input, which is not Gaussian")


# --- stax ----------------------------------------------------------------------------

def test_stax_builders_are_the_same_spec_as_their_yaml():
    net = stax.serial(
        stax.Dense(4), stax.Sin(1.2, 0.8, 0.3), stax.Dense(4), stax.Cos(c=-0.2),
        stax.Dense(4), stax.Erf(), stax.Dense(4), stax.Erf(1.5, 0.7, 0.2),
        stax.Dense(4), stax.Sigmoid_like(), stax.Dense(4), stax.Rbf(0.5),
        stax.Dense(4), stax.Exp(0.8, 0.6), stax.Dense(4), stax.Gaussian(),
        stax.Dense(4), stax.Monomial(3), stax.Dense(4), stax.RectifiedMonomial(2),
        stax.Dense(4), stax.Sign(), stax.Dense(4), stax.Abs(),
        stax.Dense(4), stax.LayerNorm(), stax.Hermite(3), stax.Dense(1))
    text = ("layers: [{dense: {b_std: null, width: 4}}, {sin: {a: 1.2, b: 0.8, c: 0.3}}, "
            "{dense: {b_std: null, width: 4}}, {cos: {c: -0.2}}, "
            "{dense: {b_std: null, width: 4}}, erf, "
            "{dense: {b_std: null, width: 4}}, {erf: {a: 1.5, b: 0.7, c: 0.2}}, "
            "{dense: {b_std: null, width: 4}}, sigmoid_like, "
            "{dense: {b_std: null, width: 4}}, {rbf: {gamma: 0.5}}, "
            "{dense: {b_std: null, width: 4}}, {exp: {a: 0.8, b: 0.6}}, "
            "{dense: {b_std: null, width: 4}}, gaussian, "
            "{dense: {b_std: null, width: 4}}, {monomial: {degree: 3}}, "
            "{dense: {b_std: null, width: 4}}, {rectified_monomial: {degree: 2}}, "
            "{dense: {b_std: null, width: 4}}, sign, {dense: {b_std: null, width: 4}}, abs, "
            "{dense: {b_std: null, width: 4}}, layer_norm, {hermite: {degree: 3}}, "
            "{dense: {b_std: null, width: 1}}]")
    built = kernelcli.kernel_fn(net).architecture
    assert built == kernelcli.kernel_fn(text).architecture
    assert built == kernelcli.kernel_fn(net.to_yaml()).architecture
    assert net.layers[5] == "erf" and net.layers[9] == "sigmoid_like"
    check_architecture(built, (6,))


def test_stax_bad_degree_is_refused_when_the_kernel_is_built():
    with pytest.raises(ConfigError, match=r"monomial\.degree: 6 is too large; expected an "
                                          r"integer from 0 to 5$"):
        kernelcli.kernel_fn(stax.serial(stax.Dense(1), stax.Monomial(6), stax.Dense(1)))


# --- gaussian with b > 0 past its divergence ------------------------------------------

def test_compute_refuses_a_gaussian_kernel_where_it_diverges(tmp_path, keep_process_state):
    """Input variance 2 with b = 0.25 (finite below 1/(4b) = 1): the self-kernels are
    +inf, refused with the block (exit 1), nothing written; the library returns them."""
    x = np.sqrt(2.0) * np.ones((3, 4), np.float32) * np.array([[1.0], [0.5], [0.2]],
                                                              np.float32)
    np.save(tmp_path / "x.npy", x)
    layers = [{"dense": {"W_std": 1.0, "b_std": None}}, {"gaussian": {"b": 0.25}}, "dense"]
    cfg = write_config(tmp_path, x1="x.npy", layers=layers, run_dir="run")
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 1
    line = error_line(result)
    assert "nngp values are not finite (first K[0, 0] = inf)" in line, line
    assert "nothing was written for this block" in line
    nngp = kernelcli.kernel_fn({"layers": layers})(x, get="nngp")
    assert nngp[0, 0] == np.inf and np.all(np.isfinite(nngp[1:, 1:]))
