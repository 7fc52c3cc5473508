"""The native library as the package carries it (``kernelcli.kernels._native_build``,
``_native_recipe``): checked before it is mapped, loaded only from places their owner
alone writes, and the variant taken by the CPU's features.

Each test loads a copy of what the install left (``native/``), damaged or moved as a
user's machine might leave it, in this process (``load_from``: no XLA registration) or
in a ``kernelcli`` process of a copied package (tests/kernels/test_native_fallback.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

# the library's loader and build at first use, given folders made here
from kernelcli.kernels import _native, _native_build
from kernelcli.kernels import _native_recipe as recipe

SYMBOLS = _native.SYMBOLS
installed = pytest.mark.skipif(
    not (recipe.NATIVE / recipe.RECORD).is_file(),
    reason="the package was installed without its native library (no compiler at install)")


def _copy(tmp_path: Path) -> Path:
    """The installed library folder, copied to ``tmp_path/native`` (mode 0755)."""
    folder = tmp_path / "native"
    folder.mkdir()
    for p in recipe.NATIVE.iterdir():
        if p.is_file():
            shutil.copyfile(p, folder / p.name)
    folder.chmod(0o755)
    return folder


def _load(folder: Path, runnable=None, ident=None, ffi=None):
    return _native_build.load_from(folder, ident or recipe.identity(),
                                   runnable or recipe.cpu_variants(), SYMBOLS, ffi, "tested")


def _record(folder: Path) -> dict:
    return json.loads((folder / recipe.RECORD).read_text())


def _library(folder: Path) -> Path:
    rec = _record(folder)
    variant = next(v for v in recipe.cpu_variants() if v in rec["libraries"])
    return folder / rec["libraries"][variant]["file"]


@installed
def test_the_installed_library_is_the_one_loaded_and_its_record_matches_its_bytes():
    lib = _native.library()
    assert lib is not None and lib.identity == recipe.identity()
    assert lib.variant == recipe.cpu_variants()[0]
    assert lib.origin == f"{_native_build.SHIPPED} ({lib.variant})"
    rec = _record(recipe.NATIVE)
    assert rec["identity"] == recipe.identity()
    assert set(rec["libraries"]) == set(recipe.variants())  # every variant, not this CPU's
    for entry in rec["libraries"].values():
        data = (recipe.NATIVE / entry["file"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"])


@installed
@pytest.mark.parametrize("damage", ["truncated", "changed", "foreign", "empty"])
def test_a_library_whose_bytes_are_not_the_recorded_ones_is_never_mapped(tmp_path, damage):
    """A truncated file would be a SIGBUS once mapped, a changed one wrong kernels: both
    are refused by their checksum before ``dlopen`` sees them, one line naming the file."""
    folder = _copy(tmp_path)
    path = _library(folder)
    data = path.read_bytes()
    if damage == "truncated":  # a crash right after a copy: the first pages only
        data = data[:len(data) // 3]
    elif damage == "changed":  # same size, a constant's byte changed
        data = data[:4096] + bytes([data[4096] ^ 0x40]) + data[4097:]
    elif damage == "foreign":  # another variant's (or another version's) whole library
        other = next(p for p in folder.glob("*.so") if p != path)
        data = other.read_bytes()
    else:
        data = b""
    path.write_bytes(data)
    lib, why = _load(folder)
    assert lib is None
    assert why == f"{path} does not match its checksum in native.json (damaged or truncated)"


@installed
def test_another_variants_bytes_under_a_record_rewritten_to_match_are_never_mapped(tmp_path):
    """The v4 library's bytes under the v3 name, the record's size and checksum rewritten
    to match: their checksum holds, but a CPU without AVX-512 would die of SIGILL in
    their constructors. The bytes' own mark says which variant they are, and is read
    before they are mapped."""
    folder = _copy(tmp_path)
    rec = _record(folder)
    if not {"x86-64-v4", "x86-64-v3"} <= set(rec["libraries"]):
        pytest.skip("the package carries no x86-64-v4 and v3 libraries here")
    v3 = folder / rec["libraries"]["x86-64-v3"]["file"]
    data = (folder / rec["libraries"]["x86-64-v4"]["file"]).read_bytes()
    v3.write_bytes(data)
    rec["libraries"] = {"x86-64-v3": dict(rec["libraries"]["x86-64-v3"], size=len(data),
                                          sha256=hashlib.sha256(data).hexdigest())}
    (folder / recipe.RECORD).write_text(json.dumps(rec))
    lib, why = _load(folder, runnable=("x86-64-v3",))
    assert lib is None
    assert why == (f"{v3} holds a library compiled for x86-64-v4, not x86-64-v3 as "
                   f"native.json says: not loaded")


@installed
def test_a_missing_or_foreign_record_is_said_and_nothing_is_loaded(tmp_path):
    folder = _copy(tmp_path)
    (folder / recipe.RECORD).write_text('{"format": 1, "identity": "x"}')
    assert _load(folder) == (None, f"{folder / recipe.RECORD} is not a record kernelcli wrote")
    (folder / recipe.RECORD).unlink()
    assert _load(folder) == (None, f"no native library tested ({folder / recipe.RECORD} is "
                                   f"missing)")
    (folder / recipe.RECORD).symlink_to(recipe.NATIVE / recipe.RECORD)  # never followed
    assert _load(folder)[0] is None


@installed
def test_a_library_of_other_sources_or_a_newer_ffi_is_not_loaded(tmp_path):
    folder = _copy(tmp_path)
    have = _record(folder)["identity"]
    assert _load(folder, ident="0" * 16) == (None, (
        f"the native library tested ({have}) was built from other sources than these "
        f"({'0' * 16})"))
    major, minor = _record(folder)["ffi"]
    lib, why = _load(folder, ffi=(major, minor - 1))
    assert lib is None and why == (f"the native library tested was built for XLA FFI "
                                   f"{major}.{minor}; this jaxlib has {major}.{minor - 1}")
    assert _load(folder, ffi=(major, minor + 1))[0] is not None  # an older one's is fine


@installed
def test_the_variant_is_the_most_capable_the_cpu_runs_and_each_loads(tmp_path):
    folder = _copy(tmp_path)
    for variant in recipe.cpu_variants():
        lib, why = _load(folder, runnable=(variant,))
        assert why is None and lib.variant == variant
    rec = _record(folder)
    del rec["libraries"][recipe.cpu_variants()[-1]]
    (folder / recipe.RECORD).write_text(json.dumps(rec))
    lib, why = _load(folder, runnable=recipe.cpu_variants()[-1:])
    assert lib is None and why.startswith("the native library tested has no variant")


def test_cpu_features_choose_the_variants():
    if recipe.variants() != ("x86-64-v4", "x86-64-v3", "x86-64-v2"):
        pytest.skip("x86-64 only")
    v2 = b"flags\t: fpu cx16 lahf_lm popcnt sse4_1 sse4_2 ssse3\n"
    v3 = v2.rstrip() + b" avx avx2 bmi1 bmi2 f16c fma abm movbe xsave\n"
    v4 = v3.rstrip() + b" avx512f avx512bw avx512cd avx512dq avx512vl\n"
    assert recipe.cpu_variants(v4) == ("x86-64-v4", "x86-64-v3", "x86-64-v2")
    assert recipe.cpu_variants(v3) == ("x86-64-v3", "x86-64-v2")
    assert recipe.cpu_variants(v2) == ("x86-64-v2",)
    assert recipe.cpu_variants(v4.replace(b" avx2", b"")) == ("x86-64-v2",)  # needs v3's
    assert recipe.cpu_variants(b"") == ("x86-64-v2",)


@installed
@pytest.mark.skipif(os.getuid() != 0, reason="changes a file's group: root only")
def test_only_places_their_owner_alone_writes_are_loaded_from(tmp_path):
    """umask 002 leaves group-writable files: loaded where the group is the owner's own
    private group (Debian's and Ubuntu's default), refused where it is shared; a file
    or folder anyone may write is refused, and so is a folder above them."""
    folder = _copy(tmp_path)
    path = _library(folder)
    for p in (folder, path, folder / recipe.RECORD):  # umask 002, group root (root's own)
        p.chmod(stat.S_IMODE(p.stat().st_mode) | 0o020)
    assert _load(folder)[1] is None
    os.chown(path, 0, 1)  # a shared group (daemon) may write it
    assert _load(folder) == (None, f"{path} may be written by others than its owner: not "
                                   f"loaded")
    os.chown(path, 0, 0)
    path.chmod(0o646)
    assert _load(folder)[0] is None
    path.chmod(0o644)
    folder.chmod(0o777)
    assert _load(folder) == (None, f"{folder} may be written by others than its owner: its "
                                   f"native library is not loaded")
    folder.chmod(0o755)
    tmp_path.chmod(0o777)  # a folder above: another user could swap the folder
    try:
        assert _load(folder)[1] == (f"{tmp_path} may be written by others than its owner: "
                                    f"its native library is not loaded")
        tmp_path.chmod(0o1777)  # /tmp's sticky bit: no one renames another's entries
        assert _load(folder)[1] is None
    finally:
        tmp_path.chmod(0o755)


def test_a_hostile_record_is_refused_field_by_field():
    good = recipe.record("0123456789abcdef", (0, 3), "g++", {"x86-64-v2": b"lib"})
    assert recipe.read_record(json.dumps(good).encode()) == good
    for bad in ({**good, "format": 2}, {**good, "identity": "../../etc"},
                {**good, "ffi": [0, "3"]},
                {**good, "libraries": {"x86-64-v2": {**good["libraries"]["x86-64-v2"],
                                                     "file": "../../libc.so.6"}}},
                {**good, "libraries": {"x86-64-v2": {**good["libraries"]["x86-64-v2"],
                                                     "size": 1 << 40}}}, [good]):
        assert recipe.read_record(json.dumps(bad).encode()) is None
    for data in (b"\xff\xfe", b"[" * 100000, b"{}" + b" " * (1 << 17), b"nan"):
        assert recipe.read_record(data) is None


def test_the_identity_is_the_sources_and_the_flags_that_decide_the_bits(tmp_path):
    folder = tmp_path / "native"
    shutil.copytree(recipe.NATIVE, folder, ignore=shutil.ignore_patterns("*.so", "*.json"))
    assert recipe.identity(folder) == recipe.identity()
    (folder / "map.h").write_text((folder / "map.h").read_text() + "\n// a comment\n")
    assert recipe.identity(folder) != recipe.identity()
    assert "-ffp-contract=off" in recipe.FLAGS and not any("native" in f for f in recipe.FLAGS)
    assert all("-march=native" not in recipe.variant_flags(v) for v in recipe.variants())


def test_build_folders_killed_processes_left_are_swept_once_older_than_any_build(tmp_path):
    import time

    old, fresh = tmp_path / ".build-old", tmp_path / ".build-now"
    for folder in (old, fresh):
        folder.mkdir()
        (folder / "chain.o").write_bytes(b"half")
    (tmp_path / ".build-file").write_bytes(b"not a folder")
    (tmp_path / "other").mkdir()
    past = time.time() - 2 * _native_build._STALE_SECONDS
    os.utime(old, (past, past))
    os.utime(tmp_path / "other", (past, past))
    _native_build._sweep(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".build-file", ".build-now", "other"]
