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

What neural-tangents users write around ``kernel_fn`` either works or is refused in
one line saying what to write instead: the results are :class:`ReadyArray` (numpy
arrays, already computed, that answer jax's ``block_until_ready()``); a call under
``jax.jit`` (a traced ``x1``) is refused, since the call computes tiled, on the host,
with programs of its own; ``diagonal_batch`` / ``diagonal_spatial`` are accepted and
change nothing (they choose what neural-tangents keeps of the intermediate layers,
never the returned NNGP and NTK); a ``Kernel`` in place of ``x1`` (continuing from
another network's kernel), ``pattern`` and ``mask_constant`` are refused.
"""

from __future__ import annotations

import collections
from typing import NamedTuple

import numpy as np

from ..config import KINDS
from ..errors import ConfigError, DataError, FiniteNetworkError
from ._library import KernelFunction


class ReadyArray(np.ndarray):
    """A numpy array that also answers the calls neural-tangents code makes on its jax
    arrays to wait for them: the values are already computed, so each returns the
    array itself."""

    def block_until_ready(self):
        return self

    def copy_to_host_async(self):
        return None


def ready(array) -> ReadyArray:
    """``array`` (numpy or jax) as a :class:`ReadyArray`, without a copy where it is one."""
    return np.asarray(array).view(ReadyArray)


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

    def __call__(self, x1, x2=None, get=None, *, pattern=None, mask_constant=None,
                 diagonal_batch=None, diagonal_spatial=None, **kwargs):
        _refuse_traced(x1, x2)
        if hasattr(x1, "nngp") or hasattr(x1, "ntk"):
            raise DataError(
                f"x1: a {type(x1).__name__} (kernels a kernel_fn returned) is not accepted: "
                f"kernelcli computes a network's kernels from its inputs, never by "
                f"continuing from another network's kernel; build the whole network, "
                f"stax.serial(first, second), and call its kernel_fn on the inputs")
        for name, value in (("diagonal_batch", diagonal_batch),
                            ("diagonal_spatial", diagonal_spatial)):
            if value is not None and not isinstance(value, (bool, np.bool_)):
                raise ConfigError(f"{name}: {value!r} is not accepted; expected True, False "
                                  f"or None (it changes nothing here: the returned NNGP "
                                  f"and NTK are the same either way)")
        if pattern is not None and tuple(pattern) != (None, None):
            raise ConfigError("pattern: only None is accepted; it feeds neural-tangents' "
                              "Aggregate layer (graph networks), which kernelcli does not "
                              "have")
        if mask_constant is not None:
            raise ConfigError(f"mask_constant: {mask_constant!r} is not accepted; kernelcli "
                              f"does not mask inputs: pass the examples without the "
                              f"padding, or None")
        unknown = sorted(set(kwargs) - set(_PASSED_ON))
        if unknown:
            raise ConfigError(f"{unknown[0]}: not a keyword argument of kernelcli's kernel_fn; "
                              f"it takes {', '.join(_PASSED_ON)} (and neural-tangents' "
                              f"diagonal_batch and diagonal_spatial, which change nothing)")
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
        arrays = {g: ready(a) for g, a in arrays.items()}
        if get is None:
            return Kernel(arrays["nngp"], arrays["ntk"])
        if isinstance(get, str):
            return arrays[get]
        return collections.namedtuple("Kernel", names, rename=True)(
            *(arrays[g] for g in names))


# what a call passes on to KernelFunction (kernelcli's own keyword arguments)
_PASSED_ON = ("dtype", "memory", "devices", "augment", "engine", "stop")


def _refuse_traced(x1, x2) -> None:
    """A traced ``x1`` / ``x2`` (``jit(kernel_fn, static_argnames='get')``, the idiom of
    neural-tangents' notebooks) refused in one line that says what to write instead."""
    import jax

    for name, x in (("x1", x1), ("x2", x2)):
        if isinstance(x, jax.core.Tracer):
            raise DataError(
                f"{name}: a traced value ({type(x).__name__}, inside jax.jit, vmap or grad) "
                f"is not accepted: kernelcli's kernel_fn computes its matrices tiled, on "
                f"the host, with programs it compiles itself, so it cannot be traced; "
                f"call it without jit (write ker_fn = kernel_fn where neural-tangents "
                f"code writes ker_fn = jit(kernel_fn, static_argnames='get')): its "
                f"results are arrays that answer block_until_ready()")


def unpacked(network) -> tuple:
    """``(init_fn, apply_fn, kernel_fn)`` of ``network``."""
    return init_fn, apply_fn, NTKernelFn(network)


__all__ = ["FiniteNetworkError", "Kernel", "NTKernelFn", "ReadyArray", "ready", "unpacked"]
