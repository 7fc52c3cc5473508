"""The execution engines of the kernels (``compute.engine``): the key, its resolution,
and the accelerator engine against the cpu engine on the reference fixtures."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FAST_CASES, FIXTURE_CASES, load_case
from kernelcli.config import check_architecture, load_config
from kernelcli.errors import ConfigError

# native_helps: auto's rule, checked even where the library does not load
from kernelcli.kernels import (
    NATIVE_REVISION,
    _engines,
    build_kernel_fn,
    native_library,
    native_unavailable,
    resolve_engine,
)
from kernelcli.kernels._linear_spatial import (
    GRAM_CHANNELS,  # where the cpu engine's Gram path starts
)
from kernelcli.pipeline import config_fingerprint
from kernelcli.run import kernel_matrix

KINDS = ("nngp", "ntk")


def write_cfg(folder, compute=None):
    np.save(folder / "x.npy", np.random.default_rng(0).standard_normal((6, 4, 4, 2)))
    doc = {"name": "e", "data": {"x1": "x.npy"},
           "architecture": {"layers": [{"conv": {"filter": [3, 3]}}, "relu",
                                       "global_avg_pool"]},
           "compute": dict(compute or {}), "output": {"run_dir": "run"}}
    path = folder / "e.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# -- the key and its resolution ---------------------------------------------------------

def test_engine_defaults_to_auto_and_is_read_case_insensitively(tmp_path):
    assert load_config(write_cfg(tmp_path)).compute.engine == "auto"
    cfg = load_config(write_cfg(tmp_path, {"engine": "Accelerator"}))
    assert cfg.compute.engine == "accelerator"


@pytest.mark.parametrize("value, shown", [("gpu", "'gpu'"), (3, "3")])
def test_a_bad_engine_is_a_config_error(tmp_path, value, shown):
    with pytest.raises(ConfigError) as info:
        load_config(write_cfg(tmp_path, {"engine": value}))
    assert info.value.exit_code == 2
    assert str(info.value).startswith(
        f"e.yaml: compute.engine: {shown} is not an engine; expected one of auto, cpu, "
        f"native, accelerator")


def test_the_engine_does_not_change_the_configuration_fingerprint(tmp_path):
    prints = {config_fingerprint(load_config(write_cfg(tmp_path, {"engine": e})))
              for e in ("auto", "cpu", "accelerator")}
    assert len(prints) == 1


@pytest.mark.parametrize("name, platform, engine", [
    ("auto", "cpu", "cpu"), ("auto", "gpu", "accelerator"), ("auto", "cuda", "accelerator"),
    ("auto", "tpu", "accelerator"), ("cpu", "gpu", "cpu"), ("accelerator", "cpu", "accelerator"),
])
def test_resolve_engine(name, platform, engine):
    assert resolve_engine(name, platform) == engine


CONV3 = {"conv": {"filter": [3, 3], "padding": "SAME"}}
GAP = [CONV3, "relu", "global_avg_pool"]


@pytest.mark.parametrize("layers, shape, helps", [
    (GAP, (6, 6, 2), True),
    ([{"conv": {"filter": [3, 3], "padding": "VALID"}}, {"abrelu": {"a": -0.5, "b": 1.0}},
      "global_avg_pool"], (6, 6, 2), True),
    ([CONV3, "relu", "flatten", {"dense": {}}], (6, 6, 2), True),  # the diagonal chain
    # diagonals only, and not a 3 x 3 SAME block: no custom call applies
    ([{"conv": {"filter": [5, 5], "padding": "SAME"}}, "relu", "flatten", {"dense": {}}],
     (6, 6, 2), False),
    ([{"conv": {"filter": [3, 3], "padding": "VALID"}}, "relu", "flatten", {"dense": {}}],
     (6, 6, 2), False),
    ([CONV3, "erf", "global_avg_pool"], (6, 6, 2), False),  # not ABReLU's family
    ([{"conv": {"filter": [3, 3], "strides": [2, 2]}}, "relu", "global_avg_pool"], (6, 6, 2),
     False),
    ([{"conv": {"filter": [3], "padding": "SAME"}}, "relu", "global_avg_pool"], (6, 2), False),
    ([{"dense": {}}, "relu", {"dense": {}}], (5,), False),
])
def test_auto_is_native_on_cpus_where_it_helps(layers, shape, helps):
    arch = arch_of(layers)
    assert _engines.native_helps(arch.layers, shape) is helps
    native = helps and native_unavailable() is None
    assert resolve_engine("auto", "cpu", arch.layers, shape) == ("native" if native else "cpu")
    assert resolve_engine("auto", "gpu", arch.layers, shape) == "accelerator"


def stored(plan_keys: dict):
    """What a resume keeps of a run whose manifest is of format 2, the engine's keys in
    its plan (``engine``, ``native``, ``native_library``): as the store reads it, with
    the CPU level this process computes at (what format 2 did not record, and a resume
    refuses to guess: tests/run/test_cpu_level.py)."""
    import dataclasses

    from kernelcli.kernels import cpu_level_in_force
    from kernelcli.store import StoredCompute, engine_of

    engine = engine_of({"format": 2, "plan": plan_keys}, "run")
    return StoredCompute(block=6, pair_batch=4, chunk=None,
                         engine=dataclasses.replace(engine, cpu_level=cpu_level_in_force()))


def test_a_run_records_its_engine_and_a_resume_keeps_the_stored_one(tmp_path):
    from kernelcli.pipeline import prepare

    def engine(compute, plan_keys=None):
        with prepare(load_config(write_cfg(tmp_path, compute)),
                     stored=None if plan_keys is None else stored(plan_keys)) as job:
            return job.kfn.engine.name, job.manifest()["engine"]["name"]

    auto = "cpu" if native_unavailable() else "native"  # auto on CPU devices, conv + relu
    assert engine({}) == (auto, auto)
    assert engine({"engine": "accelerator"}) == ("accelerator", "accelerator")
    assert engine({"engine": "accelerator"}, {"engine": "cpu"}) == ("cpu", "cpu")
    assert engine({"engine": "cpu"}, {"engine": "accelerator"}) == ("accelerator",
                                                                    "accelerator")
    assert engine({"engine": "accelerator"}, {}) == ("cpu", "cpu")  # a run before the key
    if native_unavailable() is None:
        assert engine({"engine": "native"}) == ("native", "native")
        keys = {"engine": "native", "native_library": native_library().identity}
        assert engine({"engine": "cpu"}, keys) == ("native", "native")


@pytest.mark.skipif(native_unavailable() is not None,
                    reason=f"no native engine here to record: {native_unavailable()}")
def test_a_native_run_records_its_revision_and_a_resume_keeps_it(tmp_path):
    """Each revision of the native engine takes more layers into its custom calls (so
    its last bits differ): a run records it (``engine.native_revision``; format 2's
    ``plan.native``, absent in runs before the key, which are revision 1) and a resume
    computes with the run's, or refuses a newer one than this kernelcli has."""
    from kernelcli.errors import RunDirError
    from kernelcli.pipeline import prepare

    def revision(plan_keys=None):
        with prepare(load_config(write_cfg(tmp_path, {"engine": "native"})),
                     stored=None if plan_keys is None else stored(plan_keys)) as job:
            return (job.kfn.engine.native_revision,
                    job.manifest()["engine"].get("native_revision"))

    lib = native_library().identity
    assert revision() == (NATIVE_REVISION, NATIVE_REVISION)
    assert revision({"engine": "native", "native": 2, "native_library": lib}) == (2, 2)
    newer = NATIVE_REVISION + 1
    with pytest.raises(RunDirError, match=re.escape(
            f"the run computes with revision {newer} of the native engine (as its "
            f"manifest.json records), newer than this kernelcli's ({NATIVE_REVISION}); "
            f"continue it with the kernelcli that started it")):
        revision({"engine": "native", "native": newer, "native_library": lib})
    # a run from before runs recorded their library: built for its machine, not this one
    with pytest.raises(RunDirError, match=re.escape(
            "its tiles were computed by a native library built on its own machine before "
            "runs recorded the library's identity in their manifest.json, whose last bits "
            f"no other build reproduces (this kernelcli's "
            f"library is {lib}); continue it with the kernelcli that started it, or start "
            f"it again")):
        revision({"engine": "native", "native": NATIVE_REVISION})


# -- the accelerator engine gives the cpu engine's kernels ----------------------------------

SHARED = ("cnn1_flatten", "cnn1_gap", "cnn3_flatten", "cnn3_gap", "erf_net", "fc3",
          "myrtle5", "rect", "residual", "standard_param")  # ../shared/fixtures' cases
OTHERS = tuple(n for n in FIXTURE_CASES if n not in SHARED)
AGREE = {"float64": 1e-12, "float32": 1e-5}


def both_engines(name: str, dtype: str, reference_kernels):
    """The cpu engine's kernels (made once per session: the fixture tests compare them to
    neural-tangents) and the accelerator engine's."""
    c = reference_kernels.case(name)
    arch = c.config.architecture
    check_architecture(arch, c.x1.shape[1:])
    acc = build_kernel_fn(arch, c.x1.shape[1:], KINDS, dtype, engine="accelerator")
    return [reference_kernels(name, dtype), kernel_matrix(acc, c.x1, c.x2)]


def check_agree(name: str, dtype: str, reference_kernels):
    cpu, acc = both_engines(name, dtype, reference_kernels)
    for kind in KINDS:
        a, b = (np.asarray(m[kind], np.float64) for m in (cpu, acc))
        scale = np.max(np.abs(a))
        parts = {"all": (a, b)}
        if a.shape[0] == a.shape[1]:  # the per-input diagonal, and the pairs off it
            off = ~np.eye(a.shape[0], dtype=bool)
            parts = {"diagonal": (np.diag(a), np.diag(b)), "off-diagonal": (a[off], b[off])}
        for part, (x, y) in parts.items():
            err = float(np.max(np.abs(x - y)) / scale)
            assert err <= AGREE[dtype], f"{name} {dtype} {kind} {part}: rel diff {err:.2e}"


# float64 on every shared case, float32 on the fast loop's (not on the largest two,
# cnn3_gap and myrtle5): an engine's float32 programs are its float64 programs in another
# dtype.
@pytest.mark.parametrize("name, dtype", [
    pytest.param(n, dtype, marks=() if n in FAST_CASES else pytest.mark.slow)
    for n in SHARED for dtype in ("float64", "float32")
    if dtype == "float64" or n in FAST_CASES])
def test_the_accelerator_engine_gives_the_cpu_engines_kernels(name, dtype, reference_kernels):
    check_agree(name, dtype, reference_kernels)


# Every other fixture in float64 only, where the agreement asked is 1e-12: an engine's
# float32 programs are its float64 programs in another dtype, compared on the cases above.
@pytest.mark.slow
@pytest.mark.parametrize("name", OTHERS)
def test_the_accelerator_engine_gives_the_cpu_engines_kernels_on_every_fixture(
        name, reference_kernels):
    check_agree(name, "float64", reference_kernels)


# -- the accelerator engine's compiled structure ------------------------------------------

def arch_of(layers):
    text = yaml.safe_dump({"layers": layers})
    return load_config_text(text)


def load_config_text(architecture_yaml: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="engine-") as name:
        folder = Path(name)
        np.save(folder / "x.npy", np.zeros((2, 6, 6, 2)))
        doc = {"name": "s", "data": {"x1": "x.npy"},
               "architecture": yaml.safe_load(architecture_yaml)}
        (folder / "s.yaml").write_text(yaml.safe_dump(doc))
        return load_config(folder / "s.yaml").architecture


def conv(w_std=1.5):
    return {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": w_std, "b_std": 0.1}}


NO_REPEATS = [conv(1.5), "relu", conv(1.4), "relu", {"avg_pool": {"window": [2, 2]}},
              conv(1.3), "erf", "global_avg_pool", {"dense": {"W_std": 1.0}}]
# the first block takes the input's channels, so the run is of the 4 (5) after it
FOUR_REPEATS = [conv(), "relu"] * 5 + ["global_avg_pool", {"dense": {"W_std": 1.0}}]
DIAGONAL_REPEATS = [conv(), "relu"] * 6 + ["flatten", {"dense": {"W_std": 1.0}}]


def programs(layers, engine: str, n: int = 5, pairs: int = 7):
    """The compiled pairs and stats programs' HLO text, and the lowered pairs program's."""
    import jax
    import jax.numpy as jnp

    kfn = build_kernel_fn(arch_of(layers), (6, 6, 2), KINDS, "float32", engine=engine)

    def spec(shape, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype)

    x = spec((n,) + kfn.input_shape)
    v = tuple(spec((n,) + t) for t in kfn.variance_shapes)
    index = spec((pairs,), jnp.int32)
    lowered = kfn._pairs_jit.lower(x, v, x, v, index, index)
    stats = kfn._stats_jit.lower(x).compile().as_text()
    return kfn, lowered.compile().as_text(), stats, lowered.as_text()


def whiles(hlo: str) -> int:
    return hlo.count(" while(")


@pytest.mark.parametrize("layers, loops", [(NO_REPEATS, 0), (FOUR_REPEATS, 1),
                                           (DIAGONAL_REPEATS, 1)])
def test_the_accelerator_engine_has_no_loops_but_the_layer_loop(layers, loops):
    kfn, pairs, stats, lowered = programs(layers, "accelerator")
    assert kfn.chunk == 1
    for hlo in (pairs, stats):
        assert whiles(hlo) == loops
        assert " conditional(" not in hlo and "case" not in lowered
        if loops:  # m = 4 or 5 layers: the loop runs two layers a step, m // 2 times
            assert '"known_trip_count":{"n":"2"}' in hlo
    # the batch is the pair batch the call was given: whole (P, H, H, W, W) covariances
    shape = "tensor<7x6x6x6x6xf32>" if layers is not DIAGONAL_REPEATS else "tensor<7x6x6xf32>"
    assert shape in lowered


def test_the_cpu_engine_keeps_its_chunk_and_row_loops():
    _, pairs, _, _ = programs(NO_REPEATS, "cpu")
    assert whiles(pairs) >= 3  # the chunk loop, and a row loop per conv + nonlinearity


# -- precision ----------------------------------------------------------------------------

def contractions(text: str):
    return [line for line in text.splitlines()
            if "stablehlo.dot_general" in line or "stablehlo.convolution" in line]


@pytest.mark.parametrize("engine", ["cpu", "accelerator"])
@pytest.mark.parametrize("name", SHARED)
def test_every_contraction_asks_for_full_precision(name, engine):
    import jax
    import jax.numpy as jnp

    c = load_case(name)
    kfn = build_kernel_fn(c.config.architecture, c.x1.shape[1:], KINDS, "float32",
                          engine=engine)

    def spec(shape, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype)

    x = spec((4,) + kfn.input_shape)
    v = tuple(spec((4,) + t) for t in kfn.variance_shapes)
    index = spec((3,), jnp.int32)
    texts = [kfn._pairs_jit.lower(x, v, x, v, index, index).as_text(),
             kfn._stats_jit.lower(x).as_text()]
    if kfn.flat_input:
        texts.append(kfn._grid_jit.lower(x, v, x, v).as_text())
    found = [line for t in texts for line in contractions(t)]
    # a diagonal's input kernel is a sum of products, and so is a full one's from few
    # channels on the cpu engine (kernels/_linear_spatial.channel_gram)
    few = engine == "cpu" and c.x1.shape[-1] <= GRAM_CHANNELS
    if (kfn.full_cov and not few) or kfn.flat_input:
        assert found, f"{name}: no contraction in the programs"  # the input's covariance
    for line in found:
        assert "precision = [HIGHEST, HIGHEST]" in line, line


@pytest.mark.parametrize("layers", [NO_REPEATS, FOUR_REPEATS, DIAGONAL_REPEATS])
def test_both_engines_agree_through_runs_of_repeated_layers(layers):
    x = np.random.default_rng(3).standard_normal((5, 6, 6, 2))
    cpu, acc = (kernel_matrix(build_kernel_fn(arch_of(layers), (6, 6, 2), KINDS, "float64",
                                              engine=e), x) for e in ("cpu", "accelerator"))
    for kind in KINDS:
        err = np.max(np.abs(cpu[kind] - acc[kind])) / np.max(np.abs(cpu[kind]))
        assert err <= AGREE["float64"], (kind, err)


_ACTS = ("relu", "sign", "abs", "erf", "gelu")


@st.composite
def small_networks(draw):
    """Convolutions of filter 1..3 with and without a bias, each followed by a map,
    an optional pool, and a pooled or flattened head: where the self pair's covariance
    and variance must round alike (a 1x1 convolution with a bias before sign was
    1e-9 apart on the accelerator engine)."""
    layers = []
    for _ in range(draw(st.integers(1, 2))):
        k = draw(st.integers(1, 3))
        layers += [{"conv": {"filter": [k, k], "padding": "SAME", "W_std": 1.5,
                             "b_std": draw(st.sampled_from([0.0, 0.3]))}},
                   draw(st.sampled_from(_ACTS))]
        if draw(st.booleans()):
            layers.append({"avg_pool": {"window": [2, 2], "strides": [1, 1],
                                        "padding": "SAME"}})
    layers += [draw(st.sampled_from(["global_avg_pool", "flatten"])), "dense"]
    return layers


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(small_networks())
def test_both_engines_agree_to_1e12_in_float64_on_random_small_networks(layers):
    x = np.random.default_rng(len(layers)).standard_normal((3, 4, 4, 2))
    cpu, acc = (kernel_matrix(build_kernel_fn(arch_of(layers), (4, 4, 2), KINDS, "float64",
                                              engine=e), x) for e in ("cpu", "accelerator"))
    for kind in KINDS:
        err = np.max(np.abs(cpu[kind] - acc[kind])) / np.max(np.abs(cpu[kind]))
        assert err <= AGREE["float64"], (kind, err)
