"""Byte sizes as users write them: ``"8GiB"``, ``"512 MiB"``, ``"1.5GB"``, ``1000000``.

Decimal units (B, KB, MB, GB, TB) are powers of 1000, binary units (KiB, MiB,
GiB, TiB) powers of 1024. The unit's letters are read case-insensitively
(``8gib`` is ``8GiB``) since nobody means millibits in a memory budget.

A size is at most ``MAX_SIZE`` (2**60 bytes, 1024 PiB): far above any memory,
and small enough that every product of sizes stays exact. These helpers raise
:class:`ValueError`; callers that know which YAML key or
command-line option the text came from turn it into their own error.
"""

from __future__ import annotations

import re
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

from ._fields import show  # echoes a value cut short: the text may be the whole config

_UNITS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4,
    "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "tib": 1024 ** 4,
}
_UNIT_NAMES = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*")
_EXPECTED = "expected a number of bytes such as 1000000, '512MiB', '8GiB' or '1.5GB'"
MAX_SIZE = 2 ** 60
_MAX_TEXT = 64  # characters of a size written as text: "1048576 TiB" needs 11


def _bounded(n: int, text) -> int:
    if n > MAX_SIZE:
        raise ValueError(f"{show(text)} is too large; expected a size of at most 2**60 "
                         f"bytes ({MAX_SIZE // 1024 ** 4} TiB)")
    return n


def parse_size(text: str | int) -> int:
    """Return the number of bytes that ``text`` denotes (an int from 0 to MAX_SIZE).

    An int is taken as bytes. Fractions of a byte are dropped ("1.0001KB" is
    1000 bytes), since a size here is a budget, not an exact count.
    Raises ValueError naming the text and the accepted forms.
    """
    # bool is an int subclass; YAML `true` is never meant as one byte.
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise ValueError(f"{show(text)} is not a size; {_EXPECTED}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{show(text)} is negative; {_EXPECTED}")
        return _bounded(text, text)
    # The length bound also keeps the regex (three \s* around optional parts) linear.
    match = _SIZE.fullmatch(text) if len(text) <= _MAX_TEXT else None
    unit = match and _UNITS.get(match.group(2).lower())
    if not match or unit is None:
        raise ValueError(f"{show(text)} is not a size; {_EXPECTED} (units B, KB, MB, GB, "
                         "TB, KiB, MiB, GiB, TiB)")
    try:
        # Decimal keeps "1.1GB" exact where float would give 1099999999.9999998.
        value = Decimal(match.group(1)) * unit
    except InvalidOperation:  # pragma: no cover - the regex admits only digits
        raise ValueError(f"{show(text)} is not a size; {_EXPECTED}") from None
    return _bounded(int(value.to_integral_value(rounding=ROUND_FLOOR)), text)


def format_size(n: int) -> str:
    """``n`` bytes in the largest binary unit that fits, for messages: ``1536 -> "1.5 KiB"``,
    ``16 * 2**30 -> "16 GiB"``; three significant figures, exact bytes below 1 KiB.

    The one formatter of sizes: every message and table of kernelcli uses it.
    """
    size = float(n)
    if abs(size) < 1024:
        return f"{int(n)} B"
    for unit in _UNIT_NAMES[1:]:
        size /= 1024
        if abs(size) < 1024 or unit == _UNIT_NAMES[-1]:
            break
    return f"{size:.3g} {unit}" if abs(size) < 100 else f"{size:.0f} {unit}"
