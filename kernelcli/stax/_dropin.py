"""neural-tangents' calling convention for :mod:`kernelcli.stax` networks.

``init_fn, apply_fn, kernel_fn = stax.serial(...)`` is the idiom of nearly every
neural-tangents example, so a network unpacks into three functions:

* ``kernel_fn(x1, x2=None, get=None)``: kernelcli's kernel of the network with
  neural-tangents' call signature and return values: ``get=None`` gives a
  :class:`Kernel` with ``.nngp`` and ``.ntk``; a name gives that array; a tuple of
  names gives a named tuple of arrays in that order. Only ``"nngp"`` and ``"ntk"``
  exist here (neural-tangents' ``cov1``, ``cov2`` and the other fields of its
  ``Kernel`` are intermediate state, which kernelcli does not keep). Float64
  inputs are computed in float64 (as neural-tangents does with ``jax_enable_x64``),
  others in float32; keyword arguments of :class:`kernelcli.KernelFunction`
  (``dtype``, ``memory``, ``devices``, ``augment``, ``engine``, ``stop``) pass on.
* ``init_fn`` and ``apply_fn`` raise: kernelcli computes the infinite-width kernels
  only, never a finite network.
"""

from __future__ import annotations

import collections
from typing import NamedTuple

import numpy as np

from ..config import KINDS
from ..errors import FiniteNetworkError
from ._library import KernelFunction


class Kernel(NamedTuple):
    """What ``kernel_fn(x1, x2)`` returns without ``get``: both kernels."""

    nngp: np.ndarray
    ntk: np.ndarray


def _finite(name: str):
    def refuse(*args, **kwargs):
        raise FiniteNetworkError(
            f"{name}: kernelcli computes the infinite-width NNGP and NTK only, not a finite "
            f"network; use kernel_fn (or neural-tangents' stax for {name})")
    refuse.__name__ = name
    return refuse


init_fn = _finite("init_fn")
apply_fn = _finite("apply_fn")


class NTKernelFn:
    """``kernel_fn`` of a network, called as neural-tangents calls it."""

    def __init__(self, network):
        self._kfn = KernelFunction(network)

    def __repr__(self) -> str:
        return f"kernel_fn({self._kfn!r})"

    def __call__(self, x1, x2=None, get=None, **kwargs):
        names = KINDS if get is None else (get,) if isinstance(get, str) else tuple(get)
        unknown = [g for g in names if g not in KINDS]
        if unknown or not names:
            raise ValueError(f"get: {get!r} is not accepted; kernelcli computes "
                             f"{' and '.join(KINDS)}: give one of them, a tuple of them, "
                             f"or None for both")
        if "dtype" not in kwargs:
            # x1's own dtype where it has one: a jax tracer has, but no values to convert
            dtype = getattr(x1, "dtype", None) or np.asarray(x1).dtype
            kwargs["dtype"] = "float64" if dtype == np.float64 else "float32"
        wanted = tuple(dict.fromkeys(names))  # each kind computed once
        arrays = dict(zip(wanted, self._kfn(x1, x2, get=wanted, **kwargs), strict=True))
        if get is None:
            return Kernel(arrays["nngp"], arrays["ntk"])
        if isinstance(get, str):
            return arrays[get]
        return collections.namedtuple("Kernel", names, rename=True)(
            *(arrays[g] for g in names))


def unpacked(network) -> tuple:
    """``(init_fn, apply_fn, kernel_fn)`` of ``network``."""
    return init_fn, apply_fn, NTKernelFn(network)


__all__ = ["FiniteNetworkError", "Kernel", "NTKernelFn", "unpacked"]
