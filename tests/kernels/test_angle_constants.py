"""The angle's constants are written once (``kernels/native/atan.inc``): the C++ of the
native engine includes the file and ``kernels/_angle.py`` reads it. What Python reads is
what the file says, fdlibm's values to the bit, and the float32 coefficients the float32
C++ reads from the same literals."""

import re
import struct
from fractions import Fraction

import numpy as np
import pytest

from kernelcli.kernels import _angle  # its constants are what is checked

# fdlibm s_atan.c's aT[0..10], atanhi[0], atanlo[0], atanhi[1], atanlo[1] as its
# comments give them: the high and low words of each float64
FDLIBM_HEX = {
    "kAt64": ("3FD55555 5555550D", "BFC99999 9998EBC4", "3FC24924 920083FF",
              "BFBC71C6 FE231671", "3FB745CD C54C206E", "BFB3B0F2 AF749A6D",
              "3FB10D66 A0D03D51", "BFADDE2D 52DEFD9A", "3FA97B4B 24760DEB",
              "BFA2B444 2C6A6C2F", "3F90AD3A E322DA11"),
    "kAtanHalf": ("3FDDAC67 0561BB4F", "3C7A2B7F 222F65E2"),
    "kAtanOne": ("3FE921FB 54442D18", "3C81A626 33145C07"),
}


def _hex(value: float) -> str:
    word = struct.pack(">d", value).hex().upper()
    return f"{word[:8]} {word[8:]}"


def _literals():
    """The file's literals by name, found by a regex of its own (not the module's
    parser)."""
    text = _angle._CONSTANTS.read_text()
    found = re.findall(r"(k\w+)\[\d+\] = \{([^}]*)\}", text)
    return {name: [s.strip() for s in body.split(",")] for name, body in found}


def test_python_reads_what_the_file_says():
    lits = _literals()
    assert set(lits) == {"kAtan32", "kAt64", "kAtanHalf", "kAtanOne", "kSnap"}
    assert (_angle.SNAP64, _angle.SNAP32) == (2.0 ** -44, 2.0 ** -21)
    assert (_angle.SNAP64, _angle.SNAP32) == tuple(float(s) for s in lits["kSnap"])
    assert _angle._ATAN_COEFFS == tuple(float(s.rstrip("f")) for s in lits["kAtan32"])
    assert _angle._FDLIBM_AT == tuple(float(s) for s in lits["kAt64"])
    assert _angle._ATAN_HALF == tuple(float(s) for s in lits["kAtanHalf"])
    assert _angle._ATAN_ONE == tuple(float(s) for s in lits["kAtanOne"])
    assert all(s.endswith("f") for s in lits["kAtan32"])


def test_the_float64_constants_are_fdlibms_to_the_bit():
    values = {"kAt64": _angle._FDLIBM_AT, "kAtanHalf": _angle._ATAN_HALF,
              "kAtanOne": _angle._ATAN_ONE}
    for name, words in FDLIBM_HEX.items():
        assert tuple(_hex(v) for v in values[name]) == words, name


def test_float32_coefficients_round_alike_in_python_and_cpp():
    """Python rounds a literal to float64, then XLA to float32; C++ rounds ``1.5f`` to
    float32 at once. Where the float64 does not land on a float32 midpoint the two
    agree: the float32 nearest the exact decimal is the one Python's route gives."""
    for text in _literals()["kAtan32"]:
        exact = Fraction(text.rstrip("f"))
        got = np.float32(float(exact))
        below, above = (np.nextafter(got, np.float32(d)) for d in (-np.inf, np.inf))
        distance = abs(Fraction(float(got)) - exact)
        assert distance < abs(Fraction(float(below)) - exact), text
        assert distance < abs(Fraction(float(above)) - exact), text


@pytest.mark.parametrize("text, why", [
    ("constexpr double kA[2] = {1.0, 2.0};\nconstexpr double kB[1] = {3.0}", "after the last"),
    ("constexpr double kA[3] = {1.0, 2.0};", "expected 3 double literals"),
    ("constexpr float kA[1] = {1.0};", "expected 1 float literals"),
    ("constexpr double kA[1] = {1.0f};", "expected 1 double literals"),
    ("constexpr double kA[1] = {__import__('os')};", "expected 1 double literals"),
    ("constexpr double kA[1] = {1.0};\nconstexpr double kA[1] = {2.0};", "once"),
    ("double kA[1] = {1.0};", "not a constant array"),
    ("constexpr double kA[1] = {1.0}; // a comment after code", "after the last"),
])
def test_the_parser_refuses_what_it_does_not_read_exactly(text, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        _angle.read_constants(text)
