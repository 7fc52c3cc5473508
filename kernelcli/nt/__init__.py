"""neural-tangents' top-level names over kernelcli: ``import kernelcli.nt as nt`` in
place of ``import neural_tangents as nt``.

* ``nt.stax`` is :mod:`kernelcli.stax`;
* ``nt.predict.gradient_descent_mse_ensemble`` is neural-tangents' infinite ensemble
  under gradient flow on kernels in memory (:mod:`kernelcli.nt.predict`; a run
  directory's kernels: ``kernelcli predict RUN_DIR --time T``);
* ``nt.batch(kernel_fn, batch_size=...)`` returns ``kernel_fn`` itself: kernelcli
  already computes in tiles that fit the memory it is given, over every local device.

The rest of neural-tangents' top level (finite networks, empirical and Monte Carlo
kernels, linearization) is refused in one line: kernelcli computes the
infinite-width kernels only.
"""

from __future__ import annotations

from .. import stax as stax
from . import predict as predict

__all__ = ["batch", "predict", "stax"]


def batch(kernel_fn, batch_size: int = 0, device_count: int = -1,
          store_on_device: bool = True):
    """neural-tangents' ``nt.batch``, with its arguments, as a no-op: the result is
    ``kernel_fn``. kernelcli plans its own tiles within a memory budget
    (``kernel_fn(..., memory=...)``) and spreads them over every local device
    (``devices=...``), so the batch size and device count change nothing."""
    from ..errors import ConfigError

    for name, value, low in (("batch_size", batch_size, 0), ("device_count", device_count, -1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"batch: {name}={value!r} is not accepted; expected an integer "
                              f">= {low} (it changes nothing: kernelcli plans its own tiles)")
    if not callable(kernel_fn):
        raise ConfigError(f"batch: kernel_fn is {type(kernel_fn).__name__}, not a function")
    return kernel_fn


_FINITE = ("kernelcli computes the infinite-width NNGP and NTK only, never a finite "
           "network; use neural-tangents for it")
_MISSING = {name: _FINITE for name in (
    "empirical_kernel_fn", "empirical_nngp_fn", "empirical_ntk_fn", "empirical_ntk_vp_fn",
    "linearize", "taylor_expand", "monte_carlo_kernel_fn", "NtkImplementation")}
_MISSING["Kernel"] = ("kernelcli keeps no intermediate kernel state: kernel_fn returns the "
                      "NNGP and NTK themselves")
_MISSING["experimental"] = "kernelcli has none of neural-tangents' experimental modules"


def __getattr__(name: str):
    from ..errors import MissingNameError

    if name in _MISSING:
        raise MissingNameError(f"nt.{name}: neural-tangents' {name} is not in kernelcli: "
                               f"{_MISSING[name]}; see docs/neural-tangents.md")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
