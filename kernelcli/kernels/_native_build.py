"""Finding, checking and loading the native engine's library; building it at first use
only where the package carries none this machine can load.

The library is compiled when the package is built (``setup.py``, by the recipe in
:mod:`._native_recipe`): one file per variant of the architecture, recorded with its
size and sha256 in ``native/native.json``. :func:`load` takes the most capable
variant the CPU runs, and maps it only once its bytes match the record:

* **Read, checked, then mapped from memory.** The file is read whole (bounded), its
  sha256 compared with the record, and the checked bytes are what ``dlopen`` maps (an
  anonymous ``memfd``), never the file again: a truncated file is refused, not
  mapped (a short mapping is a SIGBUS at the first page past its end), and a file
  changed after the check cannot be what runs.
* **From places only their owner writes.** The folder, every folder above it and the
  file belong to this user or root, and no one else may write them (a folder with
  the sticky bit excepted, and a group that is its owner's own private group, as
  umask 002 leaves files on Debian and Ubuntu).
* **Built at first use as a fallback**, where no installed variant loads (an editable
  checkout whose sources changed, a platform without a wheel, a damaged install) and
  a C++ compiler is on ``PATH``: under a lock (one build per library and compiler on
  a machine; the others wait for it, saying so), the compiler's whole process group
  killed after ``KERNELCLI_NATIVE_BUILD_SECONDS``, the result kept in kernelcli's cache
  folder (``kernelcli-native/<key>/``, the installed layout: library and record), and
  a failure kept there too, so later processes report it instead of waiting again.

Whatever the source, a library's :attr:`Library.identity` is the recipe's hash of the
sources and the flags that decide its bits, which a run records.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import hashlib
import os
import platform
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import jax

from .. import _env
from .._stop import Stop, check
from .._trust import safe_owner, untrusted_folder
from . import _native_recipe as recipe

KEPT = "kernelcli-native"  # the folder of libraries built at first use, in the cache
FAILED = "failed"  # beside a kept record: why that library's build failed
SHIPPED = "shipped with kernelcli"
_STALE_SECONDS = 2 * 86400  # a build folder this old has no process left
_SAY_AFTER = 1.0  # seconds of waiting on another process's build before saying so
# Seconds one source file of the library takes to compile on one core, as the build's
# announcement says it (the sources compile side by side, one per core): g++ 12 took
# 33.5 CPU seconds for the three sources and the link of x86-64-v4 (2026-12-07).
_SECONDS_PER_SOURCE = 12


def _about_seconds(sources: int) -> int:
    """About how long a build of ``sources`` files takes on this machine's cores."""
    cores = len(os.sched_getaffinity(0)) or 1
    return _SECONDS_PER_SOURCE * -(-sources // cores)


@dataclasses.dataclass(frozen=True)
class Library:
    """A loaded, checked native library."""

    handle: ctypes.CDLL
    identity: str  # the recipe's hash of what decides its bits
    variant: str  # the target it was compiled for (x86-64-v4, ...)
    origin: str  # where it came from, as estimate, status and -v say it
    fd: int = -1  # the memfd it was mapped from, kept open while the process lives


def compiler() -> Optional[str]:
    for name in ("g++", "c++"):
        path = shutil.which(name)
        if path:
            return path
    return None


def say(message: str) -> None:
    print(f"kernelcli: {message}", file=sys.stderr, flush=True)


def load(symbols: Sequence[str], cache: Optional[Path], stop: Optional[Stop] = None,
         tell: Callable[[str], None] = say):
    """``(Library, None)`` with every name in ``symbols``, or ``(None, why not)``: the
    installed library, else one kept in ``cache`` or built there (or, without a cache,
    in a private folder removed after loading). A ``stop`` requested while waiting or
    building raises :class:`~kernelcli.errors.Interrupted`."""
    if platform.system() != "Linux":
        return None, f"the native engine is built for Linux only (this is {platform.system()})"
    runnable = recipe.cpu_variants()
    if not runnable:
        return None, f"kernelcli builds no native library for {platform.machine()} processors"
    ident, ffi = recipe.identity(), recipe.ffi_version(jax.ffi.include_dir())
    lib, why = load_from(recipe.NATIVE, ident, runnable, symbols, ffi, SHIPPED)
    if lib is not None:
        return lib, None
    cxx = compiler()
    if cxx is None:
        return None, f"{why}, and no C++ compiler (g++ or c++) is on PATH to build it"
    lib, failed = _first_use(cxx, ident, runnable[0], symbols, ffi, cache, stop, tell)
    if lib is None:
        return None, f"{why}, and {failed}"
    return dataclasses.replace(lib, origin=f"{lib.origin}, since {why}"), None


def load_from(folder: Path, ident: str, runnable: Sequence[str], symbols: Sequence[str],
              ffi: Optional[tuple], origin: str):
    """The library that ``folder``'s record names for the first of ``runnable`` it has,
    checked (:data:`recipe.RECORD`), or ``(None, why not)``."""
    unsafe = untrusted_folder(folder)
    if unsafe:
        return None, f"{unsafe}: its native library is not loaded"
    data, why = _read(folder / recipe.RECORD, 1 << 16)
    if data is None:
        return None, (f"no native library {origin} ({folder / recipe.RECORD} is missing)"
                      if why == "missing" else why)
    rec = recipe.read_record(data)
    if rec is None:
        return None, f"{folder / recipe.RECORD} is not a record kernelcli wrote"
    if rec["identity"] != ident:
        return None, (f"the native library {origin} ({rec['identity']}) was built from "
                      f"other sources than these ({ident})")
    built = rec.get("ffi")
    if ffi is not None and built is not None and (built[0] != ffi[0] or built[1] > ffi[1]):
        return None, (f"the native library {origin} was built for XLA FFI "
                      f"{built[0]}.{built[1]}; this jaxlib has {ffi[0]}.{ffi[1]}")
    variant = next((v for v in runnable if v in rec["libraries"]), None)
    if variant is None:
        return None, (f"the native library {origin} has no variant this CPU runs "
                      f"({', '.join(runnable)})")
    entry = rec["libraries"][variant]
    path = folder / entry["file"]
    data, why = _read(path, entry["size"])
    if data is None:
        return None, f"{path} is missing" if why == "missing" else why
    if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
        return None, (f"{path} does not match its checksum in {recipe.RECORD} (damaged "
                      f"or truncated)")
    wrong = _other_variant(data, variant, path)
    if wrong is not None:
        return None, wrong
    handle, fd = _map(data, symbols)
    if handle is None:
        return None, f"{path} matches its checksum but does not load ({fd})"
    return Library(handle, ident, variant, f"{origin} ({variant})", fd), None


def _read(path: Path, limit: int):
    """``(bytes, None)`` of the regular file ``path`` (at most ``limit + 1`` bytes read),
    opened without following a link or blocking on a FIFO, and only if
    :func:`~kernelcli._trust.safe_owner` trusts it; else ``(None, why)`` (``"missing"`` when absent)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, f"{path} is not a regular file"
        if not safe_owner(st):
            return None, f"{path} may be written by others than its owner: not loaded"
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), None
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror})"
    finally:
        os.close(fd)


def _map(data: bytes, symbols: Sequence[str]):
    """``(handle, fd)``: ``data`` loaded from an anonymous file that holds exactly those
    bytes, with every symbol; ``(None, why)`` when it does not load. The file stays
    open while the process lives: the loader knows a library by its path, and a
    closed descriptor's number (its path in /proc) would be another library's next."""
    try:
        fd = os.memfd_create("kernelcli-native", os.MFD_CLOEXEC)
    except (OSError, AttributeError) as exc:
        return None, f"no anonymous file to load it from: {exc}"
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        handle = ctypes.CDLL(f"/proc/self/fd/{fd}")
    except OSError as exc:
        os.close(fd)
        return None, str(exc).splitlines()[0][:300]
    missing = [name for name in symbols if not hasattr(handle, name)]
    if missing:  # loaded: its descriptor stays reserved all the same
        return None, f"it lacks {missing[0]}"
    return handle, fd


def _other_variant(data: bytes, variant: str, path: Path) -> Optional[str]:
    """Why the library bytes ``data`` are not ``variant``'s, as their own mark says
    (:func:`recipe.marked_variant`), or ``None``: checked before they are mapped, since
    their constructors run at once and another variant's may use instructions this CPU
    lacks (a SIGILL, no message)."""
    marked = recipe.marked_variant(data)
    if marked == variant:
        return None
    return (f"{path} holds a library compiled for {marked or 'no recorded variant'}, not "
            f"{variant} as {recipe.RECORD} says: not loaded")


def _first_use(cxx: str, ident: str, variant: str, symbols, ffi, cache: Optional[Path],
               stop: Optional[Stop], tell):
    """Build ``variant`` with ``cxx`` (or take the one kept for it): ``(Library, None)``
    or ``(None, why)``. Kept under ``cache/kernelcli-native/<key>`` where that folder is
    this user's own; built privately otherwise."""
    home = _home(cache)
    key = _key(ident, variant, cxx, ffi)
    if home is None:
        with tempfile.TemporaryDirectory(prefix="kernelcli-native-") as tmp:
            return _build(cxx, ident, variant, symbols, ffi, Path(tmp), None, stop, tell)
    kept = home / key
    with _locked(home / f"{key}.lock", stop, tell):
        if (kept / recipe.RECORD).exists():
            lib, why = load_from(kept, ident, (variant,), symbols, ffi,
                                 f"built at first use in {kept}")
            if lib is not None:
                return lib, None
        failed, _ = _read(kept / FAILED, 4096)
        if failed is not None:
            text = failed.decode("utf-8", "replace").strip().splitlines()[0][:500]
            return None, (f"its build at first use failed before ({text}; delete "
                          f"{kept / FAILED} to try again)")
        _sweep(home)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=home))
        try:
            return _build(cxx, ident, variant, symbols, ffi, work, kept, stop, tell)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _build(cxx, ident, variant, symbols, ffi, work: Path, kept: Optional[Path], stop, tell):
    """Compile and load ``variant`` in ``work``; kept in ``kept`` (with its record, or
    the failure) when given."""
    out = work / recipe.library_name(variant)
    compiles, link = recipe.commands(cxx, variant, jax.ffi.include_dir(), work, out)
    seconds = _env.native_build_seconds()
    tell(f"building the native engine for this CPU ({variant}) with {cxx}; about "
         f"{_about_seconds(len(compiles))} s (at most {seconds:g} s), once: later processes "
         f"load what it keeps")
    start = time.monotonic()
    failed = (recipe.run(compiles, work, seconds, lambda: check(stop))
              or recipe.run([link], work, seconds, lambda: check(stop)))
    took = time.monotonic() - start
    data = b"" if failed else out.read_bytes()
    if not failed:
        failed = _other_variant(data, variant, out)
    handle, fd = (None, None) if failed else _map(data, symbols)
    tell(f"the native engine's build failed after {took:.1f} s" if handle is None
         else f"built the native engine in {took:.1f} s")
    if handle is None:
        why = f"its build with {cxx} failed: {failed or f'the library does not load ({fd})'}"
        # a build that ran out of time says nothing of the compiler (a busy machine, a
        # low KERNELCLI_NATIVE_BUILD_SECONDS): the next process tries again; a compiler's
        # error or a library that does not load is kept, and said at once next time
        if kept is not None and not (failed and took >= seconds):
            kept.mkdir(mode=0o700, exist_ok=True)
            recipe.write_file(kept / FAILED, (why + "\n").encode(), 0o600)
        return None, why
    assert fd is not None  # a loaded handle comes with its descriptor
    origin = "built at first use" + (f" in {kept}" if kept is not None else "")
    if kept is not None:
        kept.mkdir(mode=0o700, exist_ok=True)
        recipe.write_file(kept / out.name, data, 0o600)  # the library, then its record
        recipe.write_record(kept, recipe.record(ident, ffi, cxx, {variant: data}))
    return Library(handle, ident, variant, f"{origin} ({variant})", fd), None


@contextlib.contextmanager
def _locked(path: Path, stop, tell):
    """An exclusive ``flock`` on ``path`` while the block runs, waited for with ``stop``
    checked, and said once the wait is longer than a moment."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:  # closing the descriptor releases the lock
        start, told = time.monotonic(), False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            check(stop)
            if not told and time.monotonic() - start > _SAY_AFTER:
                tell(f"waiting for another process building the native library ({path})")
                told = True
            time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _home(cache: Optional[Path]) -> Optional[Path]:
    """``cache/kernelcli-native``, made this user's only if need be; ``None`` when there
    is no cache or the folder cannot be used safely."""
    if cache is None:
        return None
    home = Path(cache) / KEPT
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(home)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return home


def _key(ident: str, variant: str, cxx: str, ffi) -> str:
    """A kept library's name: its identity, variant and XLA FFI version, and the
    compiler that built it (its file, so a changed compiler builds again, and a failure
    is not kept for it)."""
    real = os.path.realpath(cxx)
    try:
        st = os.stat(real)
        seen = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        seen = ""
    parts = (ident, variant, real, seen, repr(ffi), platform.machine())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _sweep(home: Path, age: float = _STALE_SECONDS) -> None:
    """Remove the build folders (``.build-*``) older than ``age`` seconds that processes
    killed while building left in ``home`` (this user's own folder: only kernelcli
    writes there)."""
    now = time.time()
    for folder in home.glob(".build-*"):
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and now - st.st_mtime > age:
            shutil.rmtree(folder, ignore_errors=True)
