"""``architecture.layers`` (a YAML list) -> a flat tuple of layer value objects.

Each item is a bare name (``relu``) or a one-key mapping ``{name: params}``.
``repeat`` is expanded inline here, so later stages never see it, and
``leaky_relu: {alpha}`` becomes ``ABRelu(a=alpha, b=1)``. Every layer records
its YAML path in ``where``: ``architecture.layers[3].conv``, or inside a repeat
``architecture.layers[2].repeat.layers[0].conv`` (copies share it).

Which names exist, which parameters each takes and how they are read is each
layer's declaration (``_layers``); this module reads the list itself and
``repeat``, and hands each declaration the reader of the layer lists it holds
(the branch of ``residual``, the branches of ``parallel``): lists in turn, so
``repeat`` works inside them. Inside a branch of ``parallel`` the paths read
``architecture.layers[2].parallel.branches[1][0].conv``.

Every number has a bound, so that a hostile value fails here with its key named:
filter, window and stride sizes 1..1024, widths 1..2**31, ``W_std``/``b_std``
0..1000, the slopes of ``abrelu``/``leaky_relu`` -1000..1000, ``repeat.times``
1..1000, and at most 1000 layers in all once repeats are expanded (each
``residual`` counts as one layer plus those of its branch, each ``parallel`` as
one plus one per branch plus those of its branches).
"""

from __future__ import annotations

from typing import Any

from . import _fields as f
from ._layer_types import Layer
from ._params import BRANCH, LAYERS, Params
from ._registry import layer_types, spelling

# `repeat` is syntax, not a layer: expanded here, it has no class or LayerType.
_REPEAT = "repeat"

# Parameters each YAML name accepts, in the order the messages list them: those the
# layer declarations (``_layers``) give, and ``repeat``'s.
PARAMETERS: dict[str, tuple[str, ...]] = dict(sorted(
    [(s.name, s.parameters) for t in layer_types() for s in t.spellings]
    + [(_REPEAT, ("times", "layers"))]))
LAYER_NAMES = tuple(sorted(PARAMETERS))

MAX_REPEAT = 1000        # repeat.times
MAX_LAYERS = 1000        # layers in all after expanding repeats; bounds the shape check


def _name_and_params(item: Any, path: str) -> tuple[str, Any]:
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


_CAP = f"expected at most {MAX_LAYERS} layers in all, once repeats are expanded"


class _Budget:
    """The layers parsed so far, all lists together: refuses the one past MAX_LAYERS."""

    def __init__(self):
        self.used = 0

    def take(self, n: int, path: str, why: str = "") -> None:
        self.used += n
        if self.used > MAX_LAYERS:
            raise f.fail(path, f"{why}the architecture has {self.used} layers here; {_CAP}")


def _repeat(p: Params, budget: _Budget) -> list[Layer]:
    times = f.positive_int(p.required("times", "a positive integer"), p.at("times"),
                           "a repeat count", maximum=MAX_REPEAT)
    before = budget.used
    body = list(p.layers("layers"))
    n = budget.used - before  # branches included
    budget.take(n * (times - 1), p.path, f"{times} times {n} layer(s): ")
    return body * times


def _parse(items: Any, path: str, budget: _Budget, branch: bool = False) -> list[Layer]:
    """The layers of the list ``items`` found at ``path``; a ``branch`` may be empty."""
    expected = BRANCH if branch else LAYERS
    if not isinstance(items, list):
        raise f.fail(path, f"{f.show(items)} is not a list of layers; expected {expected}")
    if not items and not branch:
        raise f.fail(path, f"empty; expected {expected}")

    def read(inner: Any, at: str, branch: bool) -> tuple:
        if branch:  # each branch counts as a layer: an empty one is an identity
            budget.take(1, at)
        return tuple(_parse(inner, at, budget, branch))

    layers: list[Layer] = []
    for i, item in enumerate(items):
        item_path = f"{path}[{i}]"
        name, raw = _name_and_params(item, item_path)
        if name == _REPEAT:
            layers.extend(_repeat(Params(name, raw, item_path, PARAMETERS[name], read=read),
                                  budget))
            continue
        t, sp = spelling(name)
        budget.take(1, f"{item_path}.{name}")
        # without parameters: refuses any given
        p = Params(name, raw, item_path, PARAMETERS[name], bare=sp.bare, read=read)
        layers.append(sp.parse(p) if sp.parse else t.cls(where=p.path))
    return layers


def parse_layers(items: Any, path: str = "architecture.layers") -> list[Layer]:
    """Parse a YAML layer list found at ``path``; repeats come back expanded.

    Raises ConfigError for an empty list, an unknown layer or parameter, a
    parameter of the wrong type or out of its range, or more than
    ``MAX_LAYERS`` layers once repeats are expanded.
    """
    return _parse(items, path, _Budget())
