"""Readers for single YAML values, each naming its YAML path in the errors it raises.

Every reader takes the raw value from ``yaml.safe_load`` and the dotted path it
came from (``architecture.layers[0].conv.W_std``) and returns the validated
Python value, or raises :class:`~kernelcli.errors.ConfigError` with a one-line
message: path, the offending value echoed back, and what would be accepted.
The file name is prefixed later, by the loader, which alone knows it.
"""

from __future__ import annotations

import difflib
import math
import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Tuple

from ..errors import ConfigError

_MAX_SHOWN = 60


def show(value: Any) -> str:
    """Echo a YAML value back to its author, in YAML spelling where Python's differs."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = " ".join(repr(value).split())  # one line, whatever the value holds
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN - 3] + "..."


def fail(path: str, message: str) -> ConfigError:
    """Build the error for ``path`` (no path: the document as a whole)."""
    return ConfigError(f"{path}: {message}" if path else message)


def suggestion(word: Any, choices: Iterable[str]) -> str:
    """``"; did you mean 'relu'?"`` when ``word`` is a near miss of one choice, else ``""``."""
    if not isinstance(word, str):
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


def string(value: Any, path: str, expected: str) -> str:
    """A non-empty string."""
    if not isinstance(value, str):
        raise fail(path, f"{show(value)} is not a string; expected {expected}")
    if not value.strip():
        raise fail(path, f"{show(value)} is empty; expected {expected}")
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


def _as_number(value: Any) -> Optional[float]:
    """``value`` as a finite float, or None when it is no number.

    YAML 1.1 (PyYAML) reads ``1e-3`` as a string (it wants ``1.0e-3``), so a
    string that spells a number is taken as that number.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def number(value: Any, path: str, *, minimum: Optional[float] = None) -> float:
    """A finite number (ints become floats), at least ``minimum`` when given."""
    expected = "a number" if minimum is None else f"a number >= {minimum:g}"
    result = _as_number(value)
    if result is None:
        raise fail(path, f"{show(value)} is not a number; expected {expected}")
    if minimum is not None and result < minimum:
        raise fail(path, f"{show(value)} is negative; expected {expected}"
                   if minimum == 0 else f"{show(value)} is below {minimum:g}; expected {expected}")
    return result


def optional_std(value: Any, path: str) -> Optional[float]:
    """``b_std``: a number >= 0, or null for no bias at all."""
    if value is None:
        return None
    result = _as_number(value)
    if result is None or result < 0:
        what = "is negative" if result is not None else "is not a number"
        raise fail(path, f"{show(value)} {what}; expected a number >= 0, or null for no bias")
    return result


def positive_int(value: Any, path: str, noun: str) -> int:
    """An int >= 1. YAML ``true`` and ``2.0`` are refused: neither is written as a count."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(path, f"{show(value)} is not {noun}; expected a positive integer")
    return value


def count_or(value: Any, path: str, word: str, noun: str) -> Optional[int]:
    """``word`` (``auto``, ``all``; case-insensitive) -> None, else a positive int."""
    if isinstance(value, str) and value.lower() == word:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(path, f"{show(value)} is not {noun}; expected {word} or a positive integer")
    return value


def pair(value: Any, path: str, noun: str) -> Tuple[int, int]:
    """(height, width) from ``[h, w]``, or from one int ``k`` meaning ``[k, k]``."""
    items = [value, value] if isinstance(value, int) and not isinstance(value, bool) else value
    if (isinstance(items, list) and len(items) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in items)):
        return (items[0], items[1])
    raise fail(path, f"{show(value)} is not {noun}; expected a positive integer "
                     "or a list of 2 positive integers")
