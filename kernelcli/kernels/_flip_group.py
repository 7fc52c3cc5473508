"""Group-averaged kernels (``kernel.augment``): the flipped copies of the second input.

For a network whose kernel is unchanged when both inputs are flipped (checked by
:func:`kernelcli.config.check_augment`), the kernel averaged over a flip group ``G``
is ``K_G(x, y) = mean over g of K(x, g y)``. A pair batch therefore evaluates the
|G| pairs ``(x, g y)`` of each of its pairs as ordinary pairs, against the block's
columns stacked with their flipped copies, and averages each pair's |G| values in
the group's order: the pair program itself is the plain one, only longer.

The flipped copies need no per-input pass of their own: when every layer commutes
with the flip, the spatial variance map that a layer records for ``g y`` is the
one it records for ``y``, flipped (maps without spatial axes, after ``flatten`` or
``global_avg_pool``, are unchanged). The diagonal ``K_G(x, x)`` comes from the
per-input pass, which evaluates the pairs ``(x, g x)`` the same way.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp

Element = tuple[int, ...]  # the spatial axes (from 0) that one group element flips


def flip_rows(a, g: Element):
    """Rows ``a`` (``(n, a1, ..., an, ...)``) with the spatial axes ``g`` flipped."""
    return jnp.flip(a, tuple(1 + ax for ax in g)) if g else a


def flip_variances(variances: Sequence, g: Element, n_spatial: int) -> tuple:
    """Per-input variance maps of the flipped inputs: spatial maps flipped, those of
    layers without spatial axes (``(n,)``) as they are."""
    out = []
    for v in variances:
        if v.ndim not in (1, 1 + n_spatial):  # an equivariant network keeps its axes
            raise AssertionError(f"variance map of shape {v.shape} under a flip")
        out.append(flip_rows(v, g) if v.ndim > 1 else v)
    return tuple(out)


def stacked(group: Sequence[Element], n_spatial: int, x, variances) -> tuple:
    """``x`` and its variances followed by each non-identity element's flipped copy:
    ``(|G| n, ...)``, element-major (copy ``g`` of row ``r`` is row ``g * n + r``)."""
    xs = jnp.concatenate([flip_rows(x, g) for g in group])
    vs = tuple(jnp.concatenate([flip_variances((v,), g, n_spatial)[0] for g in group])
               for v in variances)
    return xs, vs


def expanded(group_size: int, n_cols: int, i, j) -> tuple:
    """The index pairs of ``(x1[i[p]], g x2[j[p]])`` for every ``g``, pair-major
    (pair ``p``'s element ``g`` at ``p * |G| + g``), into the stacked columns."""
    ii = jnp.repeat(i, group_size)
    jj = (j[:, None] + n_cols * jnp.arange(group_size, dtype=j.dtype)[None, :]).reshape(-1)
    return ii, jj


def mean_over(values, group_size: int, axis: int):
    """Mean over the group's axis ``axis`` of ``values`` (of size |G|), summed in the
    group's order (identity first), so it is the same bits on every call."""
    parts = jnp.moveaxis(values, axis, 0)
    total = parts[0]
    for k in range(1, group_size):
        total = total + parts[k]
    return total / group_size
