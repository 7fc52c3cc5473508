"""The layer registry: one :class:`LayerType` record per layer class.

A layer type lives in several stages (parsing the YAML, the shape and order
check, the kernel maths, the Monte-Carlo oracle); each stage used to recognise
it with its own chain of ``isinstance`` tests, so adding a layer meant finding
every chain. The spec's part of a layer is now declared once, next to its
dataclass in its family's module (``_layers``, ``_layers_elementwise``,
``_layers_spatial``: each a ``TYPES`` tuple), and every spec stage looks its
layer up here. The kernels keep their own table keyed by the same classes
(:mod:`kernelcli.kernels._maps`), because spec must not know about jax.

This module holds only the record and the lookup, so that the modules the
declarations draw on (parameter readers, shape rules) can import it without a
cycle. The table is filled in one place, :mod:`kernelcli.config._layer_types`,
which imports every family module and registers its ``TYPES`` in order;
``kernelcli.config`` imports it first, so the table is whole before any lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional


@dataclass(frozen=True)
class Spelling:
    """One YAML name of a layer type: its parameters (in the order messages list them)
    and the reader that turns them into the dataclass. ``parse`` is ``None`` for a
    layer without parameters (``relu``); a spelling without parameters may still
    have one, to fix them (``abs`` is the ``abrelu`` with ``a=-1, b=1``). ``bare``:
    the parameter that a bare list stands for (``residual: [...]`` is
    ``residual: {layers: [...]}``)."""

    name: str
    parameters: tuple[str, ...] = ()
    parse: Optional[Callable[[Any], Any]] = None
    bare: Optional[str] = None


@dataclass(frozen=True)
class LayerType:
    """Everything the spec knows about one layer class.

    ``shape``: ``(layer, state) -> state``, the layer's shape rule (what it does
    to the shape and to whether its output is Gaussian; see ``_shapes``).
    ``needs_gaussian``: the order rule of nonlinearities, ``layer_norm`` and
    ``residual``, checked before ``shape``. ``affine``: its output is a fresh
    Gaussian (``dense``/``conv``), which is what a residual branch must end in.
    ``reads_variances``: its kernel map needs each input's own variance (the
    kernels run a per-input pass for it). ``pools``: it mixes spatial positions,
    so the full spatial covariance is needed up to it. ``branches``: for a layer
    that holds layer lists (``residual``, ``parallel``), ``layer -> (list, ...)``,
    the lists that the stages walk too, one per branch (a residual's are its
    identity, ``()``, and its branch); ``None`` for every other layer. ``also``:
    further YAML spellings (``leaky_relu`` is an ``ABRelu``).

    ``flip``: the layer's rule under ``kernel.augment`` (``_augment``): ``"alike"``,
    it treats every position alike (or averages over all of them), so it keeps any
    flip equivariance; ``"window"``, a windowed layer, equivariant along an axis when
    its padding is equal at both ends and its windows tile the axis; ``"branches"``,
    equivariant when all its branches are; ``None``, no rule written: refused.
    ``window``: ``layer -> sizes``, the window of a windowed layer (``filter`` or
    ``window``, one entry per spatial axis once bound).
    """

    cls: type
    name: str
    shape: Callable[[Any, Any], Any]
    parameters: tuple[str, ...] = ()
    parse: Optional[Callable[[Any], Any]] = None
    needs_gaussian: bool = False
    affine: bool = False
    reads_variances: bool = False
    pools: bool = False
    branches: Optional[Callable[[Any], tuple[tuple[Any, ...], ...]]] = None
    bare: Optional[str] = None
    also: tuple[Spelling, ...] = ()
    flip: Optional[str] = None
    window: Optional[Callable[[Any], Any]] = None

    @property
    def branch(self) -> bool:
        """Whether the layer holds branches of layers."""
        return self.branches is not None

    @property
    def spellings(self) -> tuple[Spelling, ...]:
        return (Spelling(self.name, self.parameters, self.parse, self.bare),) + self.also


_BY_CLASS: dict[type, LayerType] = {}
_BY_NAME: dict[str, tuple[LayerType, Spelling]] = {}


FLIP_RULES = ("alike", "window", "branches")


def register(*types: LayerType) -> tuple[LayerType, ...]:
    """Add ``types`` to the registry (called by ``_layer_types`` alone); a class or
    YAML name declared twice, or a flip rule not in ``FLIP_RULES``, is a bug."""
    for t in types:
        if t.cls in _BY_CLASS:
            raise ValueError(f"layer class {t.cls.__name__} is declared twice")
        if t.flip is not None and t.flip not in FLIP_RULES:
            raise ValueError(f"layer {t.name}: flip rule {t.flip!r} is not one of {FLIP_RULES}")
        if t.flip == "window" and t.window is None:
            raise ValueError(f"layer {t.name}: a window flip rule needs its window")
        for s in t.spellings:
            if s.name in _BY_NAME:
                raise ValueError(f"layer name {s.name!r} is declared twice")
        _BY_CLASS[t.cls] = t
        for s in t.spellings:
            _BY_NAME[s.name] = (t, s)
    return types


def layer_type(layer: Any) -> LayerType:
    """The record of a layer value object (or of its class)."""
    cls = layer if isinstance(layer, type) else type(layer)
    try:
        return _BY_CLASS[cls]
    except KeyError:
        raise TypeError(f"{layer!r} is not a layer") from None  # a programming error


def spelling(name: str) -> tuple[LayerType, Spelling]:
    """``(type, spelling)`` of a YAML layer name; KeyError when it names no layer."""
    return _BY_NAME[name]


def branches(layer: Any) -> tuple[tuple[Any, ...], ...]:
    """The layer lists ``layer`` holds, one per branch; ``()`` for a layer without any."""
    t = layer_type(layer)
    return t.branches(layer) if t.branches else ()


def walk(layers: Iterable[Any]) -> Iterator[Any]:
    """Every layer of ``layers``, each followed by those of its branches, in order."""
    for layer in layers:
        yield layer
        for branch in branches(layer):
            yield from walk(branch)


def layer_types() -> tuple[LayerType, ...]:
    """Every registered type, in declaration order."""
    return tuple(_BY_CLASS.values())
