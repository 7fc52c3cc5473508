"""Hostile configurations, their numbers: every number a configuration holds has a
bound, named in the one ConfigError line that refuses a value past it, and a value
at the bound is accepted. The loader's other refusals are in test_config_hostile.py.
"""

from __future__ import annotations

import time

import pytest
from test_config_hostile import data, error_of, layers, parse, section

from kernelcli.config import parse_size

# --- bounds on every number -------------------------------------------------------------

L0, L1 = "architecture.layers[0]", "architecture.layers[1]"
PAIR = ("expected a positive integer or a list of 1 to 3 positive integers, each no larger "
        "than 1024")
STD = "is too large; expected a number from 0 to 1000"
SLOPE = "expected a number from -1000 to 1000"
CAP = "expected at most 1000 layers in all, once repeats are expanded"
WIDTH = "is too large; expected a positive integer no larger than 2147483648"
ROWS = "is too large; expected a positive integer no larger than 1099511627776"
SIZE = "is too large; expected a size of at most 2**60 bytes (1048576 TiB), or auto"
BLOCK = "expected auto or a positive integer"
BIG = "1" + "0" * 400

TOO_LARGE = [
    ("conv_filter", layers("conv: {filter: 1000000000000}", "flatten", "dense"),
     f"{L0}.conv.filter: 1000000000000 is too large; {PAIR}"),
    ("conv_strides", layers("conv: {strides: [1, 1025]}", "flatten", "dense"),
     f"{L0}.conv.strides: [1, 1025] is too large; {PAIR}"),
    ("pool_window", layers("dense", "avg_pool: {window: 2000}", "flatten", "dense"),
     f"{L1}.avg_pool.window: 2000 is too large; {PAIR}"),
    ("w_std", layers("dense: {W_std: 1.0e+300}"), f"{L0}.dense.W_std: 1e+300 {STD}"),
    ("w_std_text", layers("dense: {W_std: 1e300}"), f"{L0}.dense.W_std: '1e300' {STD}"),
    ("w_std_inf", layers("dense: {W_std: .inf}"), f"{L0}.dense.W_std: inf {STD}"),
    ("w_std_huge_int", layers(f"dense: {{W_std: {BIG}}}"),
     f"{L0}.dense.W_std: an integer of 401 digits {STD}"),
    ("w_std_nan", layers("dense: {W_std: .nan}"),
     f"{L0}.dense.W_std: nan is not a number; expected a number >= 0"),
    ("b_std", layers("dense: {b_std: 1001}"), f"{L0}.dense.b_std: 1001 {STD}, or null for no bias"),
    ("width", layers("dense: {width: 2147483649}"), f"{L0}.dense.width: 2147483649 {WIDTH}"),
    ("width_huge_int", layers(f"dense: {{width: {BIG}}}"),
     f"{L0}.dense.width: an integer of 401 digits {WIDTH}"),
    ("width_float", layers("dense: {width: 1.0e+30}"),
     f"{L0}.dense.width: 1e+30 is not a width; expected a positive integer"),
    ("leaky_alpha", layers("dense", "leaky_relu: {alpha: 1.0e+10}", "dense"),
     f"{L1}.leaky_relu.alpha: 10000000000.0 is too large; {SLOPE}"),
    ("abrelu_a", layers("dense", "abrelu: {a: -.inf, b: 1}", "dense"),
     f"{L1}.abrelu.a: -inf is below -1000; {SLOPE}"),
    ("abrelu_b_text", layers("dense", "abrelu: {a: 0, b: x}", "dense"),
     f"{L1}.abrelu.b: 'x' is not a number; {SLOPE}"),
    ("repeat_times", layers("repeat: {times: 100000000, layers: [relu]}"),
     f"{L0}.repeat.times: 100000000 is too large; expected a positive integer no larger "
     "than 1000"),
    ("nested_repeats", layers("repeat: {times: 1000, layers: [{repeat: {times: 1000, "
                              "layers: [dense]}}]}"),
     f"{L0}.repeat: 1000 times 1000 layer(s): the architecture has 1000000 layers here; {CAP}"),
    ("repeated_residuals",
     layers("dense", "repeat: {times: 600, layers: [{residual: [relu, dense]}]}"),
     f"{L1}.repeat: 600 times 3 layer(s): the architecture has 1801 layers here; {CAP}"),
    ("one_layer_too_many", layers("repeat: {times: 1000, layers: [dense]}", "flatten"),
     f"{L1}.flatten: the architecture has 1001 layers here; {CAP}"),
    ("block", section("compute", "block: 1000000000000"),
     f"compute.block: 1000000000000 is too large; {BLOCK} no larger than 1048576"),
    ("block_text", section("compute", "block: 1e12"),
     f"compute.block: '1e12' is not a block size; {BLOCK}"),
    ("block_float", section("compute", "block: 3.0"),
     f"compute.block: 3.0 is not a block size; {BLOCK}"),
    ("devices", section("compute", "devices: 4097"),
     "compute.devices: 4097 is too large; expected all or a positive integer no larger than "
     "4096"),
    ("memory", section("compute", "memory: 2000000TiB"), f"compute.memory: '2000000TiB' {SIZE}"),
    ("memory_int", section("compute", f"memory: {BIG}"),
     f"compute.memory: an integer of 401 digits {SIZE}"),
    ("limit", data("limit: 10000000000000000"), f"data.limit: 10000000000000000 {ROWS}"),
    ("test_limit", data("test: t.npy, test_limit: 1099511627777"),
     f"data.test_limit: 1099511627777 {ROWS}"),
    ("zca_reg", data("preprocess: {kind: zca, zca_reg: 1.0e+30}"),
     "data.preprocess.zca_reg: 1e+30 is too large; expected a number from 0 to 1000000"),
    ("zca_reg_nan", data("preprocess: {kind: zca, zca_reg: .nan}"),
     "data.preprocess.zca_reg: nan is not a number; expected a number > 0 (e.g. 0.1)"),
]


@pytest.mark.parametrize("text, message", [pytest.param(t, m, id=i) for i, t, m in TOO_LARGE])
def test_every_number_has_a_bound_named_in_the_message(text, message):
    assert error_of(text) == f"demo.yaml: {message}"


def test_values_at_the_bounds_are_accepted():
    text = ("data: {x1: a.npy, limit: 1099511627776, preprocess: {kind: zca, zca_reg: 1000000}}\n"
            "architecture:\n  layers:\n"
            "    - conv: {filter: [1024, 1], strides: 1024, W_std: 1000, b_std: 1000, "
            "width: 2147483648}\n"
            "    - abrelu: {a: -1000, b: 1000}\n"
            "    - repeat: {times: 997, layers: [dense]}\n"
            "    - flatten\n"
            "compute: {block: 1048576, devices: 4096, memory: 1048576TiB}\n")
    config = parse(text)
    assert len(config.architecture.layers) == 1000
    assert config.architecture.layers[0].filter == (1024, 1)
    assert (config.compute.block, config.compute.devices, config.compute.memory) == (
        2 ** 20, 4096, 2 ** 60)
    assert config.data.limit == 2 ** 40


def test_parse_size_is_bounded_and_linear_on_long_text():
    assert parse_size(2 ** 60) == 2 ** 60
    with pytest.raises(ValueError, match=r"is too large; expected a size of at most 2\*\*60"):
        parse_size(2 ** 60 + 1)
    start = time.monotonic()
    with pytest.raises(ValueError, match="is not a size"):
        parse_size("1" + " " * 1_000_000 + "x!")
    # quadratic backtracking over a million spaces takes hours, linear work
    # milliseconds: a minute only catches the former, not a loaded machine
    assert time.monotonic() - start < 60
