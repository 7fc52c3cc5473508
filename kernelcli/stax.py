"""neural-tangents' ``stax`` names for kernelcli's layers, to build an architecture in
Python with the arguments a neural-tangents user already writes::

    from kernelcli import stax
    net = stax.serial(stax.Conv(64, (3, 3), padding="SAME", W_std=2**0.5),
                      stax.Relu(), stax.GlobalAvgPool(), stax.Dense(10))
    kfn = kernelcli.kernel_fn(net)
    print(net.to_yaml())          # the same network as a config's architecture section

A builder returns a :class:`Network`: nothing but the YAML items of its layers (plain
dicts and strings) and the parameterization, so a network built here and the same
YAML are one specification, validated by the same code when a kernel is built.
Defaults follow neural-tangents 0.6.5 (``padding="VALID"``, ``b_std=None``: no bias),
not kernelcli's YAML defaults. ``out_dim`` / ``out_chan`` become ``width``: they change
the kernels only under ``parameterization="standard"``, and where a ``FanInConcat``
weighs its branches. An argument kernelcli has no kernel for (``Gelu(approximate=True)``,
``LayerNorm(axis=0)``, another data layout) is refused here, naming it, rather than
computed as something else.

Branches are written as in neural-tangents, ``serial(FanOut(k), parallel(*k branches),
FanInSum())`` (or ``FanInConcat()``): the three, consecutive in one ``serial``, become
one ``parallel`` item. Until then each is a piece that only a ``serial`` can complete;
a network left with one is refused when it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import yaml

from .errors import ConfigError

__all__ = ["ABRelu", "Abs", "AvgPool", "Conv", "ConvLocal", "ConvTranspose", "Cos", "Dense",
           "Erf", "Exp", "FanInConcat", "FanInSum", "FanOut", "Flatten", "Gaussian", "Gelu",
           "GlobalAvgPool", "GlobalSumPool", "Hermite", "Identity", "LayerNorm", "LeakyRelu",
           "Monomial", "Network", "Rbf", "RectifiedMonomial", "Relu", "Sigmoid_like", "Sign",
           "Sin", "SumPool", "parallel", "repeat", "residual", "serial"]


@dataclass(frozen=True)
class _Piece:
    """A third of a YAML ``parallel`` item, which ``serial`` joins: ``FanOut(num)``
    (``stage`` 0), ``parallel(*branches)`` (1; ``branches``: each a list of YAML items)
    or a fan-in (2; ``merge``)."""

    name: str
    stage: int
    num: int = 0
    branches: Tuple[list, ...] = ()
    merge: str = ""


@dataclass(frozen=True)
class Network:
    """An architecture: its layers as the items of ``architecture.layers`` and the
    parameterization its ``Dense``/``Conv`` layers asked for (``None``: none did)."""

    layers: Tuple[Union[str, dict, _Piece], ...]
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


def _plain(item):
    if isinstance(item, dict):
        return {k: _plain(v) for k, v in item.items()}
    if isinstance(item, (list, tuple)):
        return [_plain(v) for v in item]
    return item


def _one(item, parameterization: Optional[str] = None) -> Network:
    return Network((item,), parameterization)


def _pair(value, what: str, default=None):
    """Sizes along the spatial axes: a tuple of 1 to 3 (one per axis: ``(k,)`` on
    sequences, ``(k, k)`` on images, ``(k, k, k)`` on volumes) as a YAML list, or an int
    (the same along every axis) as it is; ``None``: ``default``."""
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    value = list(value)
    if not 1 <= len(value) <= 3:
        raise ConfigError(f"stax: {what} {tuple(value)} is not accepted; kernelcli's "
                          f"layers take 1 to 3 spatial axes: give one size per axis, e.g. "
                          f"(3,), (3, 3) or (3, 3, 3)")
    return value


def _channels_last(dimension_numbers, n) -> bool:
    """Whether ``dimension_numbers`` is neural-tangents' channels-last default for ``n``
    spatial axes (``('NHWC', 'HWIO', 'NHWC')``, ``('NABC', 'ABIO', 'NABC')``, ...)."""
    try:
        lhs, rhs, out = dimension_numbers
        return (isinstance(lhs, str) and lhs == out and len(lhs) == n + 2
                and lhs[0] == "N" and lhs[-1] == "C" and rhs == lhs[1:-1] + "IO")
    except (TypeError, ValueError):
        return False


def _rank(sizes) -> int:
    """The spatial axes that ``sizes`` (``_pair``'s result) is written for; an int is
    read as an image's (neural-tangents' own default rank)."""
    return 2 if isinstance(sizes, int) else len(sizes)


def _refuse(layer: str, argument: str, value, accepted: str) -> None:
    raise ConfigError(f"stax.{layer}: {argument}={value!r} is not supported by kernelcli; "
                      f"accepted: {accepted}")


def _parameterization(layer: str, value: str) -> str:
    if value not in ("ntk", "standard"):
        _refuse(layer, "parameterization", value, "'ntk' or 'standard'")
    return value


def Dense(out_dim: int = 1, W_std: float = 1.0, b_std: Optional[float] = None,
          parameterization: str = "ntk") -> Network:
    """``stax.Dense``: fully connected on the channel (last) axis."""
    return _one({"dense": {"W_std": W_std, "b_std": b_std, "width": out_dim}},
                _parameterization("Dense", parameterization))


def Conv(out_chan: int, filter_shape: Sequence[int], strides: Optional[Sequence[int]] = None,
         padding: str = "VALID", W_std: float = 1.0, b_std: Optional[float] = None,
         dimension_numbers=None, parameterization: str = "ntk") -> Network:
    """``stax.Conv``: convolution over the spatial axes of channels-last inputs, as many
    as ``filter_shape`` has entries: ``(k,)`` on sequences ``(N, L, C)``, ``(k, k)`` on
    images ``(N, H, W, C)``, ``(k, k, k)`` on volumes ``(N, D, H, W, C)``."""
    return _conv_item("Conv", "conv", out_chan, filter_shape, strides, padding, W_std, b_std,
                      dimension_numbers, parameterization)


def Relu() -> Network:
    """``stax.Relu``."""
    return _one("relu")


def Erf(a: float = 1.0, b: float = 1.0, c: float = 0.0) -> Network:
    """``stax.Erf``: ``a * erf(b * x) + c``; the defaults give bare ``erf``."""
    if (a, b, c) == (1.0, 1.0, 0.0):
        return _one("erf")
    return _one({"erf": {"a": a, "b": b, "c": c}})


def Sigmoid_like() -> Network:
    """``stax.Sigmoid_like``: ``Erf(0.5, 1 / 2.4020563531719796, 0.5)``."""
    return _one("sigmoid_like")


def Sin(a: float = 1.0, b: float = 1.0, c: float = 0.0) -> Network:
    """``stax.Sin``: ``a * sin(b * x + c)``."""
    return _one({"sin": {"a": a, "b": b, "c": c}})


def Cos(a: float = 1.0, b: float = 1.0, c: float = 0.0) -> Network:
    """``stax.Cos``: ``a * cos(b * x + c)``."""
    return _one({"cos": {"a": a, "b": b, "c": c}})


def Rbf(gamma: float = 1.0) -> Network:
    """``stax.Rbf``: NNGP ``exp(-gamma * |x - x'|**2 / d)`` after a dense layer."""
    return _one({"rbf": {"gamma": gamma}})


def Exp(a: float = 1.0, b: float = 1.0) -> Network:
    """``stax.Exp``: ``a * exp(b * x)``."""
    return _one({"exp": {"a": a, "b": b}})


def Gaussian(a: float = 1.0, b: float = -1.0) -> Network:
    """``stax.Gaussian``: ``a * exp(b * x**2)``."""
    return _one({"gaussian": {"a": a, "b": b}})


def Monomial(degree: int) -> Network:
    """``stax.Monomial``: ``x**degree``, degree 0..5."""
    return _one({"monomial": {"degree": degree}})


def RectifiedMonomial(degree: int) -> Network:
    """``stax.RectifiedMonomial``: ``max(x, 0)**degree``."""
    return _one({"rectified_monomial": {"degree": degree}})


def Sign() -> Network:
    """``stax.Sign``."""
    return _one("sign")


def Abs() -> Network:
    """``stax.Abs``: ``ABRelu(-1, 1)``."""
    return _one("abs")


def Hermite(degree: int) -> Network:
    """``stax.Hermite``: the normalised Hermite polynomial of ``degree``; kernelcli
    requires it to follow ``LayerNorm`` (unit-variance inputs, which neural-tangents
    assumes)."""
    return _one({"hermite": {"degree": degree}})


def Gelu(approximate: bool = False) -> Network:
    """``stax.Gelu``: the exact GELU."""
    if approximate:
        _refuse("Gelu", "approximate", approximate, "False (the exact GELU)")
    return _one("gelu")


def ABRelu(a: float, b: float) -> Network:
    """``stax.ABRelu``: ``a * min(x, 0) + b * max(x, 0)``."""
    return _one({"abrelu": {"a": a, "b": b}})


def LeakyRelu(alpha: float) -> Network:
    """``stax.LeakyRelu``: ``ABRelu(alpha, 1)``."""
    return _one({"leaky_relu": {"alpha": alpha}})


def _conv_item(layer: str, name: str, out_chan, filter_shape, strides, padding, W_std, b_std,
               dimension_numbers, parameterization) -> Network:
    """The YAML item of ``Conv``, ``ConvLocal`` or ``ConvTranspose`` (their arguments and
    defaults are the same)."""
    filt = _pair(filter_shape, "filter_shape")
    if dimension_numbers is not None and not _channels_last(dimension_numbers, _rank(filt)):
        _refuse(layer, "dimension_numbers", dimension_numbers, "None or channels last, "
                "such as ('NHWC', 'HWIO', 'NHWC') (kernelcli reads channels-first files "
                "with data.layout instead)")
    return _one({name: {"filter": filt,
                        # absent strides: 1 along every axis, as the YAML's default
                        "strides": _pair(strides, "strides", 1),
                        "padding": str(padding).upper(), "W_std": W_std, "b_std": b_std,
                        "width": out_chan}},
                _parameterization(layer, parameterization))


def ConvLocal(out_chan: int, filter_shape: Sequence[int],
              strides: Optional[Sequence[int]] = None, padding: str = "VALID",
              W_std: float = 1.0, b_std: Optional[float] = None, dimension_numbers=None,
              parameterization: str = "ntk") -> Network:
    """``stax.ConvLocal``: a locally connected layer (a convolution without weight
    sharing) over the spatial axes of channels-last inputs (one ``filter_shape`` entry
    per axis, as ``Conv``)."""
    return _conv_item("ConvLocal", "conv_local", out_chan, filter_shape, strides, padding,
                      W_std, b_std, dimension_numbers, parameterization)


def ConvTranspose(out_chan: int, filter_shape: Sequence[int],
                  strides: Optional[Sequence[int]] = None, padding: str = "VALID",
                  W_std: float = 1.0, b_std: Optional[float] = None, dimension_numbers=None,
                  parameterization: str = "ntk") -> Network:
    """``stax.ConvTranspose``: a transposed convolution over the spatial axes of
    channels-last inputs (one ``filter_shape`` entry per axis, as ``Conv``)."""
    return _conv_item("ConvTranspose", "conv_transpose", out_chan, filter_shape, strides,
                      padding, W_std, b_std, dimension_numbers, parameterization)


def _pool_item(layer: str, name: str, window_shape, strides, padding, batch_axis,
               channel_axis, **extra) -> Network:
    window = _pair(window_shape, "window_shape")
    if (batch_axis, channel_axis) not in ((0, -1), (0, _rank(window) + 1)):
        _refuse(layer, "(batch_axis, channel_axis)", (batch_axis, channel_axis),
                "(0, -1): channels last")
    # absent strides: 1 along every axis (neural-tangents'), written out since the
    # YAML's default is the window
    ones = 1 if isinstance(window, int) else [1] * len(window)
    return _one({name: {"window": window, "strides": _pair(strides, "strides", ones),
                        "padding": str(padding).upper(), **extra}})


def AvgPool(window_shape: Sequence[int], strides: Optional[Sequence[int]] = None,
            padding: str = "VALID", normalize_edges: bool = False, batch_axis: int = 0,
            channel_axis: int = -1) -> Network:
    """``stax.AvgPool`` over the spatial axes (one ``window_shape`` entry per axis);
    ``strides`` default: 1 (neural-tangents' default, where the YAML's is the window)."""
    if not isinstance(normalize_edges, bool):
        _refuse("AvgPool", "normalize_edges", normalize_edges, "True or False")
    return _pool_item("AvgPool", "avg_pool", window_shape, strides, padding, batch_axis,
                      channel_axis, normalize_edges=normalize_edges)


def SumPool(window_shape: Sequence[int], strides: Optional[Sequence[int]] = None,
            padding: str = "VALID", batch_axis: int = 0, channel_axis: int = -1) -> Network:
    """``stax.SumPool`` over the spatial axes (one ``window_shape`` entry per axis);
    ``strides`` default: 1, as in neural-tangents."""
    return _pool_item("SumPool", "sum_pool", window_shape, strides, padding, batch_axis,
                      channel_axis)


def GlobalAvgPool() -> Network:
    """``stax.GlobalAvgPool``: the mean over all spatial positions."""
    return _one("global_avg_pool")


def GlobalSumPool(batch_axis: int = 0, channel_axis: int = -1) -> Network:
    """``stax.GlobalSumPool``: the sum over all spatial positions."""
    # the input's rank is unknown here, so only -1 says "the channels, last"
    if (batch_axis, channel_axis) != (0, -1):
        _refuse("GlobalSumPool", "(batch_axis, channel_axis)", (batch_axis, channel_axis),
                "(0, -1): channels last")
    return _one("global_sum_pool")


def Flatten() -> Network:
    """``stax.Flatten``: spatial and channel axes into one."""
    return _one("flatten")


def LayerNorm(axis=-1, eps: float = 1e-12) -> Network:
    """``stax.LayerNorm`` over the channel axis."""
    if axis not in (-1, (-1,), [-1]):
        _refuse("LayerNorm", "axis", axis, "-1 (the channel axis)")
    if eps != 1e-12:
        _refuse("LayerNorm", "eps", eps, "1e-12, neural-tangents' default")
    return _one("layer_norm")


def Identity() -> Network:
    """``stax.Identity``."""
    return _one("identity")


def _merged(networks: Sequence, who: str) -> Network:
    """The items of ``networks`` in order (pieces not yet joined), with the one
    parameterization they ask for."""
    items, chosen = [], None
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


def FanOut(num: int) -> Network:
    """``stax.FanOut``: ``num`` copies of the input, for the branches of the
    ``parallel`` that must follow (then ``FanInSum()`` or ``FanInConcat()``)."""
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        _refuse("FanOut", "num", num, "a positive integer, the number of branches")
    return _one(_Piece("FanOut", 0, num=num))


def parallel(*layers: Network) -> Network:
    """``stax.parallel``: one branch per argument (a layer or a ``serial``), between
    ``FanOut`` and a fan-in; ``Identity()`` is the branch that passes its input on."""
    if not layers:
        _refuse("parallel", "layers", (), "at least one branch")
    parameterization = _merged(layers, "parallel").parameterization
    branches = [serial(layer) for layer in layers]
    for branch in branches:
        branch.to_dict()  # a branch holds whole layers only
    return _one(_Piece("parallel", 1, branches=tuple(list(b.layers) for b in branches)),
                parameterization)


def FanInSum() -> Network:
    """``stax.FanInSum``: the sum of the branches' outputs (``merge: sum``)."""
    return _one(_Piece("FanInSum", 2, merge="sum"))


def FanInConcat(axis: int = -1) -> Network:
    """``stax.FanInConcat`` on the channel axis (``merge: concat``)."""
    if axis != -1:
        _refuse("FanInConcat", "axis", axis, "-1 (the channel axis)")
    return _one(_Piece("FanInConcat", 2, merge="concat"))


def residual(*layers: Network) -> Network:
    """``x + f(x)`` with ``f = serial(*layers)``: neural-tangents'
    ``serial(FanOut(2), parallel(serial(*layers), Identity()), FanInSum())``."""
    branch = serial(*layers)
    return Network(({"residual": {"layers": list(branch.layers)}},), branch.parameterization)


def repeat(layer: Network, times: int) -> Network:
    """``layer`` ``times`` times in sequence (``stax.repeat`` without weight sharing,
    which infinite width does not see)."""
    inner = serial(layer)
    return Network(({"repeat": {"times": times, "layers": list(inner.layers)}},),
                   inner.parameterization)
