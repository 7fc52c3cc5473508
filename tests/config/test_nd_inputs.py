"""Sequences ``(N, L, C)`` and volumes ``(N, D, H, W, C)`` from file to kernels.h5:
layouts, the rank a ``filter``/``window``/``strides`` list must have, inputs with
too many axes, and ``estimate`` / ``compute`` end to end on a 1-D and a 3-D config.

Every mistake is one ``Error:`` line and exit status 2 (docs/cli.md). The kernels
themselves are checked against neural-tangents in ``test_kernels_fixtures.py``
(``seq_*``, ``vol_*``) and against finite networks in ``test_kernels_nd.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import kernelcli
from helpers_cli import error_line, invoke, read_kernels, snapshot, write_config
from kernelcli import stax
from kernelcli.config import check_architecture, load_config, parse_architecture
from kernelcli.data import open_array
from kernelcli.errors import ConfigError, DataError
from kernelcli.kernels import build_kernel_fn
from kernelcli.run import kernel_matrix

pytestmark = pytest.mark.usefixtures("keep_process_state")

SEQ_NET = [{"conv": {"filter": 3, "W_std": 1.4, "b_std": 0.1}}, "relu", "avg_pool",
           {"conv": {"filter": [2], "strides": [2], "padding": "CIRCULAR", "W_std": 1.4}},
           "relu", "global_avg_pool", "dense"]
VOL_NET = [{"conv": {"filter": [3, 1, 2], "W_std": 1.4, "b_std": 0.1}}, "relu",
           {"conv": {"filter": 2, "padding": "VALID", "W_std": 1.4}}, "relu", "flatten",
           "dense"]


def _data(n: int, shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n,) + tuple(shape)).astype(np.float32)


# --- layouts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("first,last", [("NCL", "NLC"), ("NCDHW", "NDHWC")])
def test_channels_first_files_are_read_channels_last(tmp_path, first, last):
    x = _data(3, (5, 4, 3, 2)[5 - len(first):])          # channels last: (L, C) or (D, H, W, C)
    np.save(tmp_path / "last.npy", x)
    np.save(tmp_path / "first.npy", np.moveaxis(x, -1, 1))
    with open_array(tmp_path / "first.npy", layout=first) as a, \
            open_array(tmp_path / "last.npy", layout=last) as b, \
            open_array(tmp_path / "last.npy") as c:       # the default: channels last
        assert a.shape == b.shape == c.shape == x.shape
        assert np.array_equal(a.read(0, 3), x) and np.array_equal(b.read(0, 3), x)
        assert np.array_equal(a.take([2, 0]), x[[2, 0]])


LAYOUT_MISMATCHES = [
    ("NCL", (2, 3, 4, 5), "data.layout: 'NCL' needs rank 3 sequences, but data.x1 {p} has "
                          "shape (2, 3, 4, 5); use NHWC or NCHW for rank 4 images"),
    ("NCHW", (2, 3, 4), "data.layout: 'NCHW' needs rank 4 images, but data.x1 {p} has shape "
                        "(2, 3, 4); use NLC or NCL for rank 3 sequences"),
    ("NDHWC", (2, 3, 4, 5), "data.layout: 'NDHWC' needs rank 5 volumes, but data.x1 {p} has "
                            "shape (2, 3, 4, 5); use NHWC or NCHW for rank 4 images"),
    ("NLC", (2, 3, 4, 5, 6), "data.layout: 'NLC' needs rank 3 sequences, but data.x1 {p} has "
                             "shape (2, 3, 4, 5, 6); use NDHWC or NCDHW for rank 5 volumes"),
]


@pytest.mark.parametrize("layout,shape,message", LAYOUT_MISMATCHES,
                         ids=[c[0] for c in LAYOUT_MISMATCHES])
def test_a_layout_that_does_not_fit_the_rank_is_refused(tmp_path, layout, shape, message):
    p = tmp_path / "x.npy"
    np.save(p, np.zeros(shape, np.float32))
    with pytest.raises(DataError) as e:
        open_array(p, layout=layout)
    assert str(e.value) == message.format(p=p)


def test_a_layout_that_does_not_fit_the_rank_exits_2_from_the_cli(tmp_path):
    np.save(tmp_path / "x.npy", _data(4, (6, 2)))
    cfg = write_config(tmp_path, x1="x.npy", layout="NCHW", layers=SEQ_NET)
    before = snapshot(tmp_path)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: data.layout: 'NCHW' needs rank 4 images, but data.x1 {tmp_path / 'x.npy'} "
        "has shape (4, 6, 2); use NLC or NCL for rank 3 sequences")
    assert snapshot(tmp_path) == before


# --- the rank of filter / window / strides ----------------------------------------------------

def _arch(*items):
    return parse_architecture({"layers": list(items)})


RANK_MISMATCHES = [
    ("conv: {filter: [3, 3]}", (16, 2),
     "architecture.layers[0].conv.filter: [3, 3] has 2 entries but the input has 1 spatial "
     "axis (shape (16, 2)); expected a positive integer or a list of 1 positive integer"),
    ("conv: {strides: [1, 2]}", (4, 4, 4, 2),
     "architecture.layers[0].conv.strides: [1, 2] has 2 entries but the input has 3 spatial "
     "axes (shape (4, 4, 4, 2)); expected a positive integer or a list of 3 positive "
     "integers"),
    ("conv: {filter: [3]}", (8, 8, 2),
     "architecture.layers[0].conv.filter: [3] has 1 entry but the input has 2 spatial axes "
     "(shape (8, 8, 2)); expected a positive integer or a list of 2 positive integers"),
]


@pytest.mark.parametrize("item,shape,message", RANK_MISMATCHES)
def test_a_filter_of_another_rank_than_the_input_is_refused(item, shape, message):
    import yaml

    arch = _arch(yaml.safe_load(item), "relu", "global_avg_pool", "dense")
    with pytest.raises(ConfigError) as e:
        check_architecture(arch, shape)
    assert str(e.value) == message


def test_a_window_inside_a_residual_names_its_path():
    arch = _arch("conv", {"residual": ["relu", {"conv": {"filter": [1, 1, 1]}}]},
                 {"avg_pool": {"window": 2, "strides": [1, 2]}}, "relu", "global_avg_pool",
                 "dense")
    with pytest.raises(ConfigError) as e:
        check_architecture(arch, (6, 6, 2))
    assert str(e.value) == (
        "architecture.layers[1].residual[1].conv.filter: [1, 1, 1] has 3 entries but the "
        "input has 2 spatial axes (shape (6, 6, 1)); expected a positive integer or a list "
        "of 2 positive integers")   # the shape at the branch's input (conv: width 1)
    arch = _arch("conv", {"avg_pool": {"window": 2, "strides": [1, 2]}}, "relu",
                 "global_avg_pool", "dense")
    with pytest.raises(ConfigError) as e:
        check_architecture(arch, (6, 2))
    assert str(e.value).startswith("architecture.layers[1].avg_pool.strides: [1, 2] has 2 "
                                   "entries but the input has 1 spatial axis (shape (6, 1))")


def test_defaults_mean_the_same_size_along_every_axis():
    arch = _arch("conv", "relu", "avg_pool", "global_avg_pool", "dense")
    assert check_architecture(arch, (8, 1)) == (1,)
    kfn = build_kernel_fn(arch, (6, 5, 4, 1), ("nngp",), "float32")
    conv, _, pool = kfn.arch.layers[:3]
    assert (conv.filter, conv.strides) == ((3, 3, 3), (1, 1, 1))
    assert (pool.window, pool.strides) == ((2, 2, 2), (2, 2, 2))
    assert kfn.variance_shapes == ((6, 5, 4),)
    assert kfn.cov_elements == (6 * 5 * 4) ** 2   # full covariance: a pool lies ahead


def test_a_filter_of_another_rank_exits_2_from_the_cli(tmp_path):
    np.save(tmp_path / "x.npy", _data(4, (6, 2)))
    cfg = write_config(tmp_path, x1="x.npy",
                       layers=[{"conv": {"filter": [3, 3]}}, "relu", "flatten", "dense"])
    for args in (("compute", cfg, "--quiet"), ("estimate", cfg, "--memory")):
        result = invoke(*args)
        assert result.exit_code == 2
        assert error_line(result) == (
            "Error: architecture.layers[0].conv.filter: [3, 3] has 2 entries but the input "
            "has 1 spatial axis (shape (6, 2)); expected a positive integer or a list of 1 "
            "positive integer")


def test_four_spatial_axes_are_refused(tmp_path):
    x = _data(3, (2, 2, 2, 2, 1))
    np.save(tmp_path / "x.npy", x)
    cfg = write_config(tmp_path, x1="x.npy", layers=["flatten", "dense"])
    result = invoke("estimate", cfg, "--memory")
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: data.x1: {tmp_path / 'x.npy'} holds an array of shape (3, 2, 2, 2, 2, 1) "
        "(rank 6); accepted: rank 2 rows (N, D), rank 3 sequences (N, L, C), rank 4 images "
        "(N, H, W, C) or rank 5 volumes (N, D, H, W, C)")
    with pytest.raises(ConfigError) as e:
        check_architecture(_arch("flatten", "dense"), x.shape[1:])
    assert str(e.value).startswith("input shape (2, 2, 2, 2, 1) is not supported")


# --- estimate and compute, end to end ---------------------------------------------------------

@pytest.mark.parametrize("name,shape,layers,layout", [
    ("seq", (16, 2), SEQ_NET, "NCL"), ("vol", (4, 4, 3, 1), VOL_NET, None)])
def test_estimate_and_compute_run_1d_and_3d_configs(tmp_path, name, shape, layers, layout):
    x = _data(11, shape, seed=3)
    stored = x if layout is None else np.moveaxis(x, -1, 1)
    np.save(tmp_path / "x.npy", stored)
    cfg = write_config(tmp_path, name, x1="x.npy", layout=layout, layers=layers,
                       compute={"block": 8, "memory": "256MiB"}, dtype="float64")
    est = invoke("estimate", cfg, "--memory", "--json")
    assert est.exit_code == 0, est.stderr
    plan = json.loads(est.stdout)
    positions = int(np.prod(shape[:-1]))
    pools = "global_avg_pool" in layers
    # a pool ahead: the full covariance, (L)^2 or (D*H*W)^2; else its diagonal
    assert plan["cov_elements_per_pair"] == (positions ** 2 if pools else positions)
    assert (plan["n1"], plan["blocks_total"], plan["pairs_total"]) == (11, 3, 66)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 0, result.stderr
    arrays, _ = read_kernels(tmp_path / "run" / "kernels.h5")
    arch = load_config(cfg).architecture
    want = kernel_matrix(build_kernel_fn(arch, shape, ("nngp", "ntk"), "float64"), x)
    for kind in ("nngp", "ntk"):
        got = arrays[kind]
        assert got.shape == (11, 11) and np.array_equal(got, got.T)
        np.testing.assert_allclose(got, want[kind], rtol=1e-12, atol=1e-14)


# --- kernelcli.stax -----------------------------------------------------------------------------

def test_stax_builders_take_one_size_per_spatial_axis():
    seq = stax.serial(stax.Conv(4, (3,), padding="SAME", W_std=1.4, b_std=0.1), stax.Relu(),
                      stax.AvgPool((2,)), stax.Conv(2, (2,), (2,), "CIRCULAR", W_std=1.4),
                      stax.Relu(), stax.GlobalAvgPool(), stax.Dense(1))
    assert seq.to_dict()["layers"][:3] == [
        {"conv": {"filter": [3], "strides": 1, "padding": "SAME", "W_std": 1.4,
                  "b_std": 0.1, "width": 4}}, "relu",
        {"avg_pool": {"window": [2], "strides": [1], "padding": "VALID",
                      "normalize_edges": False}}]
    vol = stax.serial(stax.Conv(2, (3, 1, 2), (1, 2, 1), dimension_numbers=(
        "NABDC", "ABDIO", "NABDC")), stax.Relu(), stax.Flatten(), stax.Dense(1))
    assert vol.to_dict()["layers"][0]["conv"]["strides"] == [1, 2, 1]
    x = _data(3, (8, 2), seed=1)
    a = kernelcli.kernel_fn(seq)(x, get="nngp", dtype="float64")
    b = kernelcli.kernel_fn(seq.to_yaml())(x, get="nngp", dtype="float64")
    assert a.shape == (3, 3) and np.array_equal(a, b)
    assert kernelcli.kernel_fn(vol)(_data(2, (3, 4, 2, 1)), get="ntk").shape == (2, 2)


def test_stax_refuses_four_spatial_axes_and_channels_first():
    with pytest.raises(ConfigError) as e:
        stax.Conv(1, (3, 3, 3, 3))
    assert str(e.value) == ("stax: filter_shape (3, 3, 3, 3) is not accepted; kernelcli's "
                            "layers take 1 to 3 spatial axes: give one size per axis, e.g. "
                            "(3,), (3, 3) or (3, 3, 3)")
    with pytest.raises(ConfigError) as e:
        stax.Conv(1, (3,), dimension_numbers=("NCA", "AIO", "NCA"))
    assert str(e.value).startswith("stax.Conv: dimension_numbers=('NCA', 'AIO', 'NCA') is not "
                                   "supported by kernelcli; accepted: None or channels last")


def test_run_fingerprints_of_image_configs_are_those_of_before_n_d_inputs(tmp_path):
    """A one-int size is recorded as the pair it meant when every input was an image,
    so runs made then can still be resumed: ``filter: 3`` and ``filter: [3, 3]`` (and
    a default) are one configuration; ``[3]`` (sequences) is another."""
    from kernelcli.pipeline import config_fingerprint

    def fp(conv, pool):
        cfg = write_config(tmp_path, x1="x.npy", layers=[conv, "relu", pool, "flatten",
                                                          "dense"])
        return config_fingerprint(load_config(cfg))

    pair = fp({"conv": {"filter": [3, 3], "strides": [1, 1]}},
              {"avg_pool": {"window": [2, 2], "strides": [2, 2]}})
    assert fp({"conv": {"filter": 3}}, "avg_pool") == pair
    assert fp("conv", {"avg_pool": {"window": [2, 2]}}) == pair
    assert fp({"conv": {"filter": [3]}}, "avg_pool") != pair
