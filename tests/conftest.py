"""Shared test setup: strict JAX settings, the reference fixtures, small helpers.

Strict JAX settings, for the kernel tests (``test_kernels_*.py``) only -- other
modules exercise code that is not written for them -- applied around each test:

* ``jax_numpy_dtype_promotion = "strict"``: mixing float32 and float64 arrays
  raises instead of silently upcasting, so a float32 kernel cannot quietly
  compute in float64 (or the reverse). Python scalars stay weakly typed.
* ``jax_debug_nans``: a NaN produced inside any jitted kernel raises at once.

``jax_numpy_rank_promotion = "raise"`` is deliberately NOT set: the engine
broadcasts per-input variances against covariances on purpose.

64-bit mode is not switched on here: a float64 kernel scopes it to its own
computations, and no test builds float64 JAX arrays of its own (the references
are numpy). Test code that runs JAX in either mode (the Monte-Carlo networks)
passes float32 explicitly.

The test process has the CLI's devices (one XLA host device per core, set before
jax starts its backend), so a run made in-process plans what a ``kernelcli``
subprocess plans: a plan's pair batch depends on the device count, and the last
bits of a kernel on the pair batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# The CLI's CPU level (XLA's instruction set, OpenBLAS's kernels), pinned as the CLI pins
# it, before jax and numpy load: runs made in-process then continue in a `kernelcli`
# subprocess, and the reverse.
from kernelcli.kernels._cpu_level import pin

pin()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from kernelcli.config import RunConfig, load_config  # noqa: E402


# The CLI's persistent compilation cache (kernelcli/cli/_setup.py): one folder per test
# session, so subprocess tests share compiled programs but never touch the user's cache.
def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the slow end-to-end tests (marked slow; CI runs them)")


def pytest_collection_modifyitems(config, items):
    """``pytest -q`` is the fast loop; ``--slow`` (CI, the README's set-up) runs all."""
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    import os
    import tempfile

    from kernelcli.run import configure_host_devices

    configure_host_devices()  # before the first jax call starts the backend
    if "KERNELCLI_CACHE_DIR" not in os.environ:
        os.environ["KERNELCLI_CACHE_DIR"] = tempfile.mkdtemp(prefix="kernelcli-test-cache-")
        config._kernelcli_cache_dir = os.environ["KERNELCLI_CACHE_DIR"]  # ours to remove
    # the CLI's own cache set-up, so in-process tests compile as the CLI does
    from kernelcli import enable_compile_cache

    folder = enable_compile_cache()
    if folder is not None:  # processes Ray starts from a test find it too (and the native library)
        os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(folder))


def pytest_unconfigure(config):
    """The session's compilation cache goes with the process that made it (the xdist
    controller; its workers inherit the folder through the environment)."""
    import shutil

    folder = getattr(config, "_kernelcli_cache_dir", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


FIXTURES_DIR = Path(__file__).parent / "fixtures"
FIXTURE_CASES = tuple(sorted(p.stem for p in FIXTURES_DIR.glob("*.yaml")))
# The fast loop's reference cases: one or two of each family (rows, images, sequences,
# volumes; rectangular; pools, local and transposed convolutions, branches, elementwise
# maps, the standard parameterization). Every case runs with --slow (CI).
FAST_CASES = ("fc3", "rect", "erf_net", "standard_param", "residual", "cnn1_gap",
              "cnn1_flatten", "cnn3_flatten", "seq_ncl", "seq_rect", "seq_conv_pool_gap",
              "vol_conv_gap", "cross_1d_local", "parallel_rect", "parallel_concat",
              "spatial_local_diag", "spatial_avg_same_norm", "spatial_transpose",
              "spatial_sum_pool", "elem_gaussian_rect", "elem_hermite_gap")


def one_device() -> list:
    """The first local device, for ``kernel_matrix(..., devices=one_device())`` where a
    test compares kernels computed in-process with each other (not with a CLI run's
    bits): one runner thread, since each of the suite's two workers already has a core
    (the cpu engine compiles a program once whatever the device count:
    ``run._devices.compute_streams``; before it did, this also halved compilations)."""
    return jax.local_devices()[:1]


def fast_subset(names):
    """``names`` as test parameters, those outside ``FAST_CASES`` marked slow."""
    return [n if n in FAST_CASES else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.fixture(autouse=True)
def _strict_jax(request):
    if not request.node.path.name.startswith("test_kernels_"):
        yield
        return
    with jax.numpy_dtype_promotion("strict"), jax.debug_nans(True):
        yield


@dataclass(frozen=True)
class FixtureCase:
    """One reference case: its validated config, inputs and neural-tangents kernels."""

    name: str
    config: RunConfig
    x1: np.ndarray
    x2: Optional[np.ndarray]
    nngp: np.ndarray
    ntk: np.ndarray

    @property
    def symmetric(self) -> bool:
        return self.x2 is None

    def expected(self, kind: str) -> np.ndarray:
        return {"nngp": self.nngp, "ntk": self.ntk}[kind]


def load_case(name: str, fixtures_dir: Path = FIXTURES_DIR) -> FixtureCase:
    """Load ``<name>.yaml`` with ``load_config`` and its arrays from the data it names."""
    config = load_config(fixtures_dir / f"{name}.yaml")
    data = config.data
    assert data.limit is None, "fixtures use every row"

    def channels_last(x):  # what a channels-first layout (NCL, NCHW, ...) reads as
        return x if data.layout.endswith("C") else np.moveaxis(x, 1, -1)

    with np.load(data.x1) as f:
        x1 = channels_last(np.asarray(f[data.key or "x1"], dtype=np.float64))
    x2 = None
    if data.x2 is not None:
        with np.load(data.x2) as f:
            x2 = channels_last(np.asarray(f[data.x2_key], dtype=np.float64))
    with np.load(fixtures_dir / f"{name}.npz") as f:
        nngp = np.asarray(f["nngp"], dtype=np.float64)
        ntk = np.asarray(f["ntk"], dtype=np.float64)
    return FixtureCase(name, config, x1, x2, nngp, ntk)


def built_once(tmp_path_factory, name: str, build) -> Path:
    """A folder ``build(path)`` fills once per test session however many pytest-xdist
    workers ask for it: the first builds it under a lock in the workers' shared base
    folder, the others wait and reuse it. Tests read it and copy what they change."""
    import fcntl
    import os
    import shutil

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the base folder all workers' folders are made in
    path = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / ".built").exists():
            shutil.rmtree(path, ignore_errors=True)  # a build that failed half way
            path.mkdir()
            build(path)
            (path / ".built").touch()
    return path


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES_DIR


class ReferenceKernels:
    """Each reference case and its kernels by the cpu engine (``build_kernel_fn`` then
    ``kernel_matrix``, both kinds), made once per test session: the fixture tests and the
    engine tests compare the same matrices, each compiled once per case and dtype.
    Computed under the kernel tests' strict JAX settings, whichever module asks first,
    and shared with the other pytest-xdist workers through an ``.npz`` in their common
    folder (:func:`built_once`), so a worker loads what the other computed."""

    KINDS = ("nngp", "ntk")

    def __init__(self, tmp_path_factory):
        self._tmp = tmp_path_factory
        self._cases: dict = {}
        self._kernels: dict = {}

    def case(self, name: str) -> FixtureCase:
        if name not in self._cases:
            self._cases[name] = load_case(name)
        return self._cases[name]

    def __call__(self, name: str, dtype: str) -> dict:
        """``{kind: matrix}`` of case ``name`` in ``dtype``; the caller must not modify them."""
        if (name, dtype) not in self._kernels:
            folder = built_once(self._tmp, f"reference-{name}-{dtype}",
                                lambda path: np.savez(path / "k.npz", **self._compute(name, dtype)))
            with np.load(folder / "k.npz", allow_pickle=False) as f:
                out = {kind: f[kind] for kind in self.KINDS}
            for kind in self.KINDS:
                assert out[kind].dtype == np.dtype(dtype), (kind, out[kind].dtype)
            self._kernels[name, dtype] = out
        return self._kernels[name, dtype]

    def _compute(self, name: str, dtype: str) -> dict:
        from kernelcli.config import check_architecture
        from kernelcli.kernels import build_kernel_fn
        from kernelcli.run import kernel_matrix

        c = self.case(name)
        arch = c.config.architecture
        with jax.numpy_dtype_promotion("strict"), jax.debug_nans(True):
            check_architecture(arch, c.x1.shape[1:])
            kfn = build_kernel_fn(arch, c.x1.shape[1:], self.KINDS, dtype, engine="cpu")
            # compared with tolerances only (neural-tangents, the accelerator engine, exact
            # values), never with a CLI run's bits: one device, each program compiled once
            return kernel_matrix(kfn, c.x1, c.x2, devices=one_device())


@pytest.fixture(scope="session")
def reference_kernels(tmp_path_factory) -> ReferenceKernels:
    return ReferenceKernels(tmp_path_factory)


@pytest.fixture
def keep_process_state(monkeypatch):
    """The CLI's group sets XLA_FLAGS and a SIGTERM handler; keep neither after a test.
    A float64 run must leave JAX's process-wide 64-bit switch as it found it: checked
    after every test that uses this (the modules that drive the CLI in-process)."""
    import os
    import signal

    import jax

    x64 = jax.config.jax_enable_x64
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)
    assert jax.config.jax_enable_x64 == x64, "jax_enable_x64 changed for the whole process"
