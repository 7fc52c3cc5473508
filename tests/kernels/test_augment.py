"""``kernel.augment``: kernels averaged over a flip group (docs/config-reference.md).

* the engine's ``mean over g of K(x, g y)`` equals the explicit construction, the
  plain kernel of the data concatenated with its flipped copies averaged over its
  |G| x |G| blocks (which assumes nothing about the network), at float64 1e-12;
* it is exactly symmetric and positive semi-definite;
* it matches neural-tangents' kernels averaged the same way (``tests/fixtures/augment``,
  written by ``tests/fixtures/make_augment.py``);
* networks whose kernel a flip changes are refused, with the reason; so are vector
  inputs, ``vflip`` on sequences and unknown values (exit 2, one line);
* ``compute`` runs it end to end, ``estimate`` shows its cost, and a run cannot be
  continued with another ``augment``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import kernelcli
from helpers_cli import error_line, invoke, read_kernels, write_config
from kernelcli.config import flip_group, load_config, parse_architecture
from kernelcli.errors import ConfigError
from kernelcli.kernels import build_kernel_fn
from kernelcli.run import kernel_matrix

pytestmark = pytest.mark.usefixtures("keep_process_state")

KINDS = ("nngp", "ntk")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "augment"
AUG_CASES = sorted(p.stem for p in FIXTURES.glob("*.yaml"))

POOL_FLATTEN = """
layers:
  - conv: {filter: 3, W_std: 1.4, b_std: 0.1}
  - relu
  - avg_pool: {window: 2}
  - conv: {filter: 3, W_std: 1.4}
  - relu
  - flatten
  - dense
"""
GAP_STRIDED = """
layers:
  - conv: {filter: 3, strides: 2, padding: VALID, W_std: 1.4, b_std: 0.1}
  - residual: [relu, {conv: {filter: 3, W_std: 1.4}}]
  - relu
  - global_avg_pool
  - dense
"""
SEQ_NET = """
layers:
  - conv: {filter: 3, W_std: 1.4, b_std: 0.1}
  - relu
  - avg_pool: {window: 2}
  - conv: {filter: 3, padding: VALID, W_std: 1.4}
  - relu
  - flatten
  - dense
"""
DIAGONAL_TOL = 1e-10  # see test_augmented_kernel_is_the_explicit_construction
FLAT_NET = "layers: [flatten, {dense: {W_std: 1.4, b_std: 0.1}}, relu, dense]"


def _x(n, shape, seed):
    return np.random.default_rng(seed).standard_normal((n,) + tuple(shape))


def _flip(x, g):
    return np.flip(x, tuple(1 + a for a in g)) if g else x


@functools.cache
def float64_kernel_fn(arch, shape, augment=()):
    """One float64 kernel function per network, shape and flips, so that the calls on
    it share its compiled programs (a fresh one compiles them again)."""
    return build_kernel_fn(arch, shape, KINDS, "float64", augment)


def explicit(arch, augment, x1, x2=None):
    """mean over g, h of K(g x1, h x2), from kernelcli's plain kernel of the data
    concatenated with its flipped copies: no assumption on the network."""
    group = flip_group(augment, x1.ndim - 2)
    a1 = np.concatenate([_flip(x1, g) for g in group])
    a2 = None if x2 is None else np.concatenate([_flip(x2, g) for g in group])
    k = kernel_matrix(float64_kernel_fn(arch, x1.shape[1:]), a1, a2)
    n2 = x1.shape[0] if x2 is None else x2.shape[0]
    m = len(group)
    return {kind: k[kind].reshape(m, x1.shape[0], m, n2).mean(axis=(0, 2)) for kind in KINDS}


def augmented(arch, augment, x1, x2=None, **kw):
    return kernel_matrix(float64_kernel_fn(arch, x1.shape[1:], tuple(augment)), x1, x2, **kw)


@pytest.mark.parametrize("text,shape,augment", [
    (POOL_FLATTEN, (6, 6, 2), ("hflip",)),
    (GAP_STRIDED, (7, 5, 1), ("hflip", "vflip")),
    (SEQ_NET, (10, 2), ("hflip",)),
    (FLAT_NET, (4, 3, 2), ("hflip", "vflip")),
], ids=["pool-flatten-h", "strided-residual-hv", "seq-h", "flat-hv"])
def test_augmented_kernel_is_the_explicit_construction(text, shape, augment):
    arch = parse_architecture(text)
    x, y = _x(5, shape, 1), _x(3, shape, 2)
    want, want_xy = explicit(arch, augment, x), explicit(arch, augment, x, y)
    got, got_xy = augmented(arch, augment, x), augmented(arch, augment, x, y)
    # small blocks and batches: several diagonal and off-diagonal tiles, padded batches
    tiled = augmented(arch, augment, x, block=2, pair_batch=3)
    off = ~np.eye(5, dtype=bool)
    for kind in KINDS:
        scale = np.max(np.abs(want[kind]))
        for a, b in ((got, want), (tiled, want), (got_xy, want_xy)):
            diff = np.abs(a[kind] - b[kind])
            assert np.max(diff if a is got_xy else diff[off]) <= 1e-12 * scale, kind
            # K_G(x, x) holds K(x, g x), whose positions p and g(p) are perfectly
            # correlated: ReLU's angle there is a rounding residue (about 1e-8), in both
            # constructions (and in neural-tangents'), which weighs ~1e-11 in the mean
            assert np.max(np.diagonal(diff)) <= DIAGONAL_TOL * scale, kind
        k = got[kind]
        assert np.array_equal(k, k.T) and np.array_equal(tiled[kind], tiled[kind].T)
        assert np.linalg.eigvalsh(k).min() >= -1e-12 * scale
    plain = kernel_matrix(float64_kernel_fn(arch, shape), x)
    assert not np.allclose(plain["nngp"], got["nngp"], rtol=1e-6)  # augment changed it


def test_float32_follows_float64():
    arch = parse_architecture(POOL_FLATTEN)
    x = _x(4, (6, 6, 2), 3)
    want = augmented(arch, ("hflip",), x)
    got = kernel_matrix(build_kernel_fn(arch, x.shape[1:], KINDS, "float32", ("hflip",)), x)
    for kind in KINDS:
        assert got[kind].dtype == np.float32 and np.array_equal(got[kind], got[kind].T)
        np.testing.assert_allclose(got[kind], want[kind], rtol=1e-4,
                                   atol=1e-5 * np.abs(want[kind]).max())


def test_the_fixtures_exist():
    assert len(AUG_CASES) >= 5
    for name in AUG_CASES:
        assert (FIXTURES / f"{name}.npz").is_file(), name


@pytest.mark.parametrize("name", AUG_CASES)
def test_matches_neural_tangents_averaged_over_the_group(name):
    cfg = load_config(FIXTURES / f"{name}.yaml")
    assert cfg.kernel.augment
    with np.load(FIXTURES / f"{name}.npz") as f:
        ref = {k: f[k] for k in f.files}
    x2 = ref.get("x2")
    for dtype, tol in (("float64", 1e-10),):  # float32: test_float32_follows_float64
        kfn = build_kernel_fn(cfg.architecture, ref["x1"].shape[1:], KINDS, dtype,
                              cfg.kernel.augment)
        got = kernel_matrix(kfn, ref["x1"], x2)
        for kind in KINDS:
            diff = np.abs(got[kind] - ref[kind]) / np.max(np.abs(ref[kind]))
            if x2 is None and dtype == "float64" and kind == "ntk":
                # neural-tangents' own ReLU angle at perfectly correlated positions is a
                # rounding residue: its NTK diagonal is held to 3e-8, as in
                # test_kernels_fixtures.test_diagonal_entries_match_neural_tangents
                assert np.max(np.diagonal(diff)) <= 3e-8, name
                diff = diff[~np.eye(len(diff), dtype=bool)]
            assert np.max(diff) <= tol, f"{name} {dtype} {kind}: {np.max(diff):.2e}"


SPATIAL_NET = """
layers:
  - conv_local: {filter: 3, W_std: 1.4, b_std: 0.1}
  - relu
  - conv: {filter: 3, W_std: 1.4}
  - erf
  - sum_pool: {window: 3, strides: 1, padding: SAME}
  - avg_pool: {window: 3, strides: 1, padding: SAME, normalize_edges: true}
  - conv_local: {filter: 1, W_std: 1.2}
  - global_sum_pool
  - dense
"""


@pytest.mark.slow
def test_the_spatial_family_under_a_flip_is_the_explicit_construction():
    """conv_local, sum_pool, normalize_edges and global_sum_pool follow the window
    rule (or average every position) like conv and avg_pool."""
    arch = parse_architecture(SPATIAL_NET)
    x = _x(4, (5, 6, 2), 7)
    want, got = explicit(arch, ("hflip", "vflip"), x), augmented(arch, ("hflip", "vflip"), x)
    off = ~np.eye(4, dtype=bool)
    for kind in KINDS:
        scale = np.max(np.abs(want[kind]))
        assert np.max(np.abs(got[kind] - want[kind])[off]) <= 1e-12 * scale, kind
        assert np.max(np.abs(np.diagonal(got[kind] - want[kind]))) <= DIAGONAL_TOL * scale


def test_a_transposed_convolution_is_refused_under_a_flip():
    arch = parse_architecture("layers: [conv_transpose, relu, global_avg_pool, dense]")
    with pytest.raises(ConfigError) as e:
        build_kernel_fn(arch, (4, 4, 1), KINDS, "float64", ("hflip",))
    assert str(e.value) == (_head() + "architecture.layers[0].conv_transpose is not known "
                            "to be flip-equivariant; expected layers listed in "
                            "docs/config-reference.md (kernel.augment)")


# --- networks a flip changes ---------------------------------------------------------------

def _head(augment="'hflip'"):
    return (f"kernel.augment: {augment} needs a network whose kernel is unchanged when "
            f"both inputs are flipped, but ")


REFUSED = [
    ("layers: [{conv: {filter: 2}}, relu, flatten, dense]", (6, 6, 1), ("hflip",),
     _head() + "architecture.layers[0].conv pads W (size 6, window 2, stride 1, SAME) by 0 "
     "before and 1 after; expected equal padding at both ends: an odd window with stride "
     "1, or VALID"),
    ("layers: [{conv: {filter: 3, strides: 2, padding: VALID}}, relu, flatten, dense]",
     (6, 7, 1), ("vflip",),
     _head("'vflip'") + "architecture.layers[0].conv leaves 1 position(s) of H (size 6, "
     "window 3, stride 2, VALID) after its last window; expected windows covering the axis "
     "from end to end: (size - window) divisible by the stride"),
    ("layers: [conv, residual: [relu, {avg_pool: {window: 2, strides: 1, padding: SAME}}, "
     "conv], relu, global_avg_pool, dense]", (6, 6, 1), ("hflip", "vflip"),
     _head("[hflip, vflip]") + "architecture.layers[1].residual[1].avg_pool pads W "
     "(size 6, window 2, stride 1, SAME) by 0 before and 1 after; expected equal padding at "
     "both ends: an odd window with stride 1, or VALID"),
    ("layers: [conv, relu, parallel: {merge: concat, branches: [[conv], [{conv: {filter: "
     "[1, 4]}}]]}, conv, relu, global_avg_pool, dense]", (5, 6, 1), ("vflip",),
     None),  # H is fine: filter 1 along H
]


@pytest.mark.parametrize("text,shape,augment,message", REFUSED)
def test_a_network_a_flip_changes_is_refused(text, shape, augment, message):
    arch = parse_architecture(text)
    if message is None:  # only the flipped axis counts
        build_kernel_fn(arch, shape, KINDS, "float64", augment)
        with pytest.raises(ConfigError) as e:
            build_kernel_fn(arch, shape, KINDS, "float64", ("hflip",))
        assert "architecture.layers[2].parallel.branches[1][0].conv pads W" in str(e.value)
        return
    with pytest.raises(ConfigError) as e:
        build_kernel_fn(arch, shape, KINDS, "float64", augment)
    assert str(e.value) == message


def test_why_a_non_equivariant_network_is_refused():
    """For a network that treats the ends of W differently (an even SAME filter), the
    single mean over g of K(x, g y) is not the group-averaged kernel: the shortcut
    would be wrong, so such a network is refused instead."""
    arch = parse_architecture("layers: [{conv: {filter: 2}}, relu, flatten, dense]")
    x = _x(4, (5, 5, 1), 4)
    group = ((), (1,))
    k = kernel_matrix(build_kernel_fn(arch, x.shape[1:], KINDS, "float64"),
                      np.concatenate([_flip(x, g) for g in group]))["nngp"]
    double = k.reshape(2, 4, 2, 4).mean(axis=(0, 2))
    single = k[:4].reshape(4, 2, 4).mean(axis=1)
    assert np.max(np.abs(double - single)) > 1e-3 * np.max(np.abs(double))


def test_inputs_without_spatial_axes_and_sequences_vflip_are_refused():
    with pytest.raises(ConfigError) as e:
        build_kernel_fn(parse_architecture("layers: [dense, relu, dense]"), (7,), KINDS,
                        "float64", ("hflip",))
    assert str(e.value) == (
        "kernel.augment: 'hflip' is not accepted for inputs without spatial axes (examples "
        "of shape (7,)); expected no augment, or sequences, images or volumes to flip")
    with pytest.raises(ConfigError) as e:
        build_kernel_fn(parse_architecture(SEQ_NET), (10, 2), KINDS, "float64",
                        ("hflip", "vflip"))
    assert str(e.value) == (
        "kernel.augment: [hflip, vflip] is not accepted for sequences (examples of shape "
        "(10, 2) have one spatial axis, L); expected hflip, which flips L")


# --- configuration, CLI and Python API -------------------------------------------------------

def _config(tmp_path, augment, layers=None, x=None, name="cfg", **kw):
    np.save(tmp_path / "x.npy", x if x is not None else _x(7, (6, 6, 2), 5).astype(np.float32))
    path = write_config(tmp_path, name, layers=layers or yaml.safe_load(POOL_FLATTEN)["layers"],
                        dtype="float64", compute={"block": 4, "memory": "256MiB"}, **kw)
    doc = yaml.safe_load(path.read_text())
    if augment is not None:
        doc["kernel"]["augment"] = augment
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("value,parsed", [
    (None, ()), ("none", ()), ([], ()), ("hflip", ("hflip",)), ("VFLIP", ("vflip",)),
    (["vflip", "hflip"], ("hflip", "vflip"))])
def test_values_accepted(tmp_path, value, parsed):
    assert load_config(_config(tmp_path, value)).kernel.augment == parsed


@pytest.mark.parametrize("value,message", [
    ("rot90", "kernel.augment: 'rot90' is not an augmentation; expected hflip, vflip, a list "
              "of them, or none"),
    ("hflp", "kernel.augment: 'hflp' is not an augmentation; expected hflip, vflip, a list "
             "of them, or none; did you mean 'hflip'?"),
    (["hflip", "hflip"], "kernel.augment[1]: 'hflip' is listed twice; expected each flip at "
                         "most once"),
    (["hflip", 3], "kernel.augment[1]: 3 is not an augmentation; expected hflip, vflip, a "
                   "list of them, or none"),
])
def test_unknown_values_exit_2(tmp_path, value, message):
    result = invoke("estimate", _config(tmp_path, value))
    assert result.exit_code == 2
    assert error_line(result) == f"Error: cfg.yaml: {message}"


def test_vector_inputs_exit_2(tmp_path):
    cfg = _config(tmp_path, "hflip", layers=["dense", "relu", "dense"],
                  x=_x(5, (7,), 6).astype(np.float32))
    for args in (("compute", cfg, "--quiet"), ("estimate", cfg)):
        result = invoke(*args)
        assert result.exit_code == 2
        assert error_line(result) == (
            "Error: kernel.augment: 'hflip' is not accepted for inputs without spatial axes "
            "(examples of shape (7,)); expected no augment, or sequences, images or volumes "
            "to flip")


def test_compute_end_to_end_estimate_and_identity(tmp_path):
    cfg = _config(tmp_path, "hflip")
    est = invoke("estimate", cfg, "--json")
    assert est.exit_code == 0, est.stderr
    plan = json.loads(est.stdout)
    assert (plan["augment"], plan["group_size"]) == (["hflip"], 2)
    assert plan["network_evaluations"] == 2 * plan["pairs_total"] == 2 * 28  # 7 * 8 / 2 pairs
    text = invoke("estimate", cfg).stdout
    assert "kernel.augment                 hflip: 2 evaluations per pair (y and its " \
           "flipped copies), 56 in all" in text
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 0, result.stderr
    arrays, _ = read_kernels(tmp_path / "run" / "kernels.h5")
    x = np.load(tmp_path / "x.npy").astype(np.float64)
    want = augmented(load_config(cfg).architecture, ("hflip",), x)
    for kind in KINDS:
        assert np.array_equal(arrays[kind], arrays[kind].T)
        np.testing.assert_allclose(arrays[kind], want[kind], rtol=1e-12, atol=1e-14)
    # the same run directory with another augment is another configuration
    other = _config(tmp_path, ["hflip", "vflip"], name="other")
    result = invoke("compute", other, "--quiet")
    assert result.exit_code != 0
    assert "holds a run of a different configuration" in result.stderr


def test_python_api_takes_augment():
    kf = kernelcli.kernel_fn(POOL_FLATTEN)
    x = _x(4, (6, 6, 2), 7)
    got = kf(x, get="ntk", dtype="float64", augment="hflip")
    want = augmented(parse_architecture(POOL_FLATTEN), ("hflip",), x)["ntk"]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    assert np.array_equal(kf(x, get="ntk", dtype="float64", augment=["hflip"]), got)
    assert not np.array_equal(kf(x, get="ntk", dtype="float64"), got)
    with pytest.raises(ConfigError) as e:
        kf(x, augment="rot90")
    assert str(e.value) == ("augment: 'rot90' is not an augmentation; expected hflip, vflip, "
                            "a list of them, or none")
