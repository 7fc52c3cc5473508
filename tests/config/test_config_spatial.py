"""The spatial family's parameters, shapes and order rules: exact messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcli import stax
from kernelcli.config import (
    AvgPool,
    ConvLocal,
    ConvTranspose,
    LocalAvgPool,
    SumPool,
    check_architecture,
    layer_shapes,
    parse_config,
    transpose_out,
)
from kernelcli.errors import ConfigError

IMAGE = (6, 8, 3)


def arch(*items: str, parameterization: str = "ntk"):
    text = (f"data: {{x1: a.npy}}\narchitecture:\n  parameterization: {parameterization}\n"
            "  layers:\n" + "".join(f"    - {item}\n" for item in items))
    return parse_config(text, base_dir=Path("/cfg")).architecture


def error_of(*items: str, shape=IMAGE) -> str:
    with pytest.raises(ConfigError) as info:
        check_architecture(arch(*items), shape)
    return str(info.value)


def parse_error(*items: str) -> str:
    with pytest.raises(ConfigError) as info:
        arch(*items)
    return str(info.value)


# --- parameters and defaults ---------------------------------------------------------

def test_defaults_follow_conv_and_avg_pool():
    layers = arch("conv_local", "conv_transpose", "sum_pool", "avg_pool",
                  "global_sum_pool").layers
    assert layers[0] == ConvLocal(filter=3, strides=1, padding="SAME", W_std=1.0,
                                  b_std=0.0, width=1)
    assert layers[1] == ConvTranspose(filter=3, strides=1, padding="SAME",
                                      W_std=1.0, b_std=0.0, width=1)
    assert layers[2] == SumPool(window=2, strides=2, padding="VALID")
    assert layers[3] == AvgPool(window=2, strides=2, padding="VALID", normalize_edges=False)


def test_normalize_edges_reads_a_boolean_and_null_is_the_default():
    assert arch("avg_pool: {normalize_edges: true, padding: same}").layers[0].normalize_edges
    assert not arch("avg_pool: {normalize_edges: null}").layers[0].normalize_edges


@pytest.mark.parametrize("item, message", [
    ("avg_pool: {normalize_edges: 1}",
     "architecture.layers[0].avg_pool.normalize_edges: 1 is not a boolean; expected true or "
     "false"),
    ("sum_pool: {normalize_edges: true}",
     "architecture.layers[0].sum_pool: unknown parameter 'normalize_edges'; expected "
     "window, strides, padding"),
    ("conv_transpose: {filter: [3, 0]}",
     "architecture.layers[0].conv_transpose.filter: [3, 0] is not a filter size; expected a "
     "positive integer (the same along every spatial axis) or a list of 1 to 3 positive "
     "integers (one per spatial axis)"),
    ("conv_local: {strides: 2000}",
     "architecture.layers[0].conv_local.strides: 2000 is too large; expected a positive "
     "integer or a list of 1 to 3 positive integers, each no larger than 1024"),
    ("conv_local: {padding: FULL}",
     "architecture.layers[0].conv_local.padding: 'FULL' is not a padding; expected one of "
     "SAME, VALID, CIRCULAR"),
    ("global_sum_pool: {window: 2}",
     "architecture.layers[0].global_sum_pool: global_sum_pool takes no parameters; got "
     "{'window': 2}"),
])
def test_bad_parameters_are_refused_naming_the_key(item, message):
    assert parse_error(item) == message


# --- shapes --------------------------------------------------------------------------

@pytest.mark.parametrize("size, k, s, padding, expected", [
    (4, 3, 2, "SAME", 8), (4, 3, 2, "CIRCULAR", 8), (4, 3, 2, "VALID", 9),
    (4, 2, 3, "VALID", 12), (3, 5, 1, "VALID", 7), (1, 1, 1, "VALID", 1),
])
def test_transpose_out_follows_lax_conv_transpose(size, k, s, padding, expected):
    assert transpose_out(size, k, s, padding) == expected


def test_layer_shapes_of_the_spatial_family():
    rows = layer_shapes(arch("conv_transpose: {filter: [3, 2], strides: [2, 3], "
                             "padding: VALID, width: 4}",
                             "conv_local: {filter: [3, 1], strides: [2, 1], padding: VALID, "
                             "width: 5}",
                             "sum_pool: {window: [2, 3], padding: SAME}",
                             "global_sum_pool", "dense"), IMAGE)
    assert [out for _, _, out in rows] == [(13, 24, 4), (6, 24, 5), (3, 8, 5), (5,), (1,)]


def test_conv_local_filter_too_large_under_valid_is_refused():
    assert error_of("conv_local: {filter: [7, 3], padding: VALID}", "relu", "flatten",
                    "dense") == (
        "architecture.layers[0].conv_local: filter (7, 3) does not fit the input of shape "
        "(6, 8, 3) under VALID padding; expected a filter no larger than (6, 8), or padding "
        "SAME or CIRCULAR")


def test_sum_pool_window_too_large_under_valid_is_refused():
    assert error_of("conv", "sum_pool: {window: 9}", "flatten", "dense") == (
        "architecture.layers[1].sum_pool: window (9, 9) does not fit the input of shape "
        "(6, 8, 1) under VALID padding; expected a window no larger than (6, 8), or padding "
        "SAME or CIRCULAR")


# --- order rules ---------------------------------------------------------------------

def test_spatial_layer_after_global_sum_pool_is_refused():
    assert error_of("conv", "global_sum_pool", "conv_transpose", "flatten", "dense") == (
        "architecture.layers[2].conv_transpose: conv_transpose needs spatial axes (a sequence "
        "(L, C), an image (H, W, C) or a volume (D, H, W, C)) but "
        "gets a vector of shape (1,) made by architecture.layers[1].global_sum_pool; spatial "
        "layers cannot follow flatten, global_avg_pool, global_sum_pool or local_avg_pool")


def test_conv_local_on_vectors_is_refused():
    assert error_of("conv_local", "dense", shape=(10,)) == (
        "architecture.layers[0].conv_local: conv_local needs spatial axes (a sequence (L, C), "
        "an image (H, W, C) or a volume (D, H, W, C)) but the "
        "input is a vector of shape (10,); expected no spatial layer for vector data")


def test_conv_local_and_conv_transpose_make_the_signal_gaussian_and_pools_keep_it():
    assert check_architecture(arch("conv_local", "relu", "conv_transpose", "sum_pool", "erf",
                                   "dense", "global_sum_pool", "gelu", "dense"), IMAGE) == (1,)


def test_a_nonlinearity_after_a_sum_pool_of_a_nonlinearity_is_refused():
    message = error_of("conv_transpose", "relu", "sum_pool", "relu", "flatten", "dense")
    assert message.startswith(
        "architecture.layers[3].relu: relu acts on the output of relu at "
        "architecture.layers[1].relu, which is not Gaussian")


def test_a_residual_branch_may_end_in_conv_local_or_conv_transpose_but_not_a_pool():
    ok = ("conv", "residual: [relu, conv_local]", "residual: [relu, {conv_transpose: "
          "{strides: 1}}]", "relu", "global_avg_pool", "dense")
    assert check_architecture(arch(*ok), IMAGE) == (1,)
    assert error_of("conv", "residual: [relu, conv, {sum_pool: {window: 1}}]", "relu",
                    "flatten", "dense") == (
        "architecture.layers[1].residual: the branch ends in sum_pool; expected it to end in "
        "dense, conv, conv_local or conv_transpose, since x + f(x) adds two independent "
        "Gaussians")


# --- stax builders -------------------------------------------------------------------

def test_stax_builders_write_the_yaml_of_neural_tangents_defaults():
    net = stax.serial(stax.ConvLocal(4, (3, 2), padding="same"),
                      stax.ConvTranspose(2, (2, 2), (2, 1), W_std=1.5, b_std=0.1),
                      stax.SumPool((2, 3)), stax.AvgPool((3, 3), padding="SAME",
                                                         normalize_edges=True),
                      stax.GlobalSumPool())
    assert net.to_dict()["layers"] == [
        {"conv_local": {"filter": [3, 2], "strides": 1, "padding": "SAME", "W_std": 1.0,
                        "b_std": None, "width": 4}},
        {"conv_transpose": {"filter": [2, 2], "strides": [2, 1], "padding": "VALID",
                            "W_std": 1.5, "b_std": 0.1, "width": 2}},
        {"sum_pool": {"window": [2, 3], "strides": [1, 1], "padding": "VALID"}},
        {"avg_pool": {"window": [3, 3], "strides": [1, 1], "padding": "SAME",
                      "normalize_edges": True}},
        "global_sum_pool"]


@pytest.mark.parametrize("build, message", [
    (lambda: stax.ConvTranspose(1, (3, 3), dimension_numbers=("NCHW", "OIHW", "NCHW")),
     "stax.ConvTranspose: dimension_numbers=('NCHW', 'OIHW', 'NCHW') is not supported by "
     "kernelcli; accepted: None or channels last, such as ('NHWC', 'HWIO', 'NHWC') (kernelcli "
     "reads channels-first files with data.layout instead)"),
    (lambda: stax.SumPool((2, 2), channel_axis=1),
     "stax.SumPool: (batch_axis, channel_axis)=(0, 1) is not supported by kernelcli; "
     "accepted: (0, -1): channels last"),
    (lambda: stax.AvgPool((2, 2), normalize_edges="yes"),
     "stax.AvgPool: normalize_edges='yes' is not supported by kernelcli; accepted: True or "
     "False"),
    (lambda: stax.ConvLocal(1, (3, 3), parameterization="mean_field"),
     "stax.ConvLocal: parameterization='mean_field' is not supported by kernelcli; accepted: "
     "'ntk' or 'standard'"),
])
def test_stax_builders_refuse_what_kernelcli_cannot_compute(build, message):
    with pytest.raises(ConfigError) as info:
        build()
    assert str(info.value) == message


# --- local_avg_pool ------------------------------------------------------------------

def test_local_avg_pool_reads_its_window_and_makes_a_vector_that_is_not_gaussian():
    layers = arch("conv", "relu", "local_avg_pool: {window: [3, 5]}", "dense").layers
    assert layers[2] == LocalAvgPool(window=(3, 5))
    assert check_architecture(arch("conv", "relu", "local_avg_pool: {window: [6, 8]}",
                                   "dense"), IMAGE) == (1,)
    assert error_of("conv", "local_avg_pool: {window: 3}", "relu", "dense").startswith(
        "architecture.layers[2].relu: relu acts on the output of local_avg_pool at "
        "architecture.layers[1].local_avg_pool, which is not Gaussian")
    assert stax.LocalAvgPool((3, 3)).to_dict()["layers"] == [
        {"local_avg_pool": {"window": [3, 3]}}]


@pytest.mark.parametrize("item, message", [
    ("local_avg_pool", "architecture.layers[0].local_avg_pool.window: missing; expected a "
                       "window size: an odd integer, or a list of one per spatial axis"),
    ("local_avg_pool: {window: 0}",
     "architecture.layers[0].local_avg_pool.window: 0 is not a window size; expected a "
     "positive integer (the same along every spatial axis) or a list of 1 to 3 positive "
     "integers (one per spatial axis)"),
    ("local_avg_pool: {window: 3, strides: 1}",
     "architecture.layers[0].local_avg_pool: unknown parameter 'strides'; expected window"),
])
def test_bad_local_avg_pool_parameters_are_refused_naming_the_key(item, message):
    assert parse_error(item) == message


@pytest.mark.parametrize("window, shown, w, n", [(4, "(4, 4)", 4, 6), (7, "(7, 7)", 7, 6),
                                                 ("[5, 2]", "(5, 2)", 2, 8)])
def test_a_window_even_but_not_the_axis_or_larger_than_it_is_refused(window, shown, w, n):
    axis = 0 if shown.startswith(f"({w},") else 1
    assert error_of("conv", f"local_avg_pool: {{window: {window}}}", "dense") == (
        f"architecture.layers[1].local_avg_pool: window {shown} has {w} along spatial axis "
        f"{axis} of the input of shape (6, 8, 1); expected an odd window of at most {n} "
        f"(the translations -(w-1)/2 .. (w-1)/2), or {n}, the whole axis (every translation)")


def test_a_bad_window_exits_2_from_the_cli(tmp_path):
    import numpy as np

    from helpers_cli import invoke
    np.save(tmp_path / "x.npy", np.zeros((4, 6, 6, 1), np.float32))
    (tmp_path / "c.yaml").write_text(
        "data: {x1: x.npy}\narchitecture:\n  layers: [conv, relu, "
        "{local_avg_pool: {window: 2}}, dense]\n")
    result = invoke("estimate", tmp_path / "c.yaml")
    assert result.exit_code == 2
    assert "architecture.layers[2].local_avg_pool: window (2, 2) has 2 along spatial axis 0" \
        in result.stderr
