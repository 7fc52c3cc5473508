"""Readers of the settings that both a config and a library call take: the kernel's
``dtype``, the ``engine`` and the ``memory`` budget.

``_load`` reads them under their YAML paths (``kernel.dtype``, ``compute.engine``,
``compute.memory``); :func:`kernelcli.kernel_fn`'s call reads its arguments of the
same names through the same readers, so both accept the same values and refuse the
others with the same message, each naming where the value came from.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _fields as f
from ._allowed import DTYPES, ENGINES
from ._sizes import parse_size


def dtype(value: Any, path: str) -> str:
    """One of ``DTYPES``, read case-insensitively."""
    return f.choice(value, path, DTYPES, "a dtype")


def engine(value: Any, path: str) -> str:
    """One of ``ENGINES``, read case-insensitively."""
    return f.choice(value, path, ENGINES, "an engine")


def memory(value: Any, path: str) -> Optional[int]:
    """A memory budget: ``auto`` (any case) -> None, else a positive size in bytes."""
    if isinstance(value, str) and value.lower() == "auto":
        return None
    if isinstance(value, bool):  # parse_size would echo Python's True, not YAML's true
        raise f.fail(path, f"{f.show(value)} is not a size; expected auto or a "
                           "size such as '8GiB'")
    try:
        budget = parse_size(value)
    except ValueError as e:
        raise f.fail(path, f"{e}, or auto") from None
    if budget == 0:
        raise f.fail(path, f"{f.show(value)} is zero bytes; expected auto "
                           "or a positive size such as '8GiB'")
    return budget
