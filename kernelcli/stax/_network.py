"""What ``kernelcli.stax``'s builders return and how they combine: :class:`Network`
(the YAML items of an architecture and its parameterization) and the combinators
``serial``, ``parallel``, ``FanOut``, ``FanInSum``, ``FanInConcat``, ``residual`` and
``repeat``, re-exported by :mod:`kernelcli.stax`, whose layer builders use ``one``
and ``refuse`` from here.

Branches are written as in neural-tangents, ``serial(FanOut(k), parallel(*k branches),
FanInSum())`` (or ``FanInConcat()``): the three, consecutive in one ``serial``, become
one ``parallel`` item. Until then each is a piece that only a ``serial`` can complete;
a network left with one is refused when it is used.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import yaml

from ..errors import ConfigError


@dataclass(frozen=True)
class _Piece:
    """A third of a YAML ``parallel`` item, which ``serial`` joins: ``FanOut(num)``
    (``stage`` 0), ``parallel(*branches)`` (1; ``branches``: each a list of YAML items)
    or a fan-in (2; ``merge``)."""

    name: str
    stage: int
    num: int = 0
    branches: tuple[list, ...] = ()
    merge: str = ""


@dataclass(frozen=True)
class Network:
    """An architecture: its layers as the items of ``architecture.layers`` and the
    parameterization its ``Dense``/``Conv`` layers asked for (``None``: none did)."""

    layers: tuple[Union[str, dict, _Piece], ...]
    parameterization: Optional[str] = None

    def to_dict(self) -> dict:
        """The ``architecture:`` section of a configuration, as a mapping."""
        for item in self.layers:
            if isinstance(item, _Piece):
                raise ConfigError(f"stax: {item.name} is not joined into a parallel layer; "
                                  f"expected serial(FanOut(k), parallel(... k branches), "
                                  f"FanInSum() or FanInConcat()), consecutive in one serial")
        return {"parameterization": self.parameterization or "ntk",
                "layers": [_plain(item) for item in self.layers]}

    def to_yaml(self) -> str:
        """The ``architecture:`` section as YAML text, ready to paste into a config."""
        return yaml.safe_dump({"architecture": self.to_dict()}, sort_keys=False,
                              default_flow_style=None)

    def __iter__(self):
        """``init_fn, apply_fn, kernel_fn = stax.serial(...)``, as in neural-tangents
        (:mod:`kernelcli.stax._dropin`: the kernel function has neural-tangents' call
        signature; the other two say that kernelcli has no finite networks)."""
        from ._dropin import unpacked

        return iter(unpacked(self))

    def __getitem__(self, index: int):
        """``stax.serial(...)[2]`` is the kernel function, as in neural-tangents."""
        return tuple(self)[index]


def _plain(item):
    if isinstance(item, dict):
        return {k: _plain(v) for k, v in item.items()}
    if isinstance(item, (list, tuple)):
        return [_plain(v) for v in item]
    return item


def plain_number(value):
    """``value`` with numpy and jax scalars (0-d arrays: ``jnp.sqrt(2.0)``,
    ``np.float32(0.1)``) as Python numbers, in lists and tuples too (an array of sizes
    becomes a list of ints); anything else as it is, for the checks to name."""
    if isinstance(value, list) or type(value) is tuple:
        return type(value)(plain_number(v) for v in value)
    if getattr(value, "shape", None) == () and hasattr(value, "dtype") \
            and hasattr(value, "item"):
        return value.item()
    if hasattr(value, "dtype") and getattr(value, "ndim", 0) == 1 and hasattr(value, "tolist"):
        return [plain_number(v) for v in value]
    return value


def numbers(builder):
    """``builder`` taking a numpy or jax scalar wherever it takes a number, as
    neural-tangents' builders do (its notebooks write ``W_std=np.sqrt(2.0)`` with
    ``import jax.numpy as np``)."""

    @functools.wraps(builder)
    def wrapped(*args, **kwargs):
        return builder(*(plain_number(a) for a in args),
                       **{k: plain_number(v) for k, v in kwargs.items()})

    return wrapped


def one(item, parameterization: Optional[str] = None) -> Network:
    return Network((item,), parameterization)


def refuse(layer: str, argument: str, value, accepted: str) -> None:
    raise ConfigError(f"stax.{layer}: {argument}={value!r} is not supported by kernelcli; "
                      f"accepted: {accepted}")


def _merged(networks: Sequence, who: str) -> Network:
    """The items of ``networks`` in order (pieces not yet joined), with the one
    parameterization they ask for."""
    items: list[Union[str, dict, _Piece]] = []
    chosen = None
    for k, layer in enumerate(networks):
        if not isinstance(layer, Network):
            raise ConfigError(f"stax.{who}: argument {k} is {type(layer).__name__}, not a "
                              f"layer built with kernelcli.stax")
        if layer.parameterization is not None:
            if chosen is not None and layer.parameterization != chosen:
                raise ConfigError(f"stax.{who}: layers ask for both {chosen!r} and "
                                  f"{layer.parameterization!r} parameterizations; kernelcli "
                                  f"takes one per architecture")
            chosen = layer.parameterization
        items.extend(layer.layers)
    return Network(tuple(items), chosen)


def _stage(item) -> int:
    """Which third of a parallel item ``item`` is (0, 1, 2), or -1 for a whole layer."""
    return item.stage if isinstance(item, _Piece) else -1


def _join(items: Sequence) -> list:
    """``items`` with each consecutive FanOut, parallel, fan-in made one ``parallel``
    item; a run of pieces cut short by either end is kept for an outer ``serial``."""
    out = list(items)
    k = 0
    while k < len(out):
        stage = _stage(out[k])
        if stage < 0:
            k += 1
            continue
        run = [out[k]]
        while len(run) < 3 - stage and k + len(run) < len(out):
            run.append(out[k + len(run)])
        stages = [_stage(p) for p in run]
        complete = stages == [0, 1, 2]
        # cut short by the ends of this serial only: an outer serial may complete it
        partial = (stages == list(range(stage, stage + len(run))) and (stage == 0 or k == 0)
                   and (stages[-1] == 2 or k + len(run) == len(out)))
        if partial and not complete:
            k += len(run)
            continue
        if not complete:
            got = ", ".join(p.name if isinstance(p, _Piece) else repr(_plain(p)) for p in run)
            raise ConfigError(f"stax.serial: {got} is not FanOut(k), parallel(... k "
                              f"branches), FanInSum() or FanInConcat(); expected the three "
                              f"consecutive, in that order")
        fan_out, branches, fan_in = run
        if fan_out.num != len(branches.branches):
            raise ConfigError(f"stax.serial: FanOut({fan_out.num}) feeds parallel of "
                              f"{len(branches.branches)} branch(es); expected as many "
                              f"branches as the fan-out makes")
        out[k:k + 3] = [{"parallel": {"branches": list(branches.branches),
                                      "merge": fan_in.merge}}]
        k += 1
    return out


def serial(*layers: Network) -> Network:
    """``stax.serial``: the layers in order (their parameterizations must agree)."""
    net = _merged(layers, "serial")
    return Network(tuple(_join(net.layers)), net.parameterization)


@numbers
def FanOut(num: int) -> Network:
    """``stax.FanOut``: ``num`` copies of the input, for the branches of the
    ``parallel`` that must follow (then ``FanInSum()`` or ``FanInConcat()``)."""
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        refuse("FanOut", "num", num, "a positive integer, the number of branches")
    return one(_Piece("FanOut", 0, num=num))


def parallel(*layers: Network) -> Network:
    """``stax.parallel``: one branch per argument (a layer or a ``serial``), between
    ``FanOut`` and a fan-in; ``Identity()`` is the branch that passes its input on."""
    if not layers:
        refuse("parallel", "layers", (), "at least one branch")
    parameterization = _merged(layers, "parallel").parameterization
    branches = [serial(layer) for layer in layers]
    for branch in branches:
        branch.to_dict()  # a branch holds whole layers only
    return one(_Piece("parallel", 1, branches=tuple(list(b.layers) for b in branches)),
                parameterization)


def FanInSum() -> Network:
    """``stax.FanInSum``: the sum of the branches' outputs (``merge: sum``)."""
    return one(_Piece("FanInSum", 2, merge="sum"))


@numbers
def FanInConcat(axis: int = -1) -> Network:
    """``stax.FanInConcat`` on the channel axis (``merge: concat``)."""
    if axis != -1:
        refuse("FanInConcat", "axis", axis, "-1 (the channel axis)")
    return one(_Piece("FanInConcat", 2, merge="concat"))


def residual(*layers: Network) -> Network:
    """``x + f(x)`` with ``f = serial(*layers)``: neural-tangents'
    ``serial(FanOut(2), parallel(serial(*layers), Identity()), FanInSum())``."""
    branch = serial(*layers)
    return Network(({"residual": {"layers": list(branch.layers)}},), branch.parameterization)


@numbers
def repeat(layer: Network, times: int) -> Network:
    """``layer`` ``times`` times in sequence (``stax.repeat`` without weight sharing,
    which infinite width does not see)."""
    inner = serial(layer)
    return Network(({"repeat": {"times": times, "layers": list(inner.layers)}},),
                   inner.parameterization)
