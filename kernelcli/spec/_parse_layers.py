"""``architecture.layers`` (a YAML list) -> a flat tuple of layer value objects.

Each item is a bare name (``relu``) or a one-key mapping ``{name: params}``.
``repeat`` is expanded inline here, so later stages never see it, and
``leaky_relu: {alpha}`` becomes ``ABRelu(a=alpha, b=1)``. Every layer records
its YAML path in ``where``: ``architecture.layers[3].conv``, or inside a repeat
``architecture.layers[2].repeat.layers[0].conv`` (copies share it).

Every number has a bound, so that a hostile value fails here with its key named:
filter, window and stride sizes 1..1024, widths 1..2**31, ``W_std``/``b_std``
0..1000, the slopes of ``abrelu``/``leaky_relu`` -1000..1000, ``repeat.times``
1..1000, and at most 1000 layers in all once repeats are expanded (each
``residual`` counts as one layer plus those of its branch).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from . import _fields as f
from ._layers import (ABRelu, AvgPool, Conv, Dense, Erf, Flatten, Gelu, GlobalAvgPool,
                      Identity, Layer, LayerNorm, PADDINGS, Relu, Residual)

# Parameters each layer accepts, in the order the messages list them.
PARAMETERS: Dict[str, Tuple[str, ...]] = {
    "abrelu": ("a", "b"),
    "avg_pool": ("window", "strides", "padding"),
    "conv": ("filter", "strides", "padding", "W_std", "b_std", "width"),
    "dense": ("W_std", "b_std", "width"),
    "erf": (),
    "flatten": (),
    "gelu": (),
    "global_avg_pool": (),
    "identity": (),
    "layer_norm": (),
    "leaky_relu": ("alpha",),
    "relu": (),
    "repeat": ("times", "layers"),
    "residual": ("layers",),
}
LAYER_NAMES = tuple(sorted(PARAMETERS))

_SIMPLE = {"erf": Erf, "flatten": Flatten, "gelu": Gelu, "global_avg_pool": GlobalAvgPool,
           "identity": Identity, "layer_norm": LayerNorm, "relu": Relu}


_REQUIRED = object()

MAX_WINDOW = 1024        # filter, window and stride sizes
MAX_WIDTH = 2 ** 31      # channels of dense/conv
MAX_STD = 1000.0         # W_std, b_std: larger ones overflow float32 in a deep net
MAX_SLOPE = 1000.0       # |a|, |b| of abrelu, |alpha| of leaky_relu
MAX_REPEAT = 1000        # repeat.times
MAX_LAYERS = 1000        # layers in all after expanding repeats; bounds the shape check


class _Params:
    """The parameter mapping of one layer item, read key by key with its path."""

    def __init__(self, name: str, raw: Any, path: str):
        self.path = f"{path}.{name}"
        allowed = PARAMETERS[name]
        if not allowed:
            if raw is not None and raw != {}:
                raise f.fail(self.path, f"{name} takes no parameters; got {f.show(raw)}")
            self.raw: dict = {}
            return
        self.raw = f.mapping(raw, self.path, "a mapping of " + ", ".join(allowed))
        f.check_keys(self.raw, self.path, allowed, noun="parameter")

    def at(self, key: str) -> str:
        return f"{self.path}.{key}"

    def required(self, key: str, expected: str) -> Any:
        if self.raw.get(key) is None:
            raise f.fail(self.at(key), f"missing; expected {expected}")
        return self.raw[key]

    def slope(self, key: str) -> float:
        if key not in self.raw:
            self.required(key, "a number")
        return f.number(self.raw[key], self.at(key), minimum=-MAX_SLOPE, maximum=MAX_SLOPE)

    def w_std(self) -> float:
        return f.number(self.raw.get("W_std", 1.0), self.at("W_std"), minimum=0.0,
                        maximum=MAX_STD, expected="a number >= 0")

    def b_std(self) -> Any:
        # An absent b_std is the 0.0 default; an explicit null means "no bias".
        if "b_std" not in self.raw:
            return 0.0
        return f.optional_std(self.raw["b_std"], self.at("b_std"), maximum=MAX_STD)

    def width(self) -> int:
        return f.positive_int(self.raw.get("width", 1), self.at("width"), "a width",
                              maximum=MAX_WIDTH)

    def pair(self, key: str, default: Tuple[int, int], noun: str) -> Tuple[int, int]:
        if key not in self.raw:
            return default
        return f.pair(self.raw[key], self.at(key), noun, maximum=MAX_WINDOW)

    def padding(self, default: str) -> str:
        value = self.raw.get("padding", default)
        return f.choice(value, self.at("padding"), PADDINGS, "a padding")


def _conv(p: _Params) -> Conv:
    return Conv(filter=p.pair("filter", (3, 3), "a filter size"),
                strides=p.pair("strides", (1, 1), "a stride"),
                padding=p.padding("SAME"), W_std=p.w_std(), b_std=p.b_std(),
                width=p.width(), where=p.path)


def _dense(p: _Params) -> Dense:
    return Dense(W_std=p.w_std(), b_std=p.b_std(), width=p.width(), where=p.path)


def _avg_pool(p: _Params) -> AvgPool:
    window = p.pair("window", (2, 2), "a window size")
    return AvgPool(window=window, strides=p.pair("strides", window, "a stride"),
                   padding=p.padding("VALID"), where=p.path)


def _abrelu(p: _Params) -> ABRelu:
    return ABRelu(a=p.slope("a"), b=p.slope("b"), where=p.path)


def _leaky_relu(p: _Params) -> ABRelu:
    return ABRelu(a=p.slope("alpha"), b=1.0, where=p.path)


_BUILDERS: Dict[str, Callable[[_Params], Layer]] = {
    "abrelu": _abrelu, "avg_pool": _avg_pool, "conv": _conv, "dense": _dense,
    "leaky_relu": _leaky_relu,
}


def _name_and_params(item: Any, path: str) -> Tuple[str, Any]:
    """Split one list item into its layer name and raw parameters (None when bare)."""
    if isinstance(item, dict):
        if len(item) != 1:
            raise f.fail(path, f"{f.show(item)} has {len(item)} keys; expected one layer name "
                               "mapped to its parameters (indent the parameters under the name)")
        (name, raw), = item.items()
    elif isinstance(item, str):
        name, raw = item, None
    else:
        raise f.fail(path, f"{f.show(item)} is not a layer; expected a layer name "
                           "or a mapping {name: parameters}")
    if not isinstance(name, str) or name not in PARAMETERS:
        raise f.fail(path, f"unknown layer {f.show(name)}; expected one of "
                           f"{', '.join(LAYER_NAMES)}{f.suggestion(name, LAYER_NAMES)}")
    return name, raw


_LIST = "a list of at least one layer"
_CAP = f"expected at most {MAX_LAYERS} layers in all, once repeats are expanded"


class _Budget:
    """The layers parsed so far, all lists together: refuses the one past MAX_LAYERS."""

    def __init__(self):
        self.used = 0

    def take(self, n: int, path: str, why: str = "") -> None:
        self.used += n
        if self.used > MAX_LAYERS:
            raise f.fail(path, f"{why}the architecture has {self.used} layers here; {_CAP}")


def _residual(raw: Any, path: str, budget: _Budget) -> Residual:
    here = f"{path}.residual"
    budget.take(1, here)
    # Both `residual: [...]` and `residual: {layers: [...]}` are accepted.
    if isinstance(raw, dict):
        p = _Params("residual", raw, path)
        branch = _parse(p.required("layers", _LIST), p.at("layers"), budget)
        return Residual(layers=tuple(branch), where=here)
    return Residual(layers=tuple(_parse(raw, here, budget)), where=here)


def _repeat(raw: Any, path: str, budget: _Budget) -> List[Layer]:
    p = _Params("repeat", raw, path)
    times = f.positive_int(p.required("times", "a positive integer"), p.at("times"),
                           "a repeat count", maximum=MAX_REPEAT)
    before = budget.used
    body = _parse(p.required("layers", _LIST), p.at("layers"), budget)
    n = budget.used - before  # residual branches included
    budget.take(n * (times - 1), p.path, f"{times} times {n} layer(s): ")
    return body * times


def _parse(items: Any, path: str, budget: _Budget) -> List[Layer]:
    if not isinstance(items, list):
        raise f.fail(path, f"{f.show(items)} is not a list of layers; expected {_LIST}")
    if not items:
        raise f.fail(path, f"empty; expected {_LIST}")
    layers: List[Layer] = []
    for i, item in enumerate(items):
        item_path = f"{path}[{i}]"
        name, raw = _name_and_params(item, item_path)
        if name == "repeat":
            layers.extend(_repeat(raw, item_path, budget))
        elif name == "residual":
            layers.append(_residual(raw, item_path, budget))
        else:
            budget.take(1, f"{item_path}.{name}")
            if name in _SIMPLE:
                _Params(name, raw, item_path)  # refuses any parameter given
                layers.append(_SIMPLE[name](where=f"{item_path}.{name}"))
            else:
                layers.append(_BUILDERS[name](_Params(name, raw, item_path)))
    return layers


def parse_layers(items: Any, path: str = "architecture.layers") -> List[Layer]:
    """Parse a YAML layer list found at ``path``; repeats come back expanded.

    Raises ConfigError for an empty list, an unknown layer or parameter, a
    parameter of the wrong type or out of its range, or more than
    ``MAX_LAYERS`` layers once repeats are expanded.
    """
    return _parse(items, path, _Budget())
