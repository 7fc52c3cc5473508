"""The YAML run configuration: fixtures load, defaults apply, every mistake is named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelcli.config import (
    ABRelu,
    AvgPool,
    Conv,
    Dense,
    Flatten,
    GlobalAvgPool,
    Relu,
    Residual,
    bind_architecture,
    bind_layers,
    format_size,
    load_config,
    parse_config,
    parse_size,
)
from kernelcli.errors import ConfigError

FIXTURES = Path(__file__).parents[1] / "fixtures"
FIXTURE_CONFIGS = sorted(FIXTURES.glob("*.yaml"))
SQRT2 = 1.4142135623730951

MINIMAL = """\
data: {x1: train.npy}
architecture:
  layers: [flatten, dense]
"""


def parse(text: str, source: Path | None = Path("/cfg/config.yaml")):
    return parse_config(text, base_dir=Path("/cfg"), source=source)


def error_of(text: str, source: Path | None = Path("/cfg/config.yaml")) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, source)
    message = str(info.value)
    assert "\n" not in message
    return message


def with_layers(*items: str) -> str:
    return "data: {x1: train.npy}\narchitecture:\n  layers:\n" + "".join(
        f"    - {item}\n" for item in items)


# --- fixtures and defaults ------------------------------------------------------------

def test_fixture_copies_match_the_shared_fixtures():
    """tests/fixtures/ holds copies (every fixture test reads those); this compares them
    with the neural-tangents originals, where a checkout has them beside it."""
    shared = Path(__file__).parents[3] / "shared" / "fixtures"
    if not shared.is_dir():
        pytest.skip(f"{shared} is missing: the originals of tests/fixtures/, which CI's "
                    f"clone has in shared/ beside the checkout; link or copy that shared/ "
                    f"folder as {shared.parent} to compare the copies with them")
    for original in shared.iterdir():
        ours = (FIXTURES / original.name).read_bytes()
        if original.name == "CHECKS.md":  # our own fixtures' rows follow the shared ones
            assert ours.startswith(original.read_bytes())
        else:
            assert ours == original.read_bytes()


@pytest.mark.parametrize("path", FIXTURE_CONFIGS, ids=lambda p: p.stem)
def test_every_fixture_config_loads(path):
    config = load_config(path)
    assert config.name == path.stem
    assert config.data.x1 == path.parent.absolute() / f"{path.stem}.npz"
    assert config.data.key == "x1"
    assert config.kernel.kinds == ("nngp", "ntk")
    assert config.kernel.dtype == "float64"
    assert config.output.run_dir == path.parent.absolute() / "runs" / path.stem
    assert config.source == path.absolute()
    assert config.text == path.read_text()


def test_myrtle5_repeats_expand_into_the_flat_layer_list():
    # bound to its 32x32x3 images: `conv` without a filter is (3, 3) there
    layers = bind_architecture(load_config(FIXTURES / "myrtle5.yaml").architecture,
                               (32, 32, 3)).layers
    conv = Conv(filter=(3, 3), strides=(1, 1), padding="SAME", W_std=SQRT2, b_std=0.0)
    pool = AvgPool(window=(2, 2), strides=(2, 2), padding="VALID")
    dense = Dense(W_std=SQRT2, b_std=0.0)
    assert layers == (conv, Relu(), conv, Relu(), pool, conv, Relu(), pool, conv, Relu(),
                      pool, pool, pool, Flatten(), dense)
    assert layers[2].where == "architecture.layers[0].repeat.layers[0].conv"
    assert layers[10].where == "architecture.layers[7].repeat.layers[0].avg_pool"
    assert layers[13].where == "architecture.layers[8].flatten"


def test_residual_fixture_keeps_its_branch():
    layers = load_config(FIXTURES / "residual.yaml").architecture.layers
    assert isinstance(layers[1], Residual)
    assert [type(layer) for layer in layers[1].layers] == [Relu, Conv, Relu, Dense]
    assert layers[1].layers[1].where == "architecture.layers[1].residual[1].conv"


def test_rect_fixture_has_a_second_input():
    data = load_config(FIXTURES / "rect.yaml").data
    assert data.x2 == (FIXTURES / "rect.npz").absolute()
    assert data.x2_key == "x2"


def test_standard_parameterization_is_read():
    config = load_config(FIXTURES / "standard_param.yaml")
    assert config.architecture.parameterization == "standard"
    assert config.architecture.layers[0].b_std == 0.1


def test_defaults_fill_every_optional_value():
    config = parse(MINIMAL)
    assert config.name == "config"
    assert config.data.key is None and config.data.x2 is None and config.data.x2_key is None
    assert config.data.layout == "NHWC" and config.data.limit is None
    assert config.architecture.parameterization == "ntk"
    assert config.architecture.layers == (Flatten(), Dense(W_std=1.0, b_std=0.0, width=1))
    assert config.kernel.kinds == ("nngp", "ntk") and config.kernel.dtype == "float32"
    assert (config.compute.memory, config.compute.devices, config.compute.block) == (
        None, None, None)
    assert config.output.run_dir == Path("/cfg/runs/config")


def test_layer_defaults_follow_the_contract():
    layers = parse(with_layers("conv", "avg_pool", "avg_pool: {window: 3}",
                               "leaky_relu: {alpha: 0.1}", "abrelu: {a: -1, b: 2}",
                               "dense: {b_std: null}", "global_avg_pool")).architecture.layers
    # one int: that size along every spatial axis, however many the input has
    assert layers[0] == Conv(filter=3, strides=1, padding="SAME", W_std=1.0,
                             b_std=0.0, width=1)
    assert layers[1] == AvgPool(window=2, strides=2, padding="VALID")
    assert layers[2] == AvgPool(window=3, strides=3, padding="VALID")
    for shape, axes in (((8, 2), 1), ((8, 8, 2), 2), ((4, 4, 4, 2), 3)):
        bound = bind_layers(layers, shape)
        assert (bound[0].filter, bound[0].strides) == ((3,) * axes, (1,) * axes)
        assert (bound[2].window, bound[2].strides) == ((3,) * axes, (3,) * axes)
    assert layers[3] == ABRelu(a=0.1, b=1.0)
    assert layers[3].where == "architecture.layers[3].leaky_relu"
    assert layers[4] == ABRelu(a=-1.0, b=2.0)
    assert layers[5].b_std is None
    assert layers[6] == GlobalAvgPool()


def test_padding_is_case_insensitive_and_stored_upper_case():
    layers = parse(with_layers("conv: {padding: circular}", "avg_pool: {padding: same}"))
    assert [layer.padding for layer in layers.architecture.layers] == ["CIRCULAR", "SAME"]


def test_numbers_pyyaml_reads_as_strings_are_accepted():
    # YAML 1.1 reads `1e-3` (no dot) as a string.
    assert parse(with_layers("dense: {W_std: 1e-3}")).architecture.layers[0].W_std == 0.001


def test_kinds_are_stored_in_canonical_order():
    assert parse(MINIMAL + "kernel: {kinds: [ntk, nngp]}\n").kernel.kinds == ("nngp", "ntk")
    assert parse(MINIMAL + "kernel: {kinds: [ntk]}\n").kernel.kinds == ("ntk",)


def test_compute_values_are_read():
    compute = parse(MINIMAL + "compute: {memory: 512MiB, devices: 2, block: 1024}\n").compute
    assert (compute.memory, compute.devices, compute.block) == (512 * 2**20, 2, 1024)


def test_relative_paths_resolve_against_the_config_folder(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "exp.yaml").write_text(
        "data: {x1: ../data/a.npz, key: x, x2: /abs/b.npy}\n"
        "architecture: {layers: [flatten, dense]}\n"
        "output: {run_dir: out/exp}\n")
    config = load_config(folder / "exp.yaml")
    assert config.name == "exp"
    assert config.data.x1 == tmp_path.absolute() / "data" / "a.npz"  # normalised
    assert config.data.x2 == Path("/abs/b.npy")
    assert config.output.run_dir == folder.absolute() / "out" / "exp"


def test_default_run_dir_uses_the_name():
    assert parse("name: cifar\n" + MINIMAL).output.run_dir == Path("/cfg/runs/cifar")


def test_text_without_a_file_has_no_prefix_and_a_default_name():
    assert parse(MINIMAL, source=None).name == "run"
    assert error_of("data: {}\n", source=None).startswith("data.x1: missing")


# --- sizes ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("8GiB", 8 * 1024**3), ("512MiB", 512 * 1024**2), ("1.5GB", 1_500_000_000),
    ("1000000", 1_000_000), (1000000, 1_000_000), ("2 KiB", 2048), ("3kb", 3000),
    ("1TiB", 1024**4), ("7B", 7), ("0.5KiB", 512), ("1.1GB", 1_100_000_000), ("8gib", 8 << 30),
])
def test_parse_size_reads_decimal_and_binary_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "8 GiBs", "1.5.2MB", "-5", "8 XB", True, 1.5, -1])
def test_parse_size_rejects_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="expected a number of bytes"):
        parse_size(text)


@pytest.mark.parametrize("n, expected", [
    (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (3 * 2**30 // 2, "1.5 GiB"),
    (8 * 2**30, "8 GiB"), (512 * 2**20, "512 MiB"), (2**40, "1 TiB"),
])
def test_format_size_uses_the_largest_binary_unit(n, expected):
    assert format_size(n) == expected


# --- one test per class of mistake -----------------------------------------------------

def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'nope.yaml'}: no such "
                                                    "configuration file")):
        load_config(tmp_path / "nope.yaml")


def test_directory_instead_of_a_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_yaml_syntax_error_names_file_line_and_problem(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("data: {x1: a.npy\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == ("bad.yaml: not valid YAML (line 2, column 1): "
                               "expected ',' or '}', but got '<stream end>'")


NO_LAYERS = "data: {x1: a.npy}\narchitecture: {layers: [dense]}\n"
SECTIONS = "expected a mapping with the sections name, data, architecture, kernel, compute, output"
SIZE = ("expected a number of bytes such as 1000000, '512MiB', '8GiB' or '1.5GB' (units B, "
        "KB, MB, GB, TB, KiB, MiB, GiB, TiB), or auto")

# (behaviour, YAML text, exact message after "config.yaml: ") for mistakes outside layers.
SECTION_MISTAKES = [
    ("empty_file", "", f"the configuration is empty; {SECTIONS}"),
    ("document_not_a_mapping", "- a\n", f"['a'] is not a configuration; {SECTIONS}"),
    ("unknown_section_is_named_with_a_suggestion", MINIMAL + "kernal: {}\n",
     "unknown section 'kernal'; expected name, data, architecture, kernel, compute, output; "
     "did you mean 'kernel'?"),
    ("unknown_key_names_its_section", MINIMAL + "kernel: {dtyp: float64}\n",
     "kernel: unknown key 'dtyp'; expected kinds, dtype, test_diagonal, augment; did you mean 'dtype'?"),
    ("section_not_a_mapping", "data: [a]\narchitecture: {layers: [relu]}\n",
     "data: ['a'] is not a mapping; expected a mapping of x1, key, x2, x2_key, layout, limit, labels, labels_key, test, test_key, test_labels, test_labels_key, test_limit, preprocess, landmarks"),
    ("missing_x1", "data: {key: x}\narchitecture: {layers: [relu]}\n",
     "data.x1: missing; expected the path of the input array file (.npy, .npz or .h5)"),
    ("x2_key_without_x2", NO_LAYERS.replace("a.npy", "a.npy, x2_key: x2"),
     "data.x2_key: 'x2' is given but data.x2 is null; expected data.x2 as well, or no x2_key"),
    ("path_of_wrong_type", NO_LAYERS.replace("a.npy", "5"),
     "data.x1: 5 is not a string; expected a file path"),
    ("unknown_layout", NO_LAYERS.replace("a.npy", "a.npy, layout: NWHC"),
     "data.layout: 'NWHC' is not a layout; expected one of NHWC, NCHW, NLC, NCL, NDHWC, "
     "NCDHW; did you mean 'NHWC'?"),
    ("limit_given_as_bool", NO_LAYERS.replace("a.npy", "a.npy, limit: true"),
     "data.limit: true is not a row count; expected a positive integer"),
    ("missing_layer_list", "data: {x1: a.npy}\n",
     "architecture.layers: missing; expected a list of at least one layer"),
    ("empty_layer_list", NO_LAYERS.replace("[dense]", "[]"),
     "architecture.layers: empty; expected a list of at least one layer"),
    ("unknown_parameterization", NO_LAYERS.replace("{layers", "{parameterization: nkt, layers"),
     "architecture.parameterization: 'nkt' is not a parameterization; "
     "expected one of ntk, standard"),
    ("unknown_kind", MINIMAL + "kernel: {kinds: [ntkk]}\n",
     "kernel.kinds[0]: 'ntkk' is not a kernel kind; expected one of nngp, ntk; "
     "did you mean 'ntk'?"),
    ("repeated_kind", MINIMAL + "kernel: {kinds: [ntk, nngp, ntk]}\n",
     "kernel.kinds[2]: 'ntk' is listed twice; expected each kind at most once"),
    ("empty_kinds", MINIMAL + "kernel: {kinds: []}\n",
     "kernel.kinds: [] is not a list of kernel kinds; expected a non-empty list of nngp, ntk"),
    ("unknown_dtype", MINIMAL + "kernel: {dtype: float8}\n",
     "kernel.dtype: 'float8' is not a dtype; expected one of float32, float64; "
     "did you mean 'float64'?"),
    ("bad_memory_size", MINIMAL + "compute: {memory: 8 XB}\n",
     f"compute.memory: '8 XB' is not a size; {SIZE}"),
    ("zero_memory", MINIMAL + "compute: {memory: 0}\n",
     "compute.memory: 0 is zero bytes; expected auto or a positive size such as '8GiB'"),
    ("zero_devices", MINIMAL + "compute: {devices: 0}\n",
     "compute.devices: 0 is not a device count; expected all or a positive integer"),
    ("negative_block", MINIMAL + "compute: {block: -3}\n",
     "compute.block: -3 is not a block size; expected auto or a positive integer"),
]


@pytest.mark.parametrize("text, message", [pytest.param(t, m, id=i) for i, t, m in
                                           SECTION_MISTAKES])
def test_section_mistake_names_file_path_value_and_choices(text, message):
    assert error_of(text) == f"config.yaml: {message}"


def test_unknown_layer_names_path_value_and_choices():
    assert error_of(with_layers("conv", "rellu")) == (
        "config.yaml: architecture.layers[1]: unknown layer 'rellu'; expected one of abrelu, "
        "abs, avg_pool, conv, conv_local, conv_transpose, cos, dense, erf, exp, flatten, "
        "gaussian, gelu, global_avg_pool, global_sum_pool, hermite, identity, layer_norm, "
        "leaky_relu, local_avg_pool, monomial, parallel, rbf, rectified_monomial, relu, repeat, "
        "residual, sigmoid_like, sign, sin, sum_pool; did you mean 'relu'?")


def test_unknown_layer_parameter_lists_the_accepted_ones():
    assert error_of(with_layers("conv: {filters: 3}")).startswith(
        "config.yaml: architecture.layers[0].conv: unknown parameter 'filters'; expected "
        "filter, strides, padding, W_std, b_std, width")


def test_bad_padding_names_path_value_and_choices():
    assert error_of(with_layers("dense", "relu", "dense", "conv: {padding: SAMEE}")) == (
        "config.yaml: architecture.layers[3].conv.padding: 'SAMEE' is not a padding; "
        "expected one of SAME, VALID, CIRCULAR; did you mean 'SAME'?")


def test_negative_w_std_is_refused():
    assert error_of(with_layers("conv: {W_std: -1.5}")) == (
        "config.yaml: architecture.layers[0].conv.W_std: -1.5 is negative; "
        "expected a number >= 0")


def test_negative_b_std_is_refused():
    assert error_of(with_layers("dense: {b_std: -0.5}")) == (
        "config.yaml: architecture.layers[0].dense.b_std: -0.5 is negative; "
        "expected a number >= 0, or null for no bias")


def test_non_numeric_w_std_is_refused():
    assert error_of(with_layers("dense: {W_std: abc}")) == (
        "config.yaml: architecture.layers[0].dense.W_std: 'abc' is not a number; "
        "expected a number >= 0")


@pytest.mark.parametrize("value", ["[0, 3]", "0", "[]", "[3, 3, 3, 3]", "true", "[2.5, 3]"])
def test_non_positive_or_malformed_filter_is_refused(value):
    assert error_of(with_layers(f"conv: {{filter: {value}}}")).startswith(
        "config.yaml: architecture.layers[0].conv.filter: ")
    assert error_of(with_layers(f"conv: {{filter: {value}}}")).endswith(
        "is not a filter size; expected a positive integer (the same along every spatial "
        "axis) or a list of 1 to 3 positive integers (one per spatial axis)")


@pytest.mark.parametrize("value", ["[3]", "[3, 3]", "[3, 1, 2]"])
def test_filters_of_one_to_three_entries_are_read(value):
    assert parse(with_layers(f"conv: {{filter: {value}}}")).architecture.layers[0].filter == \
        tuple(int(v) for v in value.strip("[]").split(","))


def test_bool_is_not_taken_as_an_integer():
    assert error_of(with_layers("conv: {width: true}")) == (
        "config.yaml: architecture.layers[0].conv.width: true is not a width; "
        "expected a positive integer")


def test_parameterless_layer_refuses_parameters():
    assert error_of(with_layers("relu: {x: 1}")) == (
        "config.yaml: architecture.layers[0].relu: relu takes no parameters; got {'x': 1}")


def test_required_layer_parameter_is_named():
    assert error_of(with_layers("abrelu: {a: 0.1}")) == (
        "config.yaml: architecture.layers[0].abrelu.b: missing; expected a number")
    assert error_of(with_layers("leaky_relu")) == (
        "config.yaml: architecture.layers[0].leaky_relu.alpha: missing; expected a number")


def test_layer_item_with_two_keys_hints_at_indentation():
    assert error_of(with_layers("conv:\n      filter: [3, 3]")) == (
        "config.yaml: architecture.layers[0]: {'conv': None, 'filter': [3, 3]} has 2 keys; "
        "expected one layer name mapped to its parameters (indent the parameters under "
        "the name)")


def test_mistake_inside_repeat_names_the_nested_path():
    assert error_of(with_layers("repeat: {times: 2, layers: [dense, {conv: {padding: x}}]}")) == (
        "config.yaml: architecture.layers[0].repeat.layers[1].conv.padding: 'x' is not a "
        "padding; expected one of SAME, VALID, CIRCULAR")


def test_repeat_count_must_be_a_positive_integer():
    for value in ("0", "true", "1.5"):
        assert error_of(with_layers(f"repeat: {{times: {value}, layers: [relu]}}")) == (
            f"config.yaml: architecture.layers[0].repeat.times: {value} is not a repeat "
            "count; expected a positive integer")


def test_empty_repeat_or_residual_body_is_refused():
    assert error_of(with_layers("repeat: {times: 2, layers: []}")) == (
        "config.yaml: architecture.layers[0].repeat.layers: empty; expected a list of at "
        "least one layer")
    assert error_of(with_layers("residual: []")) == (
        "config.yaml: architecture.layers[0].residual: empty; expected a list of at least "
        "one layer")


def test_mistake_inside_residual_names_the_nested_path():
    assert error_of(with_layers("residual: {layers: [relu, {conv: {strides: [1, 0]}}]}")) == (
        "config.yaml: architecture.layers[0].residual.layers[1].conv.strides: [1, 0] is not "
        "a stride; expected a positive integer (the same along every spatial axis) or a list "
        "of 1 to 3 positive integers (one per spatial axis)")
