"""The native engine (``compute.engine: native``): the cpu engine with the pair pass's
convolution + ABReLU-family nonlinearity on full covariances (and the global average
pool after them), and runs of 3 x 3 SAME blocks on spatial diagonals, as C++ custom
calls.
It gives the cpu engine's kernels to rounding (1e-12 in float64, 1e-5 in float32, as the
two engines of ``test_engine_plans`` agree), the cpu engine's bits where the tail does not
apply, and it is refused (exit 2) where it cannot be built or run."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kernelcli
from conftest import load_case
from helpers_cli import cli_env, run_cli
from kernelcli.config import check_architecture
from kernelcli.errors import ConfigError
from kernelcli.kernels import (
    _native,  # its custom calls, spied on and called alone
    build_kernel_fn,
    resolve_engine,
)
from kernelcli.run import kernel_matrix

KINDS = ("nngp", "ntk")
AGREE = {"float64": 1e-12, "float32": 1e-5}

pytestmark = pytest.mark.skipif(_native.unavailable() is not None,
                                reason=f"the native engine: {_native.unavailable()}")


CONV3 = {"conv": {"filter": [3, 3]}}


def _net(conv=None, act="relu", param="ntk", depth=1):
    conv = {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": 1.7, "b_std": 0.1,
                     **(conv or {})}}
    return {"layers": [conv, act] * depth + ["global_avg_pool",
                                             {"dense": {"W_std": 1.2, "b_std": 0.3}}],
            "parameterization": param}


NETS = {
    "seed": _net(),
    "valid": _net({"padding": "VALID"}),
    "filter_5x3": _net({"filter": [5, 3]}),
    "filter_1x1": _net({"filter": [1, 1]}),
    "no_bias": _net({"b_std": None}),
    "leaky_relu": _net(act={"leaky_relu": {"alpha": 0.1}}),
    "abs": _net(act="abs"),
    "standard": _net(param="standard"),
    "standard_no_bias": _net({"b_std": None}, param="standard"),
    "depth_3": _net(depth=3),  # a run of blocks (native layers in a loop), then the tail
    # the chain with its own parameters per layer, after a native 1 x 1 layer (whose
    # output NTK the chain reads)
    "mixed_chain": {"layers": [{"conv": {"filter": [3, 3], "W_std": 1.7, "b_std": 0.1}}, "relu",
                               {"conv": {"filter": [3, 3], "W_std": 1.1, "b_std": None}},
                               {"leaky_relu": {"alpha": 0.3}},
                               {"conv": {"filter": [3, 3], "W_std": 2.0, "b_std": 0.5}}, "abs",
                               "global_avg_pool", "dense"]},
    "after_1x1": {"layers": [{"conv": {"filter": [1, 1], "width": 3}}, "relu",
                             {"conv": {"filter": [3, 3]}}, "relu", {"conv": {"filter": [3, 3]}},
                             "relu", "global_avg_pool", "dense"],
                  "parameterization": "standard"},
    # chains ending in a 2 x 2 pool of stride 2 (an odd size loses its last row), as
    # Myrtle's networks have them
    "myrtle_like": {"layers": [{"conv": {"filter": [3, 3]}}, "relu", {"conv": {"filter": [3, 3]}},
                               {"leaky_relu": {"alpha": 0.2}}, {"avg_pool": {"window": [2, 2]}},
                               {"conv": {"filter": [3, 3], "W_std": 1.3}}, "relu",
                               {"avg_pool": {"window": [2, 2]}}, "flatten", "dense"]},
    # diagonal chains: 3 x 3 SAME blocks on spatial diagonals (no pooling after them),
    # with their own parameters per layer; after a 2 x 2 pool; after a block the chain
    # does not take (a 5 x 5 filter), whose output NTK it reads
    "flatten": {"layers": [{"conv": {"filter": [3, 3], "W_std": 1.7, "b_std": 0.1}}, "relu",
                           {"conv": {"filter": [3, 3], "W_std": 1.1, "b_std": None}},
                           {"leaky_relu": {"alpha": 0.3}}, "flatten",
                           {"dense": {"W_std": 1.2, "b_std": 0.3}}]},
    "flatten_standard": {"layers": [CONV3, "abs", CONV3, "relu", "flatten", "dense"],
                         "parameterization": "standard"},
    "pool_then_diagonal": {"layers": [CONV3, "relu", {"avg_pool": {"window": [2, 2]}},
                                      CONV3, "relu", {"conv": {"filter": [3, 3],
                                                               "W_std": 2.0}}, "abs",
                                      "flatten", "dense"]},
    "after_5x5": {"layers": [{"conv": {"filter": [5, 5], "width": 3}}, "relu", CONV3, "relu",
                             "flatten", "dense"]},
    # native layers (their full output covariances) before another pool
    "layers_then_avg_pool": {"layers": [{"conv": {"filter": [3, 3], "padding": "VALID"}},
                                        "relu", {"conv": {"filter": [3, 3]}},
                                        {"leaky_relu": {"alpha": 0.2}},
                                        {"avg_pool": {"window": [2, 2]}}, "flatten",
                                        "dense"]},
}


def _agree(a, b, dtype, label):
    for kind, x, y in zip(KINDS, a, b):
        err = float(np.max(np.abs(x - y)) / np.max(np.abs(x)))
        assert err <= AGREE[dtype], f"{label} {kind}: rel diff {err:.2e}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(NETS))
def test_the_native_engine_gives_the_cpu_engines_kernels(name, dtype):
    x = np.random.default_rng(3).standard_normal((6, 7, 5, 3))
    x2 = np.random.default_rng(4).standard_normal((4, 7, 5, 3))
    kfn = kernelcli.kernel_fn(NETS[name])
    for args in ((x, None), (x, x2)):
        cpu = kfn(*args, KINDS, dtype=dtype, engine="cpu")
        native = kfn(*args, KINDS, dtype=dtype, engine="native")
        assert not all(np.array_equal(a, b) for a, b in zip(cpu, native))  # it ran
        _agree(cpu, native, dtype, f"{name} {dtype}")
        if args[1] is None:
            for k in native:
                np.testing.assert_array_equal(k, k.T)


# the blocks each custom call runs: chains before a pool, diagonal chains ("diag")
CHAINS = {"depth_3": [3], "mixed_chain": [3], "after_1x1": [2], "myrtle_like": [2, 1],
          "flatten": [("diag", 2)], "pool_then_diagonal": [1, ("diag", 2)],
          "after_5x5": [("diag", 1)]}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_the_chain_runs_its_blocks_in_one_call_from_images_or_a_covariance(name, monkeypatch):
    """Chains of 3 x 3 SAME blocks before the global pool or a 2 x 2 pool, and runs of
    them on spatial diagonals, are one custom call in the pair pass and one in the
    per-input pass (which makes the variances the pair pass reads); a chain's first
    layer makes its input from 3-channel images or reads the covariance (here 2
    channels); and from a covariance they give the cpu engine's kernels (from images: the
    test above)."""
    calls = []

    def spying(real, label, kind=""):
        def spy(state, layers, *args, **kwargs):
            m = len(layers) // 2
            calls.append((label, (kind, m) if kind else m))
            return real(state, layers, *args, **kwargs)
        return spy

    monkeypatch.setattr(_native, "chain", spying(_native.chain, "pairs"))
    monkeypatch.setattr(_native, "self_chain", spying(_native.self_chain, "inputs"))
    monkeypatch.setattr(_native, "diag", spying(_native.diag, "pairs", "diag"))
    monkeypatch.setattr(_native, "self_diag", spying(_native.self_diag, "inputs", "diag"))
    for channels in (3, 2):  # 3: from images, whose kernels the test above compares
        x = np.random.default_rng(6).standard_normal((5, 6, 7, channels))
        x2 = np.random.default_rng(7).standard_normal((3, 6, 7, channels))
        kfn = kernelcli.kernel_fn(NETS[name])
        native = kfn(x, x2, KINDS, dtype="float64", engine="native")
        if channels == 2:
            cpu = kfn(x, x2, KINDS, dtype="float64", engine="cpu")
            _agree(cpu, native, "float64", f"{name} {channels} channels")
    assert set(calls) == {(label, m) for label in ("pairs", "inputs") for m in CHAINS[name]}


@pytest.mark.parametrize("shape", [(1, 1, 2), (1, 5, 1), (2, 9, 3), (4, 1, 2)])
def test_the_diagonal_chain_on_single_rows_columns_and_pixels(shape):
    """The diagonal chain's planes at their smallest: one row, one column, one pixel
    (every window tap but the centre in the zero border)."""
    x = np.random.default_rng(1).standard_normal((5,) + shape)
    kfn = kernelcli.kernel_fn(NETS["flatten_standard"])
    for dtype in ("float32", "float64"):
        _agree(kfn(x, None, KINDS, dtype=dtype, engine="cpu"),
               kfn(x, None, KINDS, dtype=dtype, engine="native"), dtype, f"{shape} {dtype}")


@pytest.mark.parametrize("name", ["seed", "flatten"])
def test_the_nngp_alone_is_the_same_as_with_the_ntk(name):
    x = np.random.default_rng(5).standard_normal((5, 6, 6, 2))
    kfn = kernelcli.kernel_fn(NETS[name])
    both = kfn(x, None, KINDS, dtype="float64", engine="native")
    alone = kfn(x, None, "nngp", dtype="float64", engine="native")
    np.testing.assert_array_equal(alone, both[0])


@pytest.mark.parametrize("name", ["cnn1_gap", "cnn3_gap", "residual", "standard_param",
                                  "cnn1_flatten", "cnn3_flatten"])
def test_the_native_engine_on_the_fixtures(name, reference_kernels):
    c = load_case(name)
    arch = c.config.architecture
    check_architecture(arch, c.x1.shape[1:])
    native = build_kernel_fn(arch, c.x1.shape[1:], KINDS, "float64", engine="native")
    out = kernel_matrix(native, c.x1, c.x2)
    ref = reference_kernels(name, "float64")
    _agree([np.asarray(ref[k]) for k in KINDS], [out[k] for k in KINDS], "float64", name)
    if c.x2 is None:  # symmetric and positive semi-definite
        for k in KINDS:
            assert np.min(np.linalg.eigvalsh(out[k])) > -1e-10 * np.max(np.abs(out[k]))


def test_without_a_custom_call_the_native_engine_is_the_cpu_engine_bit_for_bit():
    c = load_case("erf_net")  # 3 x 3 SAME blocks, but erf is not ABReLU's family
    arch = c.config.architecture
    check_architecture(arch, c.x1.shape[1:])
    native = build_kernel_fn(arch, c.x1.shape[1:], KINDS, "float64", engine="native")
    out = kernel_matrix(native, c.x1, c.x2)
    cpu = kernel_matrix(build_kernel_fn(arch, c.x1.shape[1:], KINDS, "float64", engine="cpu"),
                        c.x1, c.x2)
    for k in KINDS:
        np.testing.assert_array_equal(out[k], cpu[k])


def flatten_fixture(**engine):
    """The ``cnn3_flatten`` fixture's float64 kernels by the engine ``engine`` names."""
    c = load_case("cnn3_flatten")
    arch = c.config.architecture
    check_architecture(arch, c.x1.shape[1:])
    return kernel_matrix(build_kernel_fn(arch, c.x1.shape[1:], KINDS, "float64", **engine),
                         c.x1, c.x2)


def test_revision_1_takes_no_diagonal_chain_and_gives_its_runs_bits():
    """A native run started before the diagonal chain (revision 1) resumes with that
    revision's bits: its flatten network's blocks are the cpu engine's, bit for bit."""
    kernels = flatten_fixture
    cpu, old = kernels(engine="cpu"), kernels(engine="native", native_revision=1)
    new = kernels(engine="native")
    for k in KINDS:
        np.testing.assert_array_equal(old[k], cpu[k])
        assert not np.array_equal(new[k], cpu[k])


def test_from_revision_3_the_diagonal_chain_makes_the_input_diagonal_from_the_images(
        monkeypatch):
    """Revision 3's diagonal chain makes a flatten network's input diagonal from the two
    images (in the pair pass, rows of the inputs' tables, as it reads the roots); a run
    of revision 2 keeps its bits: the chain reads the diagonal XLA made. Both give the
    cpu engine's kernels, and their own bits."""
    made = []
    real = _native._diag_call

    def spy(state, layers, standard, tables, images=None):
        made.append(("inputs" if tables is None else "pairs", images is not None))
        return real(state, layers, standard, tables, images)

    monkeypatch.setattr(_native, "_diag_call", spy)
    kernels = flatten_fixture
    cpu = kernels(engine="cpu")
    runs = {}
    for revision in (2, 3):
        made.clear()
        runs[revision] = kernels(engine="native", native_revision=revision)
        assert set(made) == {(side, revision == 3) for side in ("inputs", "pairs")}
        _agree([cpu[k] for k in KINDS], [runs[revision][k] for k in KINDS], "float64",
               f"revision {revision}")
    assert not all(np.array_equal(runs[2][k], runs[3][k]) for k in KINDS)


def test_the_diagonal_chain_refuses_rows_outside_its_tables():
    """The pair pass's call reads each pair's rows of the tables it is given (the roots,
    and the images where it makes the input's diagonal); a row outside them is an error,
    never a read past their end."""
    import jax
    import jax.numpy as jnp

    from kernelcli.config import Conv, Relu
    from kernelcli.kernels._state import State  # a state made here, fed to one call

    layers = [Conv(filter=(3, 3), strides=(1, 1)), Relu()]
    state = State(nngp=jnp.ones((2, 4, 5)), ntk=0.0, full=False, spatial=True, channels=2)
    roots = ([jnp.ones((3, 4, 5))], [jnp.ones((4, 4, 5))])
    images = (jnp.ones((3, 4, 5, 2)), jnp.ones((3, 4, 5, 2)))

    def run(rows1, rows2, raw):
        rows = (jnp.asarray(rows1, jnp.int32), jnp.asarray(rows2, jnp.int32))
        got = _native.diag(state, layers, (*roots, *rows, images), True, raw)
        return np.asarray(jax.block_until_ready(got.nngp))

    np.testing.assert_array_equal(run([0, 2], [1, 3], False), run([2, 0], [3, 1], False))
    assert np.all(np.isfinite(run([0, 2], [1, 2], True)))
    for rows1, rows2, raw in (([0, 3], [0, 0], False), ([0, 0], [4, 0], False),
                              ([-1, 0], [0, 0], False), ([0, 0], [0, 3], True)):
        with pytest.raises(Exception, match="kernelcli diag: inconsistent shapes"):
            run(rows1, rows2, raw)


def test_native_is_resolved_on_cpus_only():
    assert resolve_engine("native", "cpu") == "native"
    with pytest.raises(ConfigError) as info:
        resolve_engine("native", "gpu")
    assert info.value.exit_code == 2
    assert str(info.value) == ("compute.engine: 'native' runs on CPUs only; the devices "
                               "here are gpu: use auto, cpu or accelerator")


def test_without_a_compiler_the_installed_library_computes(tmp_path):
    """The library is the package's: a machine (or a PATH) without any C++ compiler
    computes with the native engine, and auto takes it there and says why."""
    import yaml

    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((6, 4, 4, 2)))
    empty = tmp_path / "bin"
    empty.mkdir()
    for engine in ("native", "auto"):
        doc = {"name": "n", "data": {"x1": "x.npy"}, "architecture": NETS["seed"],
               "compute": {"engine": engine}, "output": {"run_dir": f"run_{engine}"}}
        (tmp_path / "n.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        proc = run_cli("compute", tmp_path / "n.yaml", "-v", cwd=tmp_path,
                       env=cli_env(PATH=str(empty), KERNELCLI_CACHE_DIR="off"))
        assert proc.returncode == 0, proc.stderr
        recorded = json.loads((tmp_path / f"run_{engine}" / "manifest.json").read_text())[
            "engine"]
        lib = _native.library()
        assert (recorded["name"], recorded["native_library"]) == ("native", lib.identity)
        how = ("compute.engine: native" if engine == "native"
               else "auto: it has custom calls for this network")
        assert (f"  engine: native ({how}; library {lib.identity}, {lib.origin})"
                in proc.stderr.splitlines())


@pytest.mark.usefixtures("keep_process_state")
@pytest.mark.parametrize("name", ["seed", "flatten"])  # chains; the diagonal chain
def test_a_stopped_native_run_resumes_to_the_uninterrupted_runs_bits(tmp_path, name):
    import signal

    import h5py
    import yaml

    from kernelcli.errors import Interrupted
    from kernelcli.run import Stop, compute, resume

    np.save(tmp_path / "x.npy", np.random.default_rng(1).standard_normal((40, 8, 8, 3)))
    runs = {}
    for run in ("whole", "stopped"):
        doc = {"name": run, "data": {"x1": "x.npy"}, "architecture": NETS[name],
               "compute": {"engine": "native", "block": 8},
               "output": {"run_dir": f"run_{run}"}}
        cfg = tmp_path / f"{run}.yaml"
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
        runs[run] = (cfg, tmp_path / f"run_{run}")
    compute(runs["whole"][0])
    stop = Stop()

    def progress(p):
        if p.blocks_done >= 2:
            stop.request(signal.SIGTERM)

    with pytest.raises(Interrupted):
        compute(runs["stopped"][0], progress=progress, stop=stop)
    if name == "seed":  # by the CLI, where no compiler is: the installed library
        empty = tmp_path / "bin"
        empty.mkdir()
        proc = run_cli("resume", runs["stopped"][1], cwd=tmp_path,
                       env=cli_env(PATH=str(empty), KERNELCLI_CACHE_DIR="off"))
        assert proc.returncode == 0, proc.stderr
    else:
        resume(runs["stopped"][1])
    with h5py.File(runs["whole"][1] / "kernels.h5") as a, \
            h5py.File(runs["stopped"][1] / "kernels.h5") as b:
        for kind in KINDS:
            np.testing.assert_array_equal(a[kind][...], b[kind][...])
