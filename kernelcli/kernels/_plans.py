"""The kernels' execution plans, and which one ``compute.engine`` means.

Two execution plans compute the same kernels (``compute.engine``,
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
* ``native`` (asked for, never ``auto``'s choice yet): the ``cpu`` plan, with each
  convolution + ABReLU-family nonlinearity of the pair pass on a full covariance (and
  a global average pool right after one) as a C++ custom call built on first use
  (``_native``): the angle once for both kinds, every intermediate in cache, the pool
  summed as each row is produced. CPUs only; it needs a C++ compiler.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..spec import ENGINES

# the plans themselves: every engine a config may name but the one that picks for it
PLANS = tuple(e for e in ENGINES if e != "auto")


def resolve_engine(name: str, platform: str) -> str:
    """The plan ``compute.engine: name`` means on devices of JAX platform ``platform``
    (``"cpu"``, ``"gpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``, ...): ``"auto"`` is
    ``"accelerator"`` anywhere but on CPUs; the others are kept (``"native"`` on CPUs
    only: a configuration error elsewhere)."""
    if name == "native" and str(platform).lower() != "cpu":
        raise ConfigError(f"compute.engine: 'native' runs on CPUs only; the devices here "
                          f"are {platform}: use auto, cpu or accelerator")
    if name == "auto":
        return "cpu" if str(platform).lower() == "cpu" else "accelerator"
    if name not in PLANS:
        raise ValueError(f"engine {name!r}: expected one of {', '.join(ENGINES)}")
    return name
