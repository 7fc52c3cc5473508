"""The parameter mapping of one YAML layer item, read key by key with its path.

Shared by the layer declarations (``_layer_types``), which read their own
parameters, and by ``_parse_layers``, which reads those of ``repeat`` and
``residual``. Every number has a bound, so that a hostile value fails here with
its key named.
"""

from __future__ import annotations

from typing import Any, Sequence, Tuple

from . import _fields as f
from ._layers import PADDINGS

MAX_WINDOW = 1024        # filter, window and stride sizes
MAX_WIDTH = 2 ** 31      # channels of dense/conv
MAX_STD = 1000.0         # W_std, b_std: larger ones overflow float32 in a deep net
MAX_SLOPE = 1000.0       # |a|, |b| of abrelu, |alpha| of leaky_relu


class Params:
    """The parameters of layer ``name`` found at ``path``; ``allowed`` are the keys it
    accepts (none: any parameter given is refused, though ``{}`` and null pass)."""

    def __init__(self, name: str, raw: Any, path: str, allowed: Sequence[str]):
        self.path = f"{path}.{name}"
        if not allowed:
            if raw is not None and raw != {}:
                raise f.fail(self.path, f"{name} takes no parameters; got {f.show(raw)}")
            self.raw: dict = {}
            return
        self.raw = f.mapping(raw, self.path, "a mapping of " + ", ".join(allowed))
        f.check_keys(self.raw, self.path, tuple(allowed), noun="parameter")

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

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        return default if value is None else f.boolean(value, self.at(key))

    def padding(self, default: str) -> str:
        value = self.raw.get("padding", default)
        return f.choice(value, self.at("padding"), PADDINGS, "a padding")
