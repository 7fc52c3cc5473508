"""docs/config-reference.md, the configuration reference, against the code: every section, key,
layer and layer parameter the code accepts is documented there, and everything
documented there as one is known to the code; each key with a fixed set of values
documents exactly those values, and its default where the code has one.

The names come from the code's own tables, one small function per source (``_code_*``
below), so a refactoring that moves a table only has to re-point that function. The
page is read by its structure: one table per ``### `section``` or ``#### `x.y```
heading whose rows start with a backticked key (columns: key, type, default,
accepted, what it does), and the first table under ``## Layers`` (layer, parameters).
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from helpers_docs import DOCS, TICKED, sections, table_rows

_KEY, _TYPE, _DEFAULT, _ACCEPTED = range(4)  # the columns of a key table


# --- the code's names: re-point these when the tables move --------------------------

def _code_sections() -> dict[str, set[str]]:
    """``{section: keys}``; a scalar section (``name``) is its own one key, and
    ``data.preprocess`` and ``architecture.readouts`` are sections of their own."""
    from kernelcli.config import _load, _load_data

    out = {s: set(_load._KEYS.get(s, (s,))) for s in _load.SECTIONS}
    out["data.preprocess"] = set(_load_data._PREPROCESS_KEYS)
    out["architecture.readouts"] = set(_load._READOUT_KEYS)
    return out


def _code_layers() -> dict[str, set[str]]:
    """``{YAML name: its parameters}``: every spelling of every layer type of the
    registry, and ``repeat`` (syntax, not a layer type)."""
    from kernelcli.config import _parse_layers, layer_types

    out = {s.name: set(s.parameters) for t in layer_types() for s in t.spellings}
    out["repeat"] = set(_parse_layers.PARAMETERS["repeat"])
    return out


def _code_choices() -> dict[str, set[str]]:
    """``{section.key: the values it accepts}`` for the keys with a fixed set."""
    from kernelcli import config
    from kernelcli.config import _allowed

    return {"data.layout": set(config.LAYOUTS),
            "data.preprocess.kind": set(_allowed.PREPROCESS_KINDS),
            "architecture.parameterization": set(config.PARAMETERIZATIONS),
            "kernel.kinds": set(config.KINDS),
            "kernel.dtype": set(config.DTYPES),
            "kernel.augment": set(config.AUGMENTS),
            "compute.executor": set(config.EXECUTORS),
            "compute.engine": set(config.ENGINES)}


def _code_defaults() -> dict[str, str]:
    """``{section.key: its default as YAML writes it}``, for the keys whose value object
    has a default that reads the same in YAML (a name, a boolean, a list of names);
    ``None`` defaults mean different things per key (``auto``, ``all``, absent) and are
    left to the page's words."""
    from kernelcli import config
    from kernelcli.config import _allowed

    objects = {"data": config.DataSpec, "data.preprocess": _allowed.PreprocessSpec,
               "architecture": config.Architecture, "kernel": config.KernelSpec,
               "compute": config.ComputeSpec, "output": config.OutputSpec}
    out = {}
    for section, cls in objects.items():
        for field in dataclasses.fields(cls):
            value = field.default
            if isinstance(value, bool):
                out[f"{section}.{field.name}"] = "true" if value else "false"
            elif isinstance(value, str):
                out[f"{section}.{field.name}"] = value
            elif isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
                out[f"{section}.{field.name}"] = f"[{', '.join(value)}]"
    return out


# --- reading the page ------------------------------------------------------------------

# words of an "accepted" cell that are not one of a key's values: how YAML spells none
_NOT_VALUES = {"none", "null", "[]"}


def _page() -> str:
    return (DOCS / "config-reference.md").read_text(encoding="utf-8")


def _doc_tables() -> dict[str, dict[str, list[str]]]:
    """``{section: {key: its row's cells}}`` from the ``### `x``` / ``#### `x.y```
    tables."""
    out = {}
    for level in ("###", "####"):
        for heading, body in sections(_page(), level):
            m = re.fullmatch(r"`([a-z_.]+)`", heading)
            if m:
                out[m.group(1)] = {TICKED.match(r[_KEY]).group(1): r
                                   for r in table_rows(body) if TICKED.match(r[_KEY])}
    return out


def _doc_layers() -> dict[str, set[str]]:
    """``{layer: parameters}`` from the first table under ``## Layers``."""
    (body,) = [b for h, b in sections(_page(), "##") if h == "Layers"]
    out = {}
    for row in table_rows(body, first_table_only=True):
        name = TICKED.fullmatch(row[0]).group(1)
        out[name] = {t for t in TICKED.findall(row[1]) if re.fullmatch(r"\w+", t)}
    return out


def _row(key: str) -> list[str]:
    section, _, name = key.rpartition(".")
    return _doc_tables()[section][name]


# --- the checks ----------------------------------------------------------------------

def _assert_same_names(code: dict, doc: dict, what: str) -> None:
    """``doc`` documents exactly the names of ``code``, and under each the same members."""
    assert set(doc) == set(code), (f"{what}: undocumented {sorted(set(code) - set(doc))}, "
                                   f"documented but unknown {sorted(set(doc) - set(code))}")
    for name in code:
        assert doc[name] == code[name], (
            f"{name}: undocumented {sorted(code[name] - doc[name])}, "
            f"documented but unknown {sorted(doc[name] - code[name])}")


def test_every_configuration_key_is_documented_and_every_documented_key_exists():
    doc = {section: set(rows) for section, rows in _doc_tables().items()}
    _assert_same_names(_code_sections(), doc, "sections")


def test_every_layer_of_the_registry_and_its_parameters_are_documented_and_exist():
    _assert_same_names(_code_layers(), _doc_layers(), "layers")


@pytest.mark.parametrize("key", sorted(_code_choices()))
def test_a_key_with_a_fixed_set_of_values_documents_exactly_those(key):
    accepted = {t for t in TICKED.findall(_row(key)[_ACCEPTED]) if t.lower() not in _NOT_VALUES}
    want = _code_choices()[key]
    assert {a.lower() for a in accepted} == {w.lower() for w in want}, (
        f"docs/config-reference.md, {key}: documents {sorted(accepted)}, the code accepts {sorted(want)}")


@pytest.mark.parametrize("key", sorted(_code_defaults()))
def test_a_documented_default_is_the_code_s(key):
    cell = _row(key)[_DEFAULT]
    assert _code_defaults()[key] in TICKED.findall(cell), (
        f"docs/config-reference.md, {key}: default cell {cell!r}, the code's default is "
        f"{_code_defaults()[key]!r}")


def test_every_padding_and_merge_of_the_layers_is_documented():
    from kernelcli.config import PADDINGS
    from kernelcli.config._layers import MERGES

    (body,) = [b for h, b in sections(_page(), "##") if h == "Layers"]
    ticked = set(TICKED.findall(body))
    assert set(PADDINGS) <= ticked, f"paddings not in docs/config-reference.md: {set(PADDINGS) - ticked}"
    (parallel,) = [r for r in table_rows(body, first_table_only=True) if r[0] == "`parallel`"]
    assert set(MERGES) <= set(TICKED.findall(" ".join(parallel))), parallel
