"""The parameter mapping of one YAML layer item, read key by key with its path.

Shared by the layer declarations (``_layers``), which read their own
parameters, and by ``_parse_layers``, which reads those of ``repeat`` and hands
in the reader of layer lists (``residual`` and ``parallel`` hold some). Every
number has a bound, so that a hostile value fails here with its key named.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

from . import _fields as f
from ._layers import PADDINGS

MAX_WINDOW = 1024        # filter, window and stride sizes
MAX_WIDTH = 2 ** 31      # channels of dense/conv
MAX_STD = 1000.0         # W_std, b_std: larger ones overflow float32 in a deep net
MAX_SLOPE = 1000.0       # |a|, |b| of abrelu, |alpha| of leaky_relu, the scales of sin, erf...

LAYERS = "a list of at least one layer"
BRANCH = "a list of layers ([] for the identity)"
BRANCHES = "a list of at least one branch, each a list of layers ([] for the identity)"


class Params:
    """The parameters of layer ``name`` found at ``path``; ``allowed`` are the keys it
    accepts (none: any parameter given is refused, though ``{}`` and null pass).

    ``bare``: the parameter that anything but a mapping stands for (``residual:
    [...]``), read at the layer's own path. ``read(items, path, branch)``: the
    reader of a layer list, ``branch`` true for one that may be empty.
    """

    def __init__(self, name: str, raw: Any, path: str, allowed: Sequence[str],
                 bare: Optional[str] = None, *,
                 read: Callable[[Any, str, bool], tuple]):
        self.path = f"{path}.{name}"
        self._bare, self._read = None, read
        self.raw: dict
        if bare is not None and not isinstance(raw, dict):
            self.raw = {bare: raw}
            self._bare = bare
            return
        if not allowed:
            if raw is not None and raw != {}:
                raise f.fail(self.path, f"{name} takes no parameters; got {f.show(raw)}")
            self.raw = {}
            return
        self.raw = f.mapping(raw, self.path, "a mapping of " + ", ".join(allowed))
        f.check_keys(self.raw, self.path, tuple(allowed), noun="parameter")

    def at(self, key: str) -> str:
        return self.path if key == self._bare else f"{self.path}.{key}"

    def required(self, key: str, expected: str) -> Any:
        if self.raw.get(key) is None:
            raise f.fail(self.at(key), f"missing; expected {expected}")
        return self.raw[key]

    def choice(self, key: str, choices: Sequence[str], noun: str) -> str:
        """A required one of ``choices``."""
        value = self.required(key, "one of " + ", ".join(choices))
        return f.choice(value, self.at(key), choices, noun)

    def layers(self, key: str) -> tuple:
        """The layer list under ``key``: at least one layer."""
        items = self.raw[key] if key == self._bare else self.required(key, LAYERS)
        return self._read(items, self.at(key), False)

    def branches(self, key: str) -> tuple[tuple, ...]:
        """The branches under ``key``: a list of at least one layer list, each of
        which may be empty (the identity)."""
        items, at = self.required(key, BRANCHES), self.at(key)
        if not isinstance(items, list):
            raise f.fail(at, f"{f.show(items)} is not a list of branches; expected {BRANCHES}")
        if not items:
            raise f.fail(at, f"empty; expected {BRANCHES}")
        return tuple(self._read(branch, f"{at}[{i}]", True) for i, branch in enumerate(items))

    def slope(self, key: str) -> float:
        if key not in self.raw:
            self.required(key, "a number")
        return f.number(self.raw[key], self.at(key), minimum=-MAX_SLOPE, maximum=MAX_SLOPE)

    def scale(self, key: str, default: float, minimum: float = -MAX_SLOPE) -> float:
        """An optional scale or shift of an elementwise nonlinearity (``sin``'s ``a``,
        ``b``, ``c``, ``rbf``'s ``gamma`` from 0): a number from ``minimum`` to 1000,
        ``default`` when absent."""
        return f.number(self.raw.get(key, default), self.at(key), minimum=minimum,
                        maximum=MAX_SLOPE)

    def degree(self, maximum: int, default: int = 2) -> int:
        """A polynomial degree, an integer from 0 to ``maximum``."""
        return f.integer(self.raw.get("degree", default), self.at("degree"), minimum=0,
                         maximum=maximum)

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

    def pair(self, key: str, default, noun: str) -> Union[int, tuple[int, ...]]:
        """Sizes along the spatial axes (``_fields.pair``): an int ``k`` (``k`` along every
        axis) or a tuple of 1 to 3 ints, one per axis. An absent key gives ``default``,
        where a default written for images, ``(k, k)``, means ``k`` along every axis."""
        if key not in self.raw:
            if isinstance(default, tuple) and default and len(set(default)) == 1:
                return default[0]
            return default
        return f.pair(self.raw[key], self.at(key), noun, maximum=MAX_WINDOW)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        return default if value is None else f.boolean(value, self.at(key))

    def padding(self, default: str) -> str:
        value = self.raw.get("padding", default)
        return f.choice(value, self.at("padding"), PADDINGS, "a padding")
