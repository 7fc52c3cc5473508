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

A numpy or jax scalar is a number to every builder (neural-tangents' notebooks write
``W_std=np.sqrt(2.0)`` with ``import jax.numpy as np``). ``Dropout`` in test mode is
the identity, as in neural-tangents; a neural-tangents name kernelcli has no layer for
(``GlobalSelfAttention``, ``FanInProd``, ...) raises
:class:`~kernelcli.errors.MissingNameError` in one line saying so.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..errors import ConfigError
from ._dropin import ReadyArray as ReadyArray
from ._dropin import ready as ready
from ._network import FanInConcat as FanInConcat
from ._network import FanInSum as FanInSum
from ._network import FanOut as FanOut
from ._network import Network as Network
from ._network import numbers, one, refuse
from ._network import parallel as parallel
from ._network import repeat as repeat
from ._network import residual as residual
from ._network import serial as serial

__all__ = ["ABRelu", "Abs", "AvgPool", "Conv", "ConvLocal", "ConvTranspose", "Cos", "Dense",
           "Dropout", "Erf", "Exp", "FanInConcat", "FanInSum", "FanOut", "Flatten", "Gaussian", "Gelu",
           "GlobalAvgPool", "GlobalSumPool", "Hermite", "Identity", "LayerNorm", "LeakyRelu",
           "LocalAvgPool", "Monomial", "Network", "Rbf", "RectifiedMonomial", "Relu", "Sigmoid_like", "Sign",
           "Sin", "SumPool", "parallel", "repeat", "residual", "serial"]


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


def _parameterization(layer: str, value: str) -> str:
    if value not in ("ntk", "standard"):
        refuse(layer, "parameterization", value, "'ntk' or 'standard'")
    return value


@numbers
def Dense(out_dim: int = 1, W_std: float = 1.0, b_std: Optional[float] = None,
          parameterization: str = "ntk") -> Network:
    """``stax.Dense``: fully connected on the channel (last) axis."""
    return one({"dense": {"W_std": W_std, "b_std": b_std, "width": out_dim}},
                _parameterization("Dense", parameterization))


@numbers
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
    return one("relu")


@numbers
def Erf(a: float = 1.0, b: float = 1.0, c: float = 0.0) -> Network:
    """``stax.Erf``: ``a * erf(b * x) + c``; the defaults give bare ``erf``."""
    if (a, b, c) == (1.0, 1.0, 0.0):
        return one("erf")
    return one({"erf": {"a": a, "b": b, "c": c}})


def Sigmoid_like() -> Network:
    """``stax.Sigmoid_like``: ``Erf(0.5, 1 / 2.4020563531719796, 0.5)``."""
    return one("sigmoid_like")


@numbers
def Sin(a: float = 1.0, b: float = 1.0, c: float = 0.0) -> Network:
    """``stax.Sin``: ``a * sin(b * x + c)``."""
    return one({"sin": {"a": a, "b": b, "c": c}})


@numbers
def Cos(a: float = 1.0, b: float = 1.0, c: float = 0.0) -> Network:
    """``stax.Cos``: ``a * cos(b * x + c)``."""
    return one({"cos": {"a": a, "b": b, "c": c}})


@numbers
def Rbf(gamma: float = 1.0) -> Network:
    """``stax.Rbf``: NNGP ``exp(-gamma * |x - x'|**2 / d)`` after a dense layer."""
    return one({"rbf": {"gamma": gamma}})


@numbers
def Exp(a: float = 1.0, b: float = 1.0) -> Network:
    """``stax.Exp``: ``a * exp(b * x)``."""
    return one({"exp": {"a": a, "b": b}})


@numbers
def Gaussian(a: float = 1.0, b: float = -1.0) -> Network:
    """``stax.Gaussian``: ``a * exp(b * x**2)``."""
    return one({"gaussian": {"a": a, "b": b}})


@numbers
def Monomial(degree: int) -> Network:
    """``stax.Monomial``: ``x**degree``, degree 0..5."""
    return one({"monomial": {"degree": degree}})


@numbers
def RectifiedMonomial(degree: int) -> Network:
    """``stax.RectifiedMonomial``: ``max(x, 0)**degree``."""
    return one({"rectified_monomial": {"degree": degree}})


def Sign() -> Network:
    """``stax.Sign``."""
    return one("sign")


def Abs() -> Network:
    """``stax.Abs``: ``ABRelu(-1, 1)``."""
    return one("abs")


@numbers
def Hermite(degree: int) -> Network:
    """``stax.Hermite``: the normalised Hermite polynomial of ``degree``; kernelcli
    requires it to follow ``LayerNorm`` (unit-variance inputs, which neural-tangents
    assumes)."""
    return one({"hermite": {"degree": degree}})


@numbers
def Gelu(approximate: bool = False) -> Network:
    """``stax.Gelu``: the exact GELU."""
    if approximate:
        refuse("Gelu", "approximate", approximate, "False (the exact GELU)")
    return one("gelu")


@numbers
def ABRelu(a: float, b: float) -> Network:
    """``stax.ABRelu``: ``a * min(x, 0) + b * max(x, 0)``."""
    return one({"abrelu": {"a": a, "b": b}})


@numbers
def LeakyRelu(alpha: float) -> Network:
    """``stax.LeakyRelu``: ``ABRelu(alpha, 1)``."""
    return one({"leaky_relu": {"alpha": alpha}})


def _conv_item(layer: str, name: str, out_chan, filter_shape, strides, padding, W_std, b_std,
               dimension_numbers, parameterization) -> Network:
    """The YAML item of ``Conv``, ``ConvLocal`` or ``ConvTranspose`` (their arguments and
    defaults are the same)."""
    filt = _pair(filter_shape, "filter_shape")
    if dimension_numbers is not None and not _channels_last(dimension_numbers, _rank(filt)):
        refuse(layer, "dimension_numbers", dimension_numbers, "None or channels last, "
                "such as ('NHWC', 'HWIO', 'NHWC') (kernelcli reads channels-first files "
                "with data.layout instead)")
    return one({name: {"filter": filt,
                        # absent strides: 1 along every axis, as the YAML's default
                        "strides": _pair(strides, "strides", 1),
                        "padding": str(padding).upper(), "W_std": W_std, "b_std": b_std,
                        "width": out_chan}},
                _parameterization(layer, parameterization))


@numbers
def ConvLocal(out_chan: int, filter_shape: Sequence[int],
              strides: Optional[Sequence[int]] = None, padding: str = "VALID",
              W_std: float = 1.0, b_std: Optional[float] = None, dimension_numbers=None,
              parameterization: str = "ntk") -> Network:
    """``stax.ConvLocal``: a locally connected layer (a convolution without weight
    sharing) over the spatial axes of channels-last inputs (one ``filter_shape`` entry
    per axis, as ``Conv``)."""
    return _conv_item("ConvLocal", "conv_local", out_chan, filter_shape, strides, padding,
                      W_std, b_std, dimension_numbers, parameterization)


@numbers
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
        refuse(layer, "(batch_axis, channel_axis)", (batch_axis, channel_axis),
                "(0, -1): channels last")
    # absent strides: 1 along every axis (neural-tangents'), written out since the
    # YAML's default is the window
    ones = 1 if isinstance(window, int) else [1] * len(window)
    return one({name: {"window": window, "strides": _pair(strides, "strides", ones),
                        "padding": str(padding).upper(), **extra}})


@numbers
def AvgPool(window_shape: Sequence[int], strides: Optional[Sequence[int]] = None,
            padding: str = "VALID", normalize_edges: bool = False, batch_axis: int = 0,
            channel_axis: int = -1) -> Network:
    """``stax.AvgPool`` over the spatial axes (one ``window_shape`` entry per axis);
    ``strides`` default: 1 (neural-tangents' default, where the YAML's is the window)."""
    if not isinstance(normalize_edges, bool):
        refuse("AvgPool", "normalize_edges", normalize_edges, "True or False")
    return _pool_item("AvgPool", "avg_pool", window_shape, strides, padding, batch_axis,
                      channel_axis, normalize_edges=normalize_edges)


@numbers
def SumPool(window_shape: Sequence[int], strides: Optional[Sequence[int]] = None,
            padding: str = "VALID", batch_axis: int = 0, channel_axis: int = -1) -> Network:
    """``stax.SumPool`` over the spatial axes (one ``window_shape`` entry per axis);
    ``strides`` default: 1, as in neural-tangents."""
    return _pool_item("SumPool", "sum_pool", window_shape, strides, padding, batch_axis,
                      channel_axis)


def GlobalAvgPool() -> Network:
    """``stax.GlobalAvgPool``: the mean over all spatial positions."""
    return one("global_avg_pool")


@numbers
def GlobalSumPool(batch_axis: int = 0, channel_axis: int = -1) -> Network:
    """``stax.GlobalSumPool``: the sum over all spatial positions."""
    # the input's rank is unknown here, so only -1 says "the channels, last"
    if (batch_axis, channel_axis) != (0, -1):
        refuse("GlobalSumPool", "(batch_axis, channel_axis)", (batch_axis, channel_axis),
                "(0, -1): channels last")
    return one("global_sum_pool")


def LocalAvgPool(window_shape) -> Network:
    """Local average pooling (Li et al. 2019), which neural-tangents lacks: ``flatten``
    averaged over the translations of both inputs within ``window_shape`` (an odd size,
    or the axis's, per spatial axis; one int for every axis); the YAML's
    ``local_avg_pool``."""
    return one({"local_avg_pool": {"window": _pair(window_shape, "window_shape")}})


def Flatten() -> Network:
    """``stax.Flatten``: spatial and channel axes into one."""
    return one("flatten")


@numbers
def LayerNorm(axis=-1, eps: float = 1e-12) -> Network:
    """``stax.LayerNorm`` over the channel axis."""
    if axis not in (-1, (-1,), [-1]):
        refuse("LayerNorm", "axis", axis, "-1 (the channel axis)")
    if eps != 1e-12:
        refuse("LayerNorm", "eps", eps, "1e-12, neural-tangents' default")
    return one("layer_norm")


def Identity() -> Network:
    """``stax.Identity``."""
    return one("identity")


@numbers
def Dropout(rate: float, mode: str = "train") -> Network:
    """``stax.Dropout``: in ``mode='test'`` the identity on the kernel, as in
    neural-tangents. Its ``mode='train'`` (the default) scales each input's covariance
    with itself by ``1 / rate``, a kernel kernelcli does not compute, so it is refused
    unless ``rate=1`` (nothing dropped: the identity too)."""
    if mode not in ("train", "test"):
        refuse("Dropout", "mode", mode, "'test' or 'train'")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1:
        refuse("Dropout", "rate", rate, "a keep rate in (0, 1]")
    if mode == "train" and rate != 1:
        refuse("Dropout", "mode", mode, "'test' (the identity on the kernel, as in "
               "neural-tangents); mode='train', its default, scales the kernel's diagonal "
               "by 1/rate, which kernelcli does not compute: write Dropout(rate, mode='test')")
    return one("identity")


# neural-tangents' stax names that kernelcli has no kernel for: what differs
_ELEMENTWISE = ("kernelcli's elementwise layers are Relu, LeakyRelu, ABRelu, Abs, Sign, "
                "Erf, Sigmoid_like, Gelu, Sin, Cos, Exp, Gaussian, Rbf, Monomial, "
                "RectifiedMonomial and Hermite")
_MISSING = {
    "GlobalSelfAttention": "kernelcli has no attention layer",
    "AttentionMechanism": "kernelcli has no attention layer",
    "PositionalEmbedding": "kernelcli has no attention layer nor positional embeddings",
    "Aggregate": "kernelcli has no graph aggregation layer",
    "AggregateImplementation": "kernelcli has no graph aggregation layer",
    "Elementwise": f"kernelcli takes no custom nonlinearity; {_ELEMENTWISE}",
    "ElementwiseNumerical": f"kernelcli takes no custom nonlinearity; {_ELEMENTWISE}",
    "ExpNormalized": f"kernelcli has no normalized exponential; {_ELEMENTWISE}",
    "Gabor": f"kernelcli has no Gabor nonlinearity; {_ELEMENTWISE}",
    "Polynomial": f"kernelcli has no general polynomial; {_ELEMENTWISE}",
    "Bool": f"kernelcli has no such nonlinearity; {_ELEMENTWISE}",
    "FanInProd": "kernelcli merges branches with FanInSum or FanInConcat only",
    "DotGeneral": "kernelcli has no DotGeneral layer (use Dense on the channel axis)",
    "Diagonal": "kernelcli has no Diagonal layer",
    "Index": "kernelcli has no Index layer",
    "Slice": "kernelcli has no Slice layer",
    "ImageResize": "kernelcli has no resizing layer (resize the inputs before the call)",
    "MaskedArray": "kernelcli does not mask inputs",
    "supports_masking": "kernelcli does not mask inputs",
    "unmask_fn": "kernelcli does not mask inputs",
    "layer": "kernelcli takes no custom layers: a network is built from kernelcli.stax's "
             "layers",
    "requires": "kernelcli takes no custom layers: a network is built from kernelcli.stax's "
                "layers",
}


def __getattr__(name: str):
    """A neural-tangents name kernelcli lacks: one line saying so and what it offers
    (:class:`~kernelcli.errors.MissingNameError`, an ``AttributeError`` too); any other
    name: the usual ``AttributeError``."""
    from ..errors import MissingNameError

    if name in _MISSING:
        raise MissingNameError(f"stax.{name}: neural-tangents' {name} is not in kernelcli: "
                               f"{_MISSING[name]}; what kernelcli.stax has, and how it "
                               f"differs from neural-tangents: docs/neural-tangents.md")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
