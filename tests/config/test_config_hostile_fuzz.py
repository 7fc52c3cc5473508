"""Hostile configurations at random: random flow-style YAML documents, and a template
with leaf values replaced, lines repeated (duplicate keys) or keys added, either load
or fail with one short ConfigError line (``parse_config`` and ``check_architecture``).
The hand-written hostile configurations are in test_config_hostile.py.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelcli.config import check_architecture, parse_config
from kernelcli.errors import ConfigError

# --- random hostile documents -----------------------------------------------------------

_SIMPLE_KEYS = ([
    "name", "data", "architecture", "kernel", "compute", "output", "x1", "key", "limit",
    "test", "test_limit", "preprocess", "kind", "zca_reg", "layers", "parameterization",
    "conv", "dense", "relu", "repeat", "residual", "parallel", "branches", "merge", "times",
    "filter", "strides", "window",
    "W_std", "b_std", "width", "alpha", "a", "b", "kinds", "dtype", "block", "memory",
    "devices", "executor", "address", "run_dir", "<<", "1", "null", "~", "true", "1.5",
    "''", "2001-12-14"])
SIMPLE_KEYS = st.sampled_from(_SIMPLE_KEYS)
# Keys SafeLoader refuses or that only work in flow style: one draw in ten or so.
KEYS = st.sampled_from(_SIMPLE_KEYS * 2 + ["[a]", "{a: 1}", "!!binary aGk=", "&a limit",
                                           "*a", "? x"])
ODD = st.sampled_from([
    "0", "1", "-1", "3.0", "1e12", "1.0e+12", "1.0e+400", ".inf", "-.inf", ".nan", "true",
    "no", "null", "~", "''", "'  '", "2001-12-14", "2001-02-30", "2001-12-14T21:59:43Z",
    "!!binary aGVsbG8=", "!!binary '@@'", "!!python/object:os.system x",
    "!!python/tuple [1]", "!!set {a}", "!!omap [{a: 1}]", "!!int x", "!!float y",
    "!!timestamp z", "!!str 5", "!custom x", "0x1F", "0o17", "1_000", "'\\0'", '"a\\0b"',
    "relu", "conv", "dense", "flatten", "global_avg_pool", "sum", "concat", "[]", "[[]]",
    "ntk", "nngp", "float64", "auto",
    "all", "8GiB", "a.npy", "x" * 300, "9" * 400, "9" * 5000, "*a", "*b", "*undefined"])
SCALAR = st.one_of(ODD, st.integers(-2 ** 70, 2 ** 70).map(str),
                   st.floats().map(lambda x: repr(x) if x == x and abs(x) != float("inf")
                                   else ".nan"),
                   st.text("ab :-[]{}#&*!,'\"\\\n\t", max_size=8).map(
                       lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'))


def _collections(children):
    flow_list = st.lists(children, max_size=5).map(lambda xs: "[" + ", ".join(xs) + "]")
    flow_map = st.lists(st.tuples(KEYS, children), max_size=5).map(
        lambda kvs: "{" + ", ".join(f"{k}: {v}" for k, v in kvs) + "}")
    anchored = st.tuples(st.sampled_from(["&a ", "&b "]), st.one_of(flow_list, flow_map)).map(
        "".join)
    return st.one_of(flow_list, flow_map, anchored)


VALUE = st.recursive(SCALAR, _collections, max_leaves=25)

TEMPLATE = """\
name: demo
data:
  x1: a.npy
  limit: 10
architecture:
  parameterization: ntk
  layers:
    - conv: {filter: 3, strides: 1, W_std: 1.4, b_std: 0.1, width: 4}
    - relu
    - repeat: {times: 2, layers: [{dense: {width: 3}}, erf]}
    - residual: [dense]
    - parallel: {branches: [[dense], [], [{conv: {width: 2}}, relu]], merge: concat}
    - parallel:
        branches:
          - [{dense: {width: 5}}]
          - [{residual: [relu, dense]}, {avg_pool: {window: 1}}]
        merge: sum
    - avg_pool: {window: 2}
    - leaky_relu: {alpha: 0.1}
    - flatten
    - dense
kernel:
  kinds: [nngp, ntk]
  dtype: float32
compute:
  memory: 1GiB
  devices: all
  block: 16
""".splitlines()


def _link_anchors(text: str) -> str:
    """Give every ``&a``/``&b`` a name of its own and point each ``*a``/``*b`` at the
    latest one before it, so that aliases mostly resolve (PyYAML refuses an anchor
    defined twice and an alias to nothing)."""
    latest = {}

    def rename(match):
        sign, base = match.group(1), match.group(2)
        if sign == "&":
            latest[base] = f"{base}{len(latest) + match.start()}"
            return f"&{latest[base]}"
        return f"*{latest[base]}" if base in latest else "relu"

    return re.sub(r"([&*])([ab])\b", rename, text)


LEAF = re.compile(r"^(\s*(?:- )?[A-Za-z_]+: |\s*- )(\S.*)$")


@st.composite
def documents(draw):
    """Random flow-style documents, or the template with some leaf values replaced, lines
    repeated (duplicate keys) or keys added."""
    if draw(st.booleans()):
        sections = draw(st.lists(st.tuples(KEYS, VALUE), max_size=7))
        return _link_anchors("".join(f"{k}: {v}\n" for k, v in sections))
    lines = list(TEMPLATE)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["replace", "replace", "duplicate", "key"]))
        leaf = LEAF.match(lines[i])
        if action == "replace" and leaf:
            lines[i] = leaf.group(1) + draw(VALUE)
        elif action == "duplicate" or lines[i].lstrip().startswith("- "):
            lines.insert(i, lines[i])
        else:  # a sibling key, before the line so that it never splits a section
            indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
            lines.insert(i, f"{indent}{draw(SIMPLE_KEYS)}: {draw(VALUE)}")
    return _link_anchors("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=documents())
@pytest.mark.slow
def test_random_documents_load_or_fail_with_one_short_line(base_dir, text):
    try:
        config = parse_config(text, base_dir=base_dir)
        for shape in ((8, 8, 3), (10,)):
            try:
                check_architecture(config.architecture, shape)
            except ConfigError as e:
                assert "\n" not in str(e) and len(str(e)) <= 500, str(e)
    except ConfigError as e:
        message = str(e)
        assert message and "\n" not in message and len(message) <= 500, message
