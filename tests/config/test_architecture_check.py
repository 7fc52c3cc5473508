"""The architecture check: per-example shapes and the layer order rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcli.config import (
    Architecture,
    check_architecture,
    layer_shapes,
    load_config,
    parse_config,
    spatial_out,
)
from kernelcli.errors import ConfigError

FIXTURES = Path(__file__).parents[1] / "fixtures"
IMAGE = (8, 8, 3)


def arch(*items: str) -> Architecture:
    text = "data: {x1: a.npy}\narchitecture:\n  layers:\n" + "".join(
        f"    - {item}\n" for item in items)
    return parse_config(text, base_dir=Path("/cfg")).architecture


def error_of(architecture: Architecture, shape=IMAGE) -> str:
    with pytest.raises(ConfigError) as info:
        check_architecture(architecture, shape)
    return str(info.value)


# --- spatial_out ----------------------------------------------------------------------

@pytest.mark.parametrize("size, k, s, padding, expected", [
    (8, 3, 1, "VALID", 6), (8, 2, 2, "VALID", 4), (7, 2, 2, "VALID", 3), (8, 8, 1, "VALID", 1),
    (8, 9, 1, "VALID", 0), (8, 3, 1, "SAME", 8), (7, 3, 2, "SAME", 4), (2, 5, 1, "SAME", 2),
    (7, 3, 2, "CIRCULAR", 4), (3, 9, 3, "CIRCULAR", 1),
])
def test_spatial_out_follows_lax_rules(size, k, s, padding, expected):
    assert spatial_out(size, k, s, padding) == expected


# --- shapes ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, shape", [
    ("cnn1_flatten", IMAGE), ("cnn1_gap", IMAGE), ("cnn3_flatten", IMAGE), ("cnn3_gap", IMAGE),
    ("erf_net", IMAGE), ("fc3", IMAGE), ("myrtle5", (32, 32, 3)), ("rect", IMAGE),
    ("residual", IMAGE), ("standard_param", IMAGE), ("parallel_sum", IMAGE),
    ("parallel_concat", IMAGE), ("parallel_concat_standard", IMAGE), ("parallel_rect", IMAGE),
    ("parallel_nested", IMAGE),
])
def test_every_fixture_architecture_passes_on_its_data(name, shape):
    config = load_config(FIXTURES / f"{name}.yaml")
    assert check_architecture(config.architecture, shape) == (1,)


def test_layer_shapes_walk_myrtle5_down_to_one_pixel():
    config = load_config(FIXTURES / "myrtle5.yaml")
    rows = layer_shapes(config.architecture, (32, 32, 3))
    assert [out for _, _, out in rows] == [
        (32, 32, 1), (32, 32, 1), (32, 32, 1), (32, 32, 1), (16, 16, 1), (16, 16, 1),
        (16, 16, 1), (8, 8, 1), (8, 8, 1), (8, 8, 1), (4, 4, 1), (2, 2, 1), (1, 1, 1),
        (1,), (1,)]
    assert rows[0][1] == (32, 32, 3)


def test_widths_set_the_channel_count():
    shapes = layer_shapes(arch("conv: {width: 16, padding: VALID}", "relu",
                               "dense: {width: 4}", "relu", "global_avg_pool", "dense"), IMAGE)
    assert [out for _, _, out in shapes] == [(6, 6, 16), (6, 6, 16), (6, 6, 4), (6, 6, 4),
                                             (4,), (1,)]


def test_vector_data_runs_through_dense_layers():
    assert check_architecture(arch("dense: {width: 5}", "erf", "dense"), (10,)) == (1,)


def test_strided_same_conv_rounds_up():
    rows = layer_shapes(arch("conv: {filter: 3, strides: 2}", "relu", "flatten", "dense"),
                        (7, 7, 3))
    assert rows[0][2] == (4, 4, 1)
    assert rows[2][2] == (16,)


def test_filter_larger_than_the_image_under_valid_padding_is_refused():
    assert error_of(arch("conv: {filter: 9, padding: VALID}", "relu", "flatten", "dense")) == (
        "architecture.layers[0].conv: filter (9, 9) does not fit the input of shape (8, 8, 3) "
        "under VALID padding; expected a filter no larger than (8, 8), or padding SAME or "
        "CIRCULAR")


def test_pool_window_that_no_longer_fits_is_refused():
    layers = arch("conv", "relu", "avg_pool", "avg_pool", "avg_pool: {window: [3, 1]}",
                  "flatten", "dense")
    assert error_of(layers) == (
        "architecture.layers[4].avg_pool: window (3, 1) does not fit the input of shape "
        "(2, 2, 1) under VALID padding; expected a window no larger than (2, 2), or "
        "padding SAME or CIRCULAR")


@pytest.mark.parametrize("padding", ["SAME", "CIRCULAR"])
def test_large_filters_are_fine_with_same_or_circular_padding(padding):
    layers = arch(f"conv: {{filter: 11, padding: {padding}}}", "relu",
                  f"avg_pool: {{window: 5, padding: {padding}}}", "flatten", "dense")
    assert layer_shapes(layers, (4, 4, 3))[2][2] == (1, 1, 1)


def test_spatial_layer_after_flatten_is_refused():
    assert error_of(arch("conv", "relu", "flatten", "conv", "flatten", "dense")) == (
        "architecture.layers[3].conv: conv needs spatial axes (a sequence (L, C), an image (H, W, C) or a volume (D, H, W, C)) but gets a vector of "
        "shape (64,) made by architecture.layers[2].flatten; spatial layers cannot follow "
        "flatten, global_avg_pool, global_sum_pool or local_avg_pool")


def test_spatial_layer_after_global_avg_pool_is_refused():
    assert error_of(arch("conv", "relu", "global_avg_pool", "avg_pool", "dense")) == (
        "architecture.layers[3].avg_pool: avg_pool needs spatial axes (a sequence (L, C), an image (H, W, C) or a volume (D, H, W, C)) but gets a "
        "vector of shape (1,) made by architecture.layers[2].global_avg_pool; spatial layers "
        "cannot follow flatten, global_avg_pool, global_sum_pool or local_avg_pool")


def test_flatten_after_global_avg_pool_is_fine():
    assert check_architecture(arch("conv", "relu", "global_avg_pool", "flatten", "dense"),
                              IMAGE) == (1,)


def test_spatial_layer_on_vector_input_is_refused():
    assert error_of(arch("conv", "relu", "dense"), (10,)) == (
        "architecture.layers[0].conv: conv needs spatial axes (a sequence (L, C), an image (H, W, C) or a volume (D, H, W, C)) but the input is a "
        "vector of shape (10,); expected no spatial layer for vector data")


def test_image_output_is_refused():
    assert error_of(arch("conv", "relu", "conv")) == (
        "architecture.layers: the network outputs shape (8, 8, 1), an image; expected a "
        "vector: add flatten or global_avg_pool before the last dense")
    assert check_architecture(arch("conv"), IMAGE, require_vector_output=False) == (8, 8, 1)


@pytest.mark.parametrize("shape", [(8, 0), (0,), (2, 2, 8, 8, 3)])
def test_unsupported_input_shape_is_refused(shape):
    assert error_of(arch("flatten", "dense"), shape) == (
        f"input shape {shape} is not supported; expected (D,) vectors, (L, C) sequences, "
        "(H, W, C) images or (D, H, W, C) volumes of positive sizes")


# --- order rules ----------------------------------------------------------------------

def test_nonlinearity_on_the_raw_input_is_refused():
    assert error_of(arch("relu", "flatten", "dense")) == (
        "architecture.layers[0].relu: relu acts on the raw input, which is not Gaussian; "
        "it must follow dense, conv, conv_local or conv_transpose (possibly through avg_pool, "
        "global_avg_pool, global_sum_pool, identity, layer_norm, sum_pool, residual or a "
        "parallel with merge sum)")


def test_two_nonlinearities_in_a_row_are_refused():
    assert error_of(arch("conv", "relu", "leaky_relu: {alpha: 0.1}", "flatten", "dense")
                    ).startswith(
        "architecture.layers[2].leaky_relu: leaky_relu acts on the output of relu at "
        "architecture.layers[1].relu, which is not Gaussian;")


def test_nonlinearity_after_flatten_is_refused():
    assert error_of(arch("conv", "flatten", "erf", "dense")).startswith(
        "architecture.layers[2].erf: erf acts on the output of flatten at "
        "architecture.layers[1].flatten, which is not Gaussian;")


def test_layer_norm_needs_a_gaussian_input():
    assert error_of(arch("layer_norm", "flatten", "dense")).startswith(
        "architecture.layers[0].layer_norm: layer_norm acts on the raw input, which is not "
        "Gaussian;")


def test_gaussianity_passes_through_pools_identity_and_layer_norm():
    layers = arch("conv", "avg_pool", "identity", "layer_norm", "gelu", "dense",
                  "global_avg_pool", "abrelu: {a: 0.5, b: 1}", "dense")
    assert check_architecture(layers, IMAGE) == (1,)


def test_residual_needs_a_gaussian_input():
    assert error_of(arch("conv", "relu", "residual: [relu, conv]", "flatten", "dense")
                    ).startswith(
        "architecture.layers[2].residual: residual acts on the output of relu at "
        "architecture.layers[1].relu, which is not Gaussian;")


def test_residual_branch_must_end_in_dense_or_conv():
    assert error_of(arch("conv", "residual: [relu, conv, relu]", "relu", "flatten", "dense")
                    ) == (
        "architecture.layers[1].residual: the branch ends in relu; expected it to end in "
        "dense, conv, conv_local or conv_transpose, since x + f(x) adds two independent "
        "Gaussians")


def test_residual_branch_must_keep_the_shape():
    assert error_of(arch("conv", "residual: [relu, {conv: {strides: 2}}]", "relu",
                         "flatten", "dense")) == (
        "architecture.layers[1].residual: the branch maps shape (8, 8, 1) to (4, 4, 1); "
        "expected it to keep the shape, since its output is added to its input")


def test_residual_output_is_gaussian_and_checked_inside():
    assert error_of(arch("conv", "residual: [relu, relu, conv]", "flatten", "dense")
                    ).startswith("architecture.layers[1].residual[1].relu: relu acts on the "
                                 "output of relu at architecture.layers[1].residual[0].relu")
    assert check_architecture(arch("conv", "residual: {layers: [relu, conv]}", "relu",
                                   "flatten", "dense"), IMAGE) == (1,)
