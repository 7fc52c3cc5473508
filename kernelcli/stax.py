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
the kernels only under ``parameterization="standard"``. An argument kernelcli has no
kernel for (``Gelu(approximate=True)``, ``LayerNorm(axis=0)``, another data layout)
is refused here, naming it, rather than computed as something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import yaml

from .errors import ConfigError

__all__ = ["ABRelu", "AvgPool", "Conv", "ConvLocal", "ConvTranspose", "Dense", "Erf",
           "Flatten", "Gelu", "GlobalAvgPool", "GlobalSumPool", "Identity", "LayerNorm",
           "LeakyRelu", "Network", "Relu", "SumPool", "repeat", "residual", "serial"]


@dataclass(frozen=True)
class Network:
    """An architecture: its layers as the items of ``architecture.layers`` and the
    parameterization its ``Dense``/``Conv`` layers asked for (``None``: none did)."""

    layers: Tuple[Union[str, dict], ...]
    parameterization: Optional[str] = None

    def to_dict(self) -> dict:
        """The ``architecture:`` section of a configuration, as a mapping."""
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


def _pair(value, what: str, default=None) -> list:
    if value is None:
        return list(default)
    if isinstance(value, int):
        return [value, value]
    value = list(value)
    if len(value) != 2:
        raise ConfigError(f"stax: {what} {tuple(value)} is not accepted; kernelcli's "
                          f"layers take 2-D images: give (height, width)")
    return value


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
    """``stax.Conv``: 2-D convolution over (H, W) of NHWC images."""
    return _conv_item("Conv", "conv", out_chan, filter_shape, strides, padding, W_std, b_std,
                      dimension_numbers, parameterization)


def Relu() -> Network:
    """``stax.Relu``."""
    return _one("relu")


def Erf(a: float = 1.0, b: float = 1.0, c: float = 0.0) -> Network:
    """``stax.Erf``: ``a * erf(b * x) + c``; kernelcli has the kernel of ``erf(x)``."""
    if (a, b, c) != (1.0, 1.0, 0.0):
        _refuse("Erf", "(a, b, c)", (a, b, c), "(1.0, 1.0, 0.0), the plain erf")
    return _one("erf")


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
    if dimension_numbers not in (None, ("NHWC", "HWIO", "NHWC")):
        _refuse(layer, "dimension_numbers", dimension_numbers, "None or ('NHWC', 'HWIO', "
                "'NHWC') (kernelcli reads NCHW files with data.layout instead)")
    return _one({name: {"filter": _pair(filter_shape, "filter_shape"),
                        "strides": _pair(strides, "strides", (1, 1)),
                        "padding": str(padding).upper(), "W_std": W_std, "b_std": b_std,
                        "width": out_chan}},
                _parameterization(layer, parameterization))


def ConvLocal(out_chan: int, filter_shape: Sequence[int],
              strides: Optional[Sequence[int]] = None, padding: str = "VALID",
              W_std: float = 1.0, b_std: Optional[float] = None, dimension_numbers=None,
              parameterization: str = "ntk") -> Network:
    """``stax.ConvLocal``: a locally connected layer (a convolution without weight
    sharing) over (H, W) of NHWC images."""
    return _conv_item("ConvLocal", "conv_local", out_chan, filter_shape, strides, padding,
                      W_std, b_std, dimension_numbers, parameterization)


def ConvTranspose(out_chan: int, filter_shape: Sequence[int],
                  strides: Optional[Sequence[int]] = None, padding: str = "VALID",
                  W_std: float = 1.0, b_std: Optional[float] = None, dimension_numbers=None,
                  parameterization: str = "ntk") -> Network:
    """``stax.ConvTranspose``: a transposed convolution over (H, W) of NHWC images."""
    return _conv_item("ConvTranspose", "conv_transpose", out_chan, filter_shape, strides,
                      padding, W_std, b_std, dimension_numbers, parameterization)


def _pool_item(layer: str, name: str, window_shape, strides, padding, batch_axis,
               channel_axis, **extra) -> Network:
    if (batch_axis, channel_axis) not in ((0, -1), (0, 3)):
        _refuse(layer, "(batch_axis, channel_axis)", (batch_axis, channel_axis),
                "(0, -1): NHWC images")
    window = _pair(window_shape, "window_shape")
    return _one({name: {"window": window, "strides": _pair(strides, "strides", (1, 1)),
                        "padding": str(padding).upper(), **extra}})


def AvgPool(window_shape: Sequence[int], strides: Optional[Sequence[int]] = None,
            padding: str = "VALID", normalize_edges: bool = False, batch_axis: int = 0,
            channel_axis: int = -1) -> Network:
    """``stax.AvgPool`` over (H, W); ``strides`` default: 1 (neural-tangents' default,
    where the YAML's is the window)."""
    if not isinstance(normalize_edges, bool):
        _refuse("AvgPool", "normalize_edges", normalize_edges, "True or False")
    return _pool_item("AvgPool", "avg_pool", window_shape, strides, padding, batch_axis,
                      channel_axis, normalize_edges=normalize_edges)


def SumPool(window_shape: Sequence[int], strides: Optional[Sequence[int]] = None,
            padding: str = "VALID", batch_axis: int = 0, channel_axis: int = -1) -> Network:
    """``stax.SumPool`` over (H, W); ``strides`` default: 1, as in neural-tangents."""
    return _pool_item("SumPool", "sum_pool", window_shape, strides, padding, batch_axis,
                      channel_axis)


def GlobalAvgPool() -> Network:
    """``stax.GlobalAvgPool``: the mean over all spatial positions."""
    return _one("global_avg_pool")


def GlobalSumPool(batch_axis: int = 0, channel_axis: int = -1) -> Network:
    """``stax.GlobalSumPool``: the sum over all spatial positions."""
    if (batch_axis, channel_axis) not in ((0, -1), (0, 3)):
        _refuse("GlobalSumPool", "(batch_axis, channel_axis)", (batch_axis, channel_axis),
                "(0, -1): NHWC images")
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


def serial(*layers: Network) -> Network:
    """``stax.serial``: the layers in order (their parameterizations must agree)."""
    items, chosen = [], None
    for k, layer in enumerate(layers):
        if not isinstance(layer, Network):
            raise ConfigError(f"stax.serial: argument {k} is {type(layer).__name__}, not a "
                              f"layer built with kernelcli.stax")
        if layer.parameterization is not None:
            if chosen is not None and layer.parameterization != chosen:
                raise ConfigError(f"stax.serial: layers ask for both {chosen!r} and "
                                  f"{layer.parameterization!r} parameterizations; kernelcli "
                                  f"takes one per architecture")
            chosen = layer.parameterization
        items.extend(layer.layers)
    return Network(tuple(items), chosen)


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
