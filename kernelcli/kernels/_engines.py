"""The kernels' execution engines, and which one ``compute.engine`` means.

Three execution engines compute the same kernels (``compute.engine``,
:func:`resolve_engine`; they agree to rounding, not bit for bit):

* ``cpu``: a call's pairs in cache-sized chunks (a ``lax.map``), full covariances
  walked row by row with the convolution and its nonlinearity fused (``_fused``),
  nonlinearities in L2-sized slabs (``_compose._by_slabs``): a CPU core's working
  set stays in its cache, and the loops are the fusion boundaries XLA:CPU keeps.
* ``accelerator``: a call's pairs are one program step (``chunk == 1``), each
  layer one elementwise pass over the whole batch (``_batched``), with a fusion
  boundary per layer and no host round trips (runs of repeated layers are a
  ``fori_loop`` of static trip count; their variances a dynamic slice): a GPU
  then runs a few large kernels per layer instead of thousands of tiny ones.
* ``native``: the ``cpu`` engine, with each convolution + ABReLU-family nonlinearity
  of a full covariance (and a global average pool right after one, chains of 3 x 3
  blocks ending in a pool, and runs of 3 x 3 blocks on spatial diagonals) as a C++
  custom call built on first use (``_native``): the angle once for both kinds, every
  intermediate in cache, the pool summed as each row is produced. CPUs only; it needs
  a C++ compiler.

``auto`` picks ``native`` on CPUs where it has something to do (:func:`native_helps`)
and it can be built here; else ``cpu`` on CPUs, ``accelerator`` anywhere else. A run
records the engine it resolved to (:class:`~kernelcli.config.Engine`, its manifest's
``engine`` section) and keeps it (resume, extend, shards, Ray's workers), since the two
CPU engines' last bits differ.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .._stop import Stop
from ..config import ENGINE_NAMES, ENGINES, bind_layers
from ..errors import ConfigError
from . import _native
from ._compose import any_full
from ._native_build import say


def resolve_engine(name: str, platform: str, layers: Optional[Sequence] = None,
                   input_shape: Optional[Sequence[int]] = None,
                   stop: Optional[Stop] = None) -> str:
    """The engine ``compute.engine: name`` means on devices of JAX platform ``platform``
    (``"cpu"``, ``"gpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``, ...) for a network of
    ``layers`` on inputs of ``input_shape``: ``"auto"`` is ``"accelerator"`` anywhere
    but on CPUs, and there ``"native"`` where :func:`native_helps` and the native
    library builds (or is kept), else ``"cpu"``; the others are kept (``"native"`` on
    CPUs only: a configuration error elsewhere). Where the native library is to be
    built, this builds it, and a requested ``stop`` ends that with ``Interrupted``."""
    cpu = str(platform).lower() == "cpu"
    if name == "native" and not cpu:
        raise ConfigError(f"compute.engine: 'native' runs on CPUs only; the devices here "
                          f"are {platform}: use auto, cpu or accelerator")
    if name == "auto":
        if not cpu:
            return "accelerator"
        helps = (layers is not None and input_shape is not None
                 and native_helps(layers, input_shape))
        if not helps:
            return "cpu"
        why = _native.unavailable(stop)
        if why is not None:
            _say_once(f"computing with the cpu engine ({_fallback(why)})")
        return "cpu" if why is not None else "native"
    if name not in ENGINE_NAMES:
        raise ValueError(f"engine {name!r}: expected one of {', '.join(ENGINES)}")
    if name == "native":
        _native.unavailable(stop)  # built here, where a stop is honoured
    return name


def native_helps(layers: Sequence, input_shape: Sequence[int]) -> bool:
    """Whether the native engine has a custom call for a network of ``layers`` on inputs
    of ``input_shape`` (images, ``(H, W, C)``): a stride-1 SAME or VALID convolution
    followed by an ABReLU-family nonlinearity in a network that keeps full
    covariances, or a 3 x 3 SAME one on diagonals (``_native.helps``). (Only where
    this holds does building the library pay.)"""
    if len(input_shape) != 3:
        return False
    layers = bind_layers(layers, input_shape)  # one filter size and stride per axis
    return _native.helps(layers, any_full(layers))


def engine_reason(requested: str, engine: str, platform: str, layers: Sequence,
                  input_shape: Sequence[int]) -> str:
    """Why ``engine`` computes a network of ``layers`` on inputs of ``input_shape`` when
    ``compute.engine`` is ``requested``, as estimate and -v say it (a fallback is never
    silent); with the native engine, which library (its identity and origin)."""
    if engine == "native":
        how = "compute.engine: native" if requested == "native" else (
            "auto: it has custom calls for this network" if requested == "auto"
            else "the run's engine")
        return f"{how}; {_native.describe()}"
    if requested == engine:
        if engine == "accelerator" and str(platform).lower() == "cpu":
            # asked for by name, it runs where jax's devices are: never silently the CPU
            return ("compute.engine: accelerator, computing on the CPU: jax sees no GPU or "
                    "TPU here; on a CPU, auto takes the native or cpu engine, as fast or "
                    "faster")
        return f"compute.engine: {engine}"
    if requested != "auto":
        return "the run's engine (engine.name in its manifest.json)"
    if str(platform).lower() != "cpu":
        return f"auto on {platform} devices"
    if not native_helps(layers, input_shape):
        return "auto: the native engine has no custom call for this network"
    return _fallback(_native.unavailable())


def _fallback(why: Optional[str]) -> str:
    """Why ``auto`` took the cpu engine where the native one would have run."""
    return f"auto: the native engine cannot run here: {why}"


_TOLD: set = set()


def _say_once(message: str) -> None:
    """``message`` on stderr, once per process (every kernel function built after the
    first takes the same engine for the same reason)."""
    if message not in _TOLD:
        _TOLD.add(message)
        say(message)
