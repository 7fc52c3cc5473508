"""``architecture.layers`` (a YAML list) -> a flat tuple of layer value objects.

Each item is a bare name (``relu``) or a one-key mapping ``{name: params}``.
``repeat`` is expanded inline here, so later stages never see it, and
``leaky_relu: {alpha}`` becomes ``ABRelu(a=alpha, b=1)``. Every layer records
its YAML path in ``where``: ``architecture.layers[3].conv``, or inside a repeat
``architecture.layers[2].repeat.layers[0].conv`` (copies share it).

Which names exist, which parameters each takes and how they are read is each
layer's declaration (``_layers``); this module reads the list itself, and
``repeat`` and the branch of ``residual``, which are lists of layers in turn.

Every number has a bound, so that a hostile value fails here with its key named:
filter, window and stride sizes 1..1024, widths 1..2**31, ``W_std``/``b_std``
0..1000, the slopes of ``abrelu``/``leaky_relu`` -1000..1000, ``repeat.times``
1..1000, and at most 1000 layers in all once repeats are expanded (each
``residual`` counts as one layer plus those of its branch).
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from . import _fields as f
from ._layers import Layer
from ._params import Params
from ._registry import layer_types, spelling

# `repeat` is syntax, not a layer: expanded here, it has no class or LayerType.
_REPEAT = "repeat"

# Parameters each YAML name accepts, in the order the messages list them: those the
# layer declarations (``_layers``) give, and ``repeat``'s.
PARAMETERS: Dict[str, Tuple[str, ...]] = dict(sorted(
    [(s.name, s.parameters) for t in layer_types() for s in t.spellings]
    + [(_REPEAT, ("times", "layers"))]))
LAYER_NAMES = tuple(sorted(PARAMETERS))

MAX_REPEAT = 1000        # repeat.times
MAX_LAYERS = 1000        # layers in all after expanding repeats; bounds the shape check


def _params(name: str, raw: Any, path: str) -> Params:
    return Params(name, raw, path, PARAMETERS[name])


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


def _branch(name: str, raw: Any, path: str, budget: _Budget) -> Layer:
    """A layer holding a branch (``residual``), of class ``cls(layers=...)``."""
    cls = spelling(name)[0].cls
    here = f"{path}.{name}"
    budget.take(1, here)
    # Both `residual: [...]` and `residual: {layers: [...]}` are accepted.
    if isinstance(raw, dict):
        p = _params(name, raw, path)
        branch = _parse(p.required("layers", _LIST), p.at("layers"), budget)
        return cls(layers=tuple(branch), where=here)
    return cls(layers=tuple(_parse(raw, here, budget)), where=here)


def _repeat(raw: Any, path: str, budget: _Budget) -> List[Layer]:
    p = _params(_REPEAT, raw, path)
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
        if name == _REPEAT:
            layers.extend(_repeat(raw, item_path, budget))
            continue
        t, sp = spelling(name)
        if t.branch:
            layers.append(_branch(name, raw, item_path, budget))
            continue
        budget.take(1, f"{item_path}.{name}")
        p = _params(name, raw, item_path)  # without parameters: refuses any given
        layers.append(sp.parse(p) if sp.parse else t.cls(where=p.path))
    return layers


def parse_layers(items: Any, path: str = "architecture.layers") -> List[Layer]:
    """Parse a YAML layer list found at ``path``; repeats come back expanded.

    Raises ConfigError for an empty list, an unknown layer or parameter, a
    parameter of the wrong type or out of its range, or more than
    ``MAX_LAYERS`` layers once repeats are expanded.
    """
    return _parse(items, path, _Budget())
