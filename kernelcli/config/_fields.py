"""Readers for single YAML values, each naming its YAML path in the errors it raises.

Every reader takes the raw value from the YAML loader and the dotted path it
came from (``architecture.layers[0].conv.W_std``) and returns the validated
Python value, or raises :class:`~kernelcli.errors.ConfigError` with a one-line
message: path, the offending value echoed back, and what would be accepted.
The file name is prefixed later, by the loader, which alone knows it.

Every number is bounded (the callers pass ``maximum``), so that a hostile value
fails here, with its key named, instead of overflowing somewhere downstream.
Integers are YAML integers only: ``true`` and ``3.0`` are refused, not coerced.
"""

from __future__ import annotations

import datetime
import difflib
import math
import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from ..errors import ConfigError

_MAX_SHOWN = 60
# Raw characters produced before whitespace is collapsed and the text cut; a
# little over _MAX_SHOWN so that runs of spaces still leave something to show.
_SHOW_BUDGET = 4 * _MAX_SHOWN
MAX_STRING = 4096          # characters of a path, array name or address (PATH_MAX)


class _Full(Exception):
    """The shown text has reached its budget: stop walking the value."""


class _Writer:
    def __init__(self, budget: int):
        self.parts: list[str] = []
        self.left = budget

    def write(self, text: str) -> None:
        self.parts.append(text[:max(self.left, 0)])
        self.left -= len(text)
        if self.left < 0:
            raise _Full


def _digits(n: int) -> int:
    """The number of decimal digits of ``n`` (without str(), which refuses huge ints)."""
    n = abs(n)
    d = max(1, int(n.bit_length() * 0.30102999566398120) + 1)
    while d > 1 and n < 10 ** (d - 1):
        d -= 1
    while n >= 10 ** d:
        d += 1
    return d


def _emit(value: Any, out: _Writer) -> None:
    """Python's repr of ``value``, written piece by piece until ``out`` is full.

    Each call writes at least one character before it descends, so the walk ends
    after at most the budget's number of calls, however large, deep or cyclic
    (YAML aliases) the value is.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        out.write(f"an integer of {_digits(value)} digits")
    elif isinstance(value, (str, bytes)):
        out.write(repr(value[:out.left + 1]))
    elif isinstance(value, (list, tuple, set, frozenset, dict)):
        if isinstance(value, (set, frozenset)) and not value:
            out.write("set()")
            return
        opening, closing = {list: ("[", "]"), tuple: ("(", ")")}.get(type(value), ("{", "}"))
        out.write(opening)
        for i, item in enumerate(value):
            if i:
                out.write(", ")
            _emit(item, out)
            if isinstance(value, dict):
                out.write(": ")
                _emit(value[item], out)
        out.write(closing)
    elif value is None or isinstance(value, (bool, int, float)):
        out.write(repr(value))
    elif isinstance(value, (datetime.date, datetime.datetime)):  # YAML timestamps
        out.write(value.isoformat())
    else:
        out.write(f"<{type(value).__name__}>")  # nothing else comes from safe YAML


def show(value: Any) -> str:
    """Echo a YAML value back to its author, in YAML spelling where Python's differs.

    The text is at most 60 characters and costs bounded work: a container is
    shown only as far as the cut, never expanded in full.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    out = _Writer(_SHOW_BUDGET)
    try:
        _emit(value, out)
    except _Full:
        pass
    text = " ".join("".join(out.parts).split())  # one line, whatever the value holds
    return text if len(text) <= _MAX_SHOWN and out.left >= 0 else text[:_MAX_SHOWN - 3] + "..."


_MAX_PATH = 120


def short_path(path: str) -> str:
    """``path`` with its middle cut when long: deeply nested residuals make long paths."""
    if len(path) <= _MAX_PATH:
        return path
    return f"{path[:40]}...{path[-(_MAX_PATH - 43):]}"


def fail(path: str, message: str) -> ConfigError:
    """Build the error for ``path`` (no path: the document as a whole)."""
    return ConfigError(f"{short_path(path)}: {message}" if path else message)


def suggestion(word: Any, choices: Iterable[str]) -> str:
    """``"; did you mean 'relu'?"`` when ``word`` is a near miss of one choice, else ``""``."""
    if not isinstance(word, str) or len(word) > 100:  # no near miss is that long
        return ""
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.75)
    return f"; did you mean '{lowered[close[0]]}'?" if close else ""


def mapping(value: Any, path: str, expected: str) -> dict:
    """A YAML mapping; an empty entry (``compute:`` with nothing under it) reads as ``{}``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(path, f"{show(value)} is not a mapping; expected {expected}")
    return value


def check_keys(value: dict, path: str, allowed: Sequence[str], noun: str = "key") -> None:
    """Reject any key of ``value`` outside ``allowed`` (listing ``allowed`` in the message)."""
    for key in value:
        if not isinstance(key, str) or key not in allowed:
            raise fail(path, f"unknown {noun} {show(key)}; expected {', '.join(allowed)}"
                             f"{suggestion(key, allowed)}")


def string(value: Any, path: str, expected: str, maximum: int = MAX_STRING) -> str:
    """A non-empty string of at most ``maximum`` characters, without NUL (no path holds one)."""
    if not isinstance(value, str):
        raise fail(path, f"{show(value)} is not a string; expected {expected}")
    if not value.strip():
        raise fail(path, f"{show(value)} is empty; expected {expected}")
    if len(value) > maximum:
        raise fail(path, f"{show(value)} is {len(value)} characters long; expected {expected} "
                         f"of at most {maximum} characters")
    if "\0" in value:
        raise fail(path, f"{show(value)} contains a NUL character; expected {expected}")
    return value


def optional_string(value: Any, path: str, expected: str) -> Optional[str]:
    return None if value is None else string(value, path, expected)


def boolean(value: Any, path: str) -> bool:
    """``true`` or ``false`` (YAML booleans only: not 0/1, not the string 'yes')."""
    if not isinstance(value, bool):
        raise fail(path, f"{show(value)} is not a boolean; expected true or false")
    return value


def file_path(value: Any, path: str, base_dir: Path) -> Path:
    """A path, resolved against ``base_dir`` (the config file's folder) when relative."""
    p = Path(string(value, path, "a file path")).expanduser()
    # normpath: "configs/../runs/x" reads as "runs/x" in messages and output
    return Path(os.path.normpath(p if p.is_absolute() else base_dir / p))


def choice(value: Any, path: str, choices: Sequence[str], noun: str) -> str:
    """One of ``choices``, matched case-insensitively and returned in its canonical spelling."""
    if isinstance(value, str):
        for c in choices:
            if c.lower() == value.lower():
                return c
    raise fail(path, f"{show(value)} is not {noun}; expected one of {', '.join(choices)}"
                     f"{suggestion(value, choices)}")


def _text(x: float) -> str:
    """``1000000`` rather than ``1e+06`` for a bound in a message."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _as_number(value: Any) -> Optional[float]:
    """``value`` as a float (an infinity when it overflows one), or None when it is no
    number or NaN.

    YAML 1.1 (PyYAML) reads ``1e-3`` as a string (it wants ``1.0e-3``), so a
    string that spells a number is taken as that number.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # 10**400: beyond any bound, and float() cannot hold it
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return None if math.isnan(number) else number


def number(value: Any, path: str, *, minimum: float, maximum: float,
           expected: Optional[str] = None) -> float:
    """A finite number from ``minimum`` to ``maximum`` (ints become floats).

    ``expected`` is what a non-number or a too small number is told to be
    (default: the range).
    """
    span = f"a number from {_text(minimum)} to {_text(maximum)}"
    expected = expected or span
    result = _as_number(value)
    if result is None:
        raise fail(path, f"{show(value)} is not a number; expected {expected}")
    if result < minimum:
        what = "is negative" if minimum == 0 else f"is below {_text(minimum)}"
        raise fail(path, f"{show(value)} {what}; expected {expected}")
    if result > maximum:
        raise fail(path, f"{show(value)} is too large; expected {span}")
    return result


def optional_std(value: Any, path: str, maximum: float) -> Optional[float]:
    """``b_std``: a number from 0 to ``maximum``, or null for no bias at all."""
    if value is None:
        return None
    result = _as_number(value)
    if result is None or result < 0:
        what = "is negative" if result is not None else "is not a number"
        raise fail(path, f"{show(value)} {what}; expected a number >= 0, or null for no bias")
    if result > maximum:
        raise fail(path, f"{show(value)} is too large; expected a number from 0 to "
                         f"{_text(maximum)}, or null for no bias")
    return result


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: Any, path: str, noun: str, *, maximum: int) -> int:
    """An int from 1 to ``maximum``. YAML ``true`` and ``2.0`` are refused: neither is
    written as a count."""
    if not _is_int(value) or value < 1:
        raise fail(path, f"{show(value)} is not {noun}; expected a positive integer")
    if value > maximum:
        raise fail(path, f"{show(value)} is too large; expected a positive integer no "
                         f"larger than {maximum}")
    return value


def integer(value: Any, path: str, *, minimum: int, maximum: int) -> int:
    """An int from ``minimum`` to ``maximum`` (a polynomial degree). YAML ``true`` and
    ``2.0`` are refused, like every count."""
    expected = f"expected an integer from {minimum} to {maximum}"
    if not _is_int(value):
        raise fail(path, f"{show(value)} is not an integer; {expected}")
    if value < minimum:
        what = "is negative" if minimum == 0 else f"is below {minimum}"
        raise fail(path, f"{show(value)} {what}; {expected}")
    if value > maximum:
        raise fail(path, f"{show(value)} is too large; {expected}")
    return value


def count_or(value: Any, path: str, word: str, noun: str, *, maximum: int) -> Optional[int]:
    """``word`` (``auto``, ``all``; case-insensitive) -> None, else an int 1..``maximum``."""
    if isinstance(value, str) and value.lower() == word:
        return None
    if not _is_int(value) or value < 1:
        raise fail(path, f"{show(value)} is not {noun}; expected {word} or a positive integer")
    if value > maximum:
        raise fail(path, f"{show(value)} is too large; expected {word} or a positive integer "
                         f"no larger than {maximum}")
    return value


MAX_AXES = 3  # spatial axes: sequences (L, C), images (H, W, C), volumes (D, H, W, C)


def pair(value: Any, path: str, noun: str, *, maximum: int) -> Union[int, tuple[int, ...]]:
    """Sizes along the spatial axes (``filter``, ``window``, ``strides``): one int ``k``,
    meaning ``k`` along every spatial axis (returned as the int), or a list of 1 to
    ``MAX_AXES`` ints, one per axis (returned as a tuple); each from 1 to ``maximum``.

    How many axes the input has is known only once the data is opened: the spec's
    ``bind`` (``_rank``) then expands an int and checks a list's length against it.
    """
    items = [value] if _is_int(value) else value
    if (isinstance(items, list) and 1 <= len(items) <= MAX_AXES
            and all(_is_int(v) and v >= 1 for v in items)):
        if max(items) > maximum:
            raise fail(path, f"{show(value)} is too large; expected a positive integer or a "
                             f"list of 1 to {MAX_AXES} positive integers, each no larger than "
                             f"{maximum}")
        return value if _is_int(value) else tuple(items)
    raise fail(path, f"{show(value)} is not {noun}; expected a positive integer (the same "
                     f"along every spatial axis) or a list of 1 to {MAX_AXES} positive "
                     "integers (one per spatial axis)")
