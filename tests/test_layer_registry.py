"""Every layer type is complete: declared in the spec (``kernelcli/spec/_layers.py``),
given a kernel map (``kernelcli/kernels/_maps.py``) and a finite-width network for the
Monte-Carlo oracle (``tests/finite_nets.py``), so that a layer cannot be half added.
CONTRIBUTING.md ("Adding a layer") lists the places; docs/config.md's layer table is
checked by ``tests/test_docs.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from finite_nets import FINITE_NETS
from kernelcli.kernels._maps import KERNEL_MAPS
from kernelcli.spec import LAYER_NAMES, layer_type, layer_types

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
    root = Path(__file__).resolve().parent.parent
    text = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    paths = re.findall(r"`((?:kernelcli|tests|docs)/[\w/.]+\.(?:py|md))`", text)
    assert "kernelcli/kernels/_maps.py" in paths and "tests/finite_nets.py" in paths
    for path in paths:
        assert (root / path).is_file(), f"CONTRIBUTING.md names missing {path}"
