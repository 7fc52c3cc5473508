"""kernelcli as a Python library: what a notebook needs, in neural-tangents' terms.

* :func:`kernel_fn` -- an architecture (a config's path or YAML text, a mapping in the
  ``architecture:`` form, or a :mod:`kernelcli.stax` network) to a function called like
  neural-tangents' ``kernel_fn(x1, x2, get)``, tiled within a memory budget by the
  route ``kernelcli compute`` takes;
* :func:`open_run` -- a finished (or unfinished) run directory: its kernels without
  loading them whole, labels, configuration and progress.

``kernelcli.compute`` / ``resume`` / ``estimate`` are :mod:`kernelcli.run`'s own,
returning the typed results the CLI prints. Nothing here changes process state: jax
keeps the devices it was started with (call
:func:`kernelcli.run.configure_host_devices` before jax is imported to get one CPU
device per core, as the CLI does), and float64 kernels scope JAX's 64-bit mode.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from ..config import KINDS as _KINDS
from ..errors import ConfigError, DataError, RunDirError


def _architecture_of(architecture):
    """The validated :class:`~kernelcli.config.Architecture` of any accepted form."""
    from ..config import parse_architecture

    if hasattr(architecture, "to_dict") and hasattr(architecture, "to_yaml"):
        return parse_architecture(architecture.to_dict())  # a kernelcli.stax network
    if isinstance(architecture, dict):
        return parse_architecture(architecture.get("architecture", architecture))
    if isinstance(architecture, os.PathLike) or (
            isinstance(architecture, str) and "\n" not in architecture
            and architecture.endswith((".yaml", ".yml"))):
        from ..config import load_config

        return load_config(architecture).architecture
    if isinstance(architecture, str):
        return parse_architecture(architecture)
    raise ConfigError(f"architecture: {type(architecture).__name__} is not accepted; expected "
                      f"a YAML file's path, YAML text, a mapping in the config's "
                      f"`architecture:` form, or a kernelcli.stax network")


def _inputs(name: str, x, dtype) -> np.ndarray:
    _untraced(name, x)
    from ..data import NUMERIC, check_rows, dtype_problem

    a = np.asarray(x)
    problem = dtype_problem(a.dtype)
    if problem is not None:
        raise DataError(f"{name}: an array of shape {a.shape} {problem}; accepted: "
                        f"{NUMERIC[1]}")
    if a.ndim not in (2, 3, 4, 5) or a.shape[0] < 1:
        raise DataError(f"{name}: an array of shape {a.shape} and dtype {a.dtype} is not "
                        f"accepted; expected real numbers of shape (N, H, W, C), (N, L, C), "
                        f"(N, D, H, W, C) (channels last) or (N, D)")
    # the CLI's bounds (data.INPUT_BOUNDS), measured before the cast: an int64 2**62 or
    # a float 1e18 would overflow the kernel's sums of squares in float32
    check_rows(lambda i, j: a[i:j], a.shape[0], a.shape[1:], a.dtype, name,
               f"{name} (an array of shape {a.shape})", dtype=dtype)
    return a.astype(dtype, copy=False)


def _untraced(name: str, x) -> None:
    """Refuse a jax tracer: a call computes tiled, on the host, from concrete values."""
    import jax

    if isinstance(x, jax.core.Tracer):
        raise DataError(f"{name}: a traced value ({type(x).__name__}, inside jax.jit, vmap or "
                        f"grad) is not accepted: a kernel function call is not traceable, as "
                        f"it computes its matrices tiled, on the host; call it outside jit, "
                        f"with arrays of values (its outputs are numpy arrays)")


def _kinds_of(get) -> tuple:
    """``get`` as a tuple of kinds (``'nngp'``, ``'ntk'``, each at most once)."""
    kinds = (get,) if isinstance(get, str) else \
        tuple(get) if isinstance(get, (tuple, list)) else ()
    if not kinds or any(not isinstance(k, str) or k not in _KINDS for k in kinds) \
            or len(set(kinds)) != len(kinds):
        raise ConfigError(f"get: {get!r} is not accepted; expected 'nngp', 'ntk' or a "
                          f"tuple of them, each at most once")
    return kinds


def _devices_of(devices):
    """``devices`` as a list of jax devices, or None (all local ones)."""
    import jax

    if devices is None:
        return None
    listed = list(devices) if isinstance(devices, (list, tuple)) else []
    if not listed or not all(isinstance(d, jax.Device) for d in listed):
        raise ConfigError(f"devices: {devices!r} is not accepted; expected a non-empty list "
                          f"of jax devices (such as jax.local_devices()), or None for all "
                          f"local ones")
    return listed


class KernelFunction:
    """The NNGP/NTK of one architecture: ``kfn(x1, x2=None, get=("nngp", "ntk"))``.

    Args (of a call):
      x1: ``(N1, H, W, C)`` images (NHWC), ``(N1, L, C)`` sequences or
        ``(N1, D, H, W, C)`` volumes (channels last), or ``(N1, D)`` vectors.
      x2: ``(N2, ...)`` of the same example shape; ``None``: ``K(x1, x1)``, computed
        as its lower triangle of blocks and mirrored (exactly symmetric).
      get: ``"nngp"`` or ``"ntk"`` returns that ``(N1, N2)`` numpy array; a tuple of
        them returns a tuple of arrays in that order (neural-tangents' convention).
      dtype: ``"float32"`` or ``"float64"`` (the computation's and the result's).
      memory: bytes per device (an int, or a size such as ``"4GiB"``); ``"auto"``:
        what ``compute.memory: auto`` gives.
      devices: the jax devices to spread the work over (default: all local ones).
      augment: ``None`` (the plain kernel), ``"hflip"``, ``"vflip"`` or a list of them:
        the kernel averaged over that flip group, as ``kernel.augment`` in a config.
      engine: ``"auto"`` (the accelerator engine on a GPU; on CPUs the native engine where
        it helps and a C++ compiler is there, else the cpu engine), ``"cpu"``,
        ``"native"`` or ``"accelerator"``, as ``compute.engine`` in a config.
      stop: a :class:`kernelcli.run.Stop` another thread (or a signal handler of the
        caller's) may request: the call then raises
        :class:`kernelcli.errors.Interrupted` at its next safe point, as ``compute``
        does. Without it, Ctrl-C's ``KeyboardInterrupt`` stops the call.

    With ``readouts`` in the architecture a call returns a dict keyed by each readout's
    body layer count (``after``), each value what the call returns without readouts:
    ``kfn(x, get="nngp")[3]`` is the NNGP of the first 3 body layers and the head.
    """

    def __init__(self, architecture):
        self.architecture = _architecture_of(architecture)
        self._built: dict = {}
        # The modules a call computes with, loaded with the function (neural-tangents
        # loads its own at import; ``import kernelcli`` stays light for the CLI): 0.06 s
        # that a first call on 8 images otherwise paid (measured by bench/first_call.py).
        for module in ("kernels", "pipeline"):
            importlib.import_module(f"kernelcli.{module}")

    def __repr__(self) -> str:
        return f"KernelFunction({len(self.architecture.layers)} layers, " \
               f"{self.architecture.parameterization})"

    def __call__(self, x1, x2=None, get: Union[str, Sequence[str]] = _KINDS, *,
                 dtype: str = "float32", memory: Union[int, str] = "auto", devices=None,
                 augment: Union[None, str, Sequence[str]] = None, engine: str = "auto",
                 stop=None):
        from ..config import parse_augment, read_dtype, read_engine, read_memory
        from ..run import kernel_matrix

        # read as a config's kernel.dtype and compute.engine are, naming the argument
        dtype = read_dtype(dtype, "dtype")
        engine = read_engine(engine, "engine")
        single = isinstance(get, str)
        kinds = _kinds_of(get)
        devices = _devices_of(devices)
        a1 = _inputs("x1", x1, dtype)
        a2 = None if x2 is None else _inputs("x2", x2, dtype)
        if a2 is not None and a2.shape[1:] != a1.shape[1:]:
            raise DataError(f"x2: examples of shape {a2.shape[1:]} do not match x1's "
                            f"{a1.shape[1:]}")
        from ..run import check_output

        readouts = self.architecture.readouts
        outputs = len(kinds) * (1 if readouts is None else len(readouts.after))
        # before anything is built: the matrices are returned whole, in host memory
        check_output(a1.shape[0], a1.shape[0] if a2 is None else a2.shape[0],
                     range(outputs), dtype)
        budget = read_memory(memory, "memory")  # as compute.memory: None is auto
        # read as a config's kernel.augment is: both accept (and refuse) the same values
        flips = parse_augment(list(augment) if isinstance(augment, tuple) else augment,
                              "augment")
        n1, n2 = a1.shape[0], None if a2 is None else a2.shape[0]
        pairs = n1 * (n1 + 1) // 2 if n2 is None else n1 * n2
        kfn = self._kernel(a1.shape[1:], tuple(k for k in _KINDS if k in kinds), dtype, flips,
                           _resolved(engine, devices, self.architecture.layers, a1.shape[1:],
                                     stop), pairs)
        out = kernel_matrix(kfn, a1, a2, memory=budget, devices=devices, stop=stop)

        def pick(suffix=""):
            arrays = tuple(out[k + suffix] for k in kinds)
            return arrays[0] if single else arrays

        if readouts is None:
            return pick()
        return {after: pick(f"_d{after}") for after in readouts.after}

    def _kernel(self, shape, kinds, dtype, augment=(), engine="cpu", pairs=None):
        """The kernel function of these inputs; for a call of ``pairs`` pairs whose work
        is small against compiling it (``_xla.QUICK_WORK``), its quick twin (programs at
        XLA's lowest optimisation level: neural-tangents' WideResNet on 3 images, whole
        process, 16 s to 9 s), kept beside it."""
        key = (tuple(shape), kinds, dtype, augment, engine)
        if key not in self._built:
            from ..config import check_architecture
            from ..kernels import build_kernel_fn

            check_architecture(self.architecture, tuple(shape))
            self._built[key] = build_kernel_fn(self.architecture, shape, kinds, dtype, augment,
                                               engine)
        from ..kernels import QUICK_WORK

        kfn = self._built[key]
        if pairs is None or kfn.work(pairs) > QUICK_WORK:
            return kfn
        if key + ("quick",) not in self._built:
            self._built[key + ("quick",)] = kfn.quick()
        return self._built[key + ("quick",)]


def _resolved(engine: str, devices, layers, input_shape, stop=None) -> str:
    """``engine`` resolved for the platform of the devices the call computes on and
    the network (``layers`` on inputs of ``input_shape``)."""
    import jax

    from ..kernels import resolve_engine

    platform = (list(devices)[0] if devices else jax.local_devices()[0]).platform
    return resolve_engine(engine, platform, layers, input_shape, stop)


def kernel_fn(architecture) -> KernelFunction:
    """The kernel function of ``architecture``: a config's path (its ``architecture:``),
    YAML text (a whole config or its ``architecture:`` section), a mapping in that form,
    or a :mod:`kernelcli.stax` network. See :class:`KernelFunction` for the call."""
    return KernelFunction(architecture)


class Run:
    """A run directory, read only. ``run["ntk"]`` (or :meth:`kernel`) is a dataset of
    ``kernels.h5`` as a read-only ``numpy.memmap`` where the file stores it contiguously
    (always, for kernelcli's results), so ``run["ntk"][1000:2000]`` reads that band
    only; ``names`` lists the datasets (``nngp``, ``ntk``, and with a test set
    ``nngp_test``, ... and the test diagonals). A run with readouts holds ``nngp_d3``,
    ``ntk_d3``, ``nngp_d3_test``, ... instead; ``run.readout(3)`` gives them under
    their plain names (``run.readout(3)["nngp"]``) and ``readouts`` the counts.

    ``verify`` (default): before the first kernel is handed out, every dataset of
    ``kernels.h5`` is read back against its checksum once, so a flipped bit is an
    error, never a value; ``verify=False`` checks identity and structure only (the
    caller takes on checking, e.g. with :meth:`verify`)."""

    def __init__(self, run_dir, verify: bool = True):
        from ..run import load_run_config
        from ..store import RunStore

        self.run_dir = Path(run_dir)
        self._store = RunStore.open(self.run_dir)
        _, self.config = load_run_config(self.run_dir)
        self._names: Optional[tuple] = None
        self._checksums = bool(verify)  # still to read every byte against its checksum

    def __repr__(self) -> str:
        state = "finished" if self.finished else "unfinished"
        return f"Run({str(self.run_dir)!r}, {self.config.name!r}, {state})"

    @property
    def finished(self) -> bool:
        return self._store.finished

    def status(self):
        """The run's :class:`~kernelcli.run.StatusReport` (what ``kernelcli status`` says)."""
        from ..run import status

        return status(self.run_dir)

    @property
    def labels(self) -> dict:
        """The stored labels (``labels``, ``test_labels``), or ``{}`` when none."""
        return self._store.read_labels()

    def _result(self) -> Path:
        if not self.finished:
            raise RunDirError(f"{self.run_dir} has no kernels.h5 yet (the run is not "
                              f"finished); continue it with kernelcli.resume({str(self.run_dir)!r})")
        problem = self._store.result_problem(full=self._checksums)
        if problem is None:
            self._checksums = False  # read back whole once; the memmaps read the same file
        if problem is not None:
            raise RunDirError(f"{self._store.result_path}: {problem}; run `kernelcli verify "
                              f"{self.run_dir}` for details")
        return self._store.result_path

    @property
    def names(self) -> tuple:
        if self._names is None:
            self._result()  # finished, and this run's
            self._names = self._store.result().names()
        return self._names

    def kernel(self, name: str) -> np.ndarray:
        """The dataset ``name`` of ``kernels.h5``, memory-mapped (nothing read yet)."""
        path = self._result()
        return self._store.result().memmap(name, lambda names: ConfigError(
            f"{name!r} is not a dataset of {path}; it holds {names}"))

    def __getitem__(self, name: str) -> np.ndarray:
        return self.kernel(name)

    @property
    def readouts(self) -> tuple:
        """The body layer counts read out (``architecture.readouts.after``); ``()``
        when the architecture has no readouts."""
        ro = self.config.architecture.readouts
        return () if ro is None else tuple(ro.after)

    def readout(self, after: int) -> dict:
        """The datasets of the readout after ``after`` body layers under their plain
        names: ``{"nngp": ..., "ntk": ..., "nngp_test": ..., ...}`` (memory-mapped)."""
        if after not in self.readouts:
            raise ConfigError(f"readout: {after!r} is not one of this run's readouts; "
                              f"expected one of {list(self.readouts)}")
        out = {}
        for kind in _KINDS:
            stem = f"{kind}_d{after}"
            for name in self.names:
                if name.startswith(stem) and name[len(stem):] in ("", "_test", "_test_diag"):
                    out[kind + name[len(stem):]] = self.kernel(name)
        return out

    def verify(self):
        """Read every byte back against its checksum: :class:`~kernelcli.run.VerifyReport`."""
        from ..run import verify

        return verify(self.run_dir)


def open_run(run_dir, verify: bool = True) -> Run:
    """The run in ``run_dir`` (see :class:`Run`); its manifest and configuration are
    checked, and when a kernel is first read ``kernels.h5``'s identity, structure and
    (unless ``verify=False``) every dataset's checksum."""
    return Run(run_dir, verify=verify)
