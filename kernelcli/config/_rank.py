"""Layers bound to the rank of their input: one size per spatial axis.

A configuration is parsed before its data is opened, so a layer's ``filter``,
``window`` and ``strides`` (:data:`SPATIAL_FIELDS`) may still be one int ``k``
("``k`` along every spatial axis", also what an absent key means) or a list of
any length from 1 to 3. Once the input's shape is known, :func:`bind_layer`
turns the int into a tuple of the input's rank and refuses a list of another
length, naming the key. The shape check binds each layer before its shape rule
runs (``_shapes.step``), and the kernels take the architecture bound to the
input (:func:`bind_architecture`), so both only ever see tuples with one entry
per spatial axis: ``len(layer.filter)`` is the number of spatial axes.

A layer type with a spatial parameter of another name adds it to
:data:`SPATIAL_FIELDS`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence, Union

from ..errors import ConfigError
from ._fields import MAX_AXES, short_path, show

SPATIAL_FIELDS = ("filter", "window", "strides")

# The per-example shape of an input with n spatial axes, for messages.
SHAPE_NAMES = {1: "(L, C)", 2: "(H, W, C)", 3: "(D, H, W, C)"}


def bound_axes(value: Union[int, tuple[int, ...]]) -> tuple[int, ...]:
    """A spatial field of a bound layer (the kernels' layers): its tuple. An int is a
    layer that was never bound, a bug."""
    if not isinstance(value, tuple):
        raise TypeError(f"{value!r}: a spatial field of a layer not bound to its input")
    return value


def _axes(n: int) -> str:
    return f"{n} spatial axis" if n == 1 else f"{n} spatial axes"


def _is_layer(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _bound(layer: Any, n: int, shape: tuple[int, ...]) -> dict:
    """The spatial fields of ``layer`` that change when bound to ``n`` axes."""
    changes = {}
    for field in dataclasses.fields(layer):
        if field.name not in SPATIAL_FIELDS:
            continue
        value = getattr(layer, field.name)
        if isinstance(value, int) and not isinstance(value, bool):
            changes[field.name] = (value,) * n
        elif isinstance(value, tuple) and len(value) != n:
            where = f"{short_path(layer.where)}.{field.name}" if getattr(layer, "where", "") \
                else field.name
            entries = "entry" if len(value) == 1 else "entries"
            ints = "integer" if n == 1 else "integers"
            raise ConfigError(
                f"{where}: {show(list(value))} has {len(value)} {entries} but the input has "
                f"{_axes(n)} (shape {shape}); expected a positive integer or a list of {n} "
                f"positive {ints}")
    return changes


def bind_layer(layer: Any, shape: Sequence[int]) -> Any:
    """``layer`` with its own spatial fields bound to ``shape`` (one example's shape at
    the layer's input: spatial sizes, then channels); a vector input (no spatial axis)
    leaves it as it is, for the shape rule to refuse a spatial layer there. Branches
    are not entered: their layers are bound when the check reaches them."""
    shape = tuple(shape)
    n = len(shape) - 1
    if n < 1:
        return layer
    changes = _bound(layer, n, shape)
    return dataclasses.replace(layer, **changes) if changes else layer


def _bind_tree(value: Any, shape: tuple[int, ...]) -> Any:
    if _is_layer(value):
        changes = _bound(value, len(shape) - 1, shape)
        for field in dataclasses.fields(value):
            if field.name in SPATIAL_FIELDS:
                continue
            inner = getattr(value, field.name)
            if isinstance(inner, tuple) and inner:
                bound = _bind_tree(inner, shape)
                if bound is not inner:
                    changes[field.name] = bound
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, tuple) and any(_is_layer(v) or isinstance(v, tuple) for v in value):
        items = tuple(_bind_tree(v, shape) for v in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def bind_layers(layers: Sequence[Any], input_shape: Sequence[int]) -> tuple[Any, ...]:
    """Every layer of ``layers``, branches included, bound to the network's input of
    one example's shape ``input_shape`` (spatial layers only ever see that rank: none
    may follow ``flatten`` or ``global_avg_pool``). Vector inputs: unchanged."""
    shape = tuple(input_shape)
    if len(shape) < 2:
        return tuple(layers)
    if len(shape) - 1 > MAX_AXES:
        raise ConfigError(f"input shape {shape} has {len(shape) - 1} spatial axes; at most "
                          f"{MAX_AXES} are supported")
    return tuple(_bind_tree(layer, shape) for layer in layers)


def bind_architecture(arch: Any, input_shape: Sequence[int]) -> Any:
    """``arch`` (an :class:`~kernelcli.config.Architecture`) with every layer bound to
    inputs of one example's shape ``input_shape`` (:func:`bind_layers`)."""
    layers = bind_layers(arch.layers, input_shape)
    readouts = arch.readouts
    if readouts is not None:  # a head's spatial layers see the input's rank too
        readouts = dataclasses.replace(readouts, head=bind_layers(readouts.head, input_shape))
        if all(a is b for a, b in zip(readouts.head, arch.readouts.head, strict=True)):
            readouts = arch.readouts
    if all(a is b for a, b in zip(layers, arch.layers, strict=True)) and readouts is arch.readouts:
        return arch
    return dataclasses.replace(arch, layers=layers, readouts=readouts)


def _images_tree(value: Any) -> Any:
    if _is_layer(value):
        changes = {}
        for field in dataclasses.fields(value):
            inner = getattr(value, field.name)
            if field.name in SPATIAL_FIELDS:
                if isinstance(inner, int) and not isinstance(inner, bool):
                    changes[field.name] = (inner, inner)
            elif isinstance(inner, tuple) and inner:
                changes[field.name] = _images_tree(inner)
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, tuple):
        return tuple(_images_tree(v) for v in value)
    return value


def as_pairs(arch: Any) -> Any:
    """``arch`` with every one-int spatial size ``k`` written ``(k, k)``: how kernelcli
    recorded every size before it took inputs of other ranks than images. For run
    fingerprints, which so stay those of runs made then; no valid configuration is
    confused with another by it (a list of 2 entries is valid only on images, where
    ``k`` is ``(k, k)``)."""
    readouts = arch.readouts
    if readouts is not None:
        readouts = dataclasses.replace(readouts, head=_images_tree(tuple(readouts.head)))
    return dataclasses.replace(arch, layers=_images_tree(tuple(arch.layers)),
                               readouts=readouts)

