"""Every layer type is complete: declared in the spec (``kernelcli/config/_layers.py``),
given a kernel map (``kernelcli/kernels/_maps.py``) and a finite-width network for the
Monte-Carlo oracle (``tests/finite_nets.py``), so that a layer cannot be half added.
CONTRIBUTING.md ("Adding a layer") lists the places; docs/config-reference.md's layer table is
checked by ``tests/config/test_config_reference.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from finite_nets import FINITE_NETS
from kernelcli.config import LAYER_NAMES, layer_type, layer_types
from kernelcli.kernels._maps import KERNEL_MAPS  # every layer type has its map

TYPES = layer_types()


def test_the_registry_holds_every_layer_name_but_repeat():
    names = {s.name for t in TYPES for s in t.spellings}
    assert names | {"repeat"} == set(LAYER_NAMES)
    assert len(TYPES) == len({t.cls for t in TYPES})


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_every_layer_type_has_a_shape_rule_a_kernel_map_and_a_finite_net(t):
    assert callable(t.shape), f"{t.name}: no shape rule"
    assert layer_type(t.cls) is t
    assert t.cls in KERNEL_MAPS, f"{t.name}: no kernel map in kernelcli/kernels/_maps.py"
    assert t.cls in FINITE_NETS, f"{t.name}: no finite network in tests/finite_nets.py"


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_each_kernel_map_is_of_the_kind_the_spec_flags_call_for(t):
    m = KERNEL_MAPS[t.cls]
    kinds = [k for k in ("linear", "pointwise", "merge") if getattr(m, k) is not None]
    want = "pointwise" if t.reads_variances else "merge" if t.branch else "linear"
    assert kinds == [want], f"{t.name}: kernel map {kinds}, its spec flags call for {want}"


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_every_spelling_with_parameters_has_a_reader(t):
    """(A spelling without parameters may have one too, fixing them: ``abs``.)"""
    for s in t.spellings:
        assert not s.parameters or s.parse is not None, s.name


def test_no_table_holds_a_layer_the_spec_does_not_declare():
    declared = {t.cls for t in TYPES}
    assert set(KERNEL_MAPS) == declared
    assert set(FINITE_NETS) == declared


def test_an_unknown_class_is_not_a_layer():
    with pytest.raises(TypeError, match="is not a layer"):
        layer_type(object())


def test_contributing_names_files_that_exist():
    """CONTRIBUTING.md's "Adding a layer" is the map of these tables: keep it true."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    paths = re.findall(r"`((?:kernelcli|tests|docs)/[\w/.]+\.(?:py|md))`", text)
    assert "kernelcli/kernels/_maps.py" in paths and "tests/finite_nets.py" in paths
    for path in paths:
        assert (root / path).is_file(), f"CONTRIBUTING.md names missing {path}"


# -- every layer reaches the user: a stax builder, a Monte-Carlo case (its docs row:
# tests/config/test_config_reference.py) --------------------------------------------------------

def _stax_builders():
    """One ``kernelcli.stax`` network per layer type, built the way a neural-tangents
    user writes that layer: a layer added to the registry without a builder (and a
    line here) fails ``test_every_layer_type_has_a_stax_builder``."""
    from kernelcli import stax

    return {
        "dense": stax.Dense(4), "conv": stax.Conv(4, (3, 3)), "relu": stax.Relu(),
        "erf": stax.Erf(), "gelu": stax.Gelu(), "abrelu": stax.ABRelu(-0.5, 1.0),
        "avg_pool": stax.AvgPool((2, 2)), "global_avg_pool": stax.GlobalAvgPool(),
        "flatten": stax.Flatten(), "layer_norm": stax.LayerNorm(),
        "identity": stax.Identity(), "residual": stax.residual(stax.Dense(4)),
        "parallel": stax.serial(stax.FanOut(2), stax.parallel(stax.Dense(4), stax.Identity()),
                                stax.FanInSum()),
        "sin": stax.Sin(), "rbf": stax.Rbf(), "exp": stax.Exp(), "gaussian": stax.Gaussian(),
        "monomial": stax.Monomial(2), "rectified_monomial": stax.RectifiedMonomial(2),
        "sign": stax.Sign(), "hermite": stax.Hermite(2),
        "conv_local": stax.ConvLocal(4, (3, 3)), "conv_transpose": stax.ConvTranspose(4, (3, 3)),
        "sum_pool": stax.SumPool((2, 2)), "global_sum_pool": stax.GlobalSumPool(),
        "local_avg_pool": stax.LocalAvgPool((3, 3)),
    }


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_every_layer_type_has_a_stax_builder(t):
    from kernelcli.config import parse_architecture

    builders = _stax_builders()
    assert t.name in builders, f"{t.name}: no kernelcli.stax builder (kernelcli/stax.py)"
    arch = parse_architecture(builders[t.name].to_dict())
    assert layer_type(arch.layers[0]) is t


def _monte_carlo_strings() -> str:
    """The string constants of the tests that run the Monte-Carlo oracle
    (``assert_mc_close``, ``empirical_nngp``): those tests' bodies and decorators and
    the module-level constants they name, where their architectures are written."""
    import ast

    oracle = {"assert_mc_close", "empirical_nngp"}
    found = []
    for path in sorted(Path(__file__).parents[1].rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        consts = {t.id: node for node in tree.body if isinstance(node, ast.Assign)
                  for t in node.targets if isinstance(t, ast.Name)}
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            parts = [fn] + fn.decorator_list
            names = {n.id for p in parts for n in ast.walk(p) if isinstance(n, ast.Name)}
            if not names & oracle:
                continue
            parts += [consts[n] for n in names if n in consts]
            found += [n.value for p in parts for n in ast.walk(p)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return "\n".join(found)


def test_every_layer_type_has_a_monte_carlo_case():
    """A finite network (``FINITE_NETS``) is only an oracle once a test runs it."""
    text = _monte_carlo_strings()
    missing = [t.name for t in TYPES if not re.search(rf"(?<!\w){t.name}(?!\w)", text)]
    assert not missing, (f"no Monte-Carlo test (assert_mc_close) builds {missing}: add one "
                         f"to tests/kernels/test_kernels_montecarlo.py or its family's test file")
