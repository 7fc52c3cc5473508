"""Building the native plan's library (``native/``), and keeping it between processes.

The sources are compiled by the system's C++ compiler (``g++`` or ``c++`` on ``PATH``)
against the XLA FFI headers jaxlib ships, with ``-march=native``: side by side, then
linked (10-15 s on two cores). Nothing compiled for one machine may run on another, so
a kept library is named by a key over everything its code depends on: the sources, the
flags, the compiler (its path and ``--version``), jaxlib's headers and version, and the
CPU (model and feature flags, for ``-march=native``).

Where it is kept: in ``kernelcli-native/`` inside kernelcli's cache folder (the CLI's
compilation cache, ``KERNELCLI_CACHE_DIR``; default ``~/.cache/kernelcli/jax``), whose
compiled XLA programs are trusted in the same way; with the cache switched off, nowhere
(each process builds in a private temporary folder, removed once the library is loaded). A kept
library is loaded only from a folder and a file this user owns that no one else may
write, and only if it is a regular file. One is written under a temporary name and
renamed, so processes building at once each leave a whole library, and a library that
fails to load (damaged) is built again and replaced; a build folder that a killed process
left is removed once it is older than any build. No other file is touched.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import jax

from .._stop import Stop, check

SOURCES = tuple(Path(__file__).with_name("native") / f for f in ("layer.cc", "chain.cc", "diag.cc"))
HEADERS = tuple(Path(__file__).with_name("native") / f for f in ("map.h",))
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-std=c++17", "-fPIC", "-w")
KEPT = "kernelcli-native"  # the folder inside JAX's compilation cache
_BUILD_SECONDS = 300  # a compiler that hangs is not waited on for ever
_STALE_SECONDS = 2 * _BUILD_SECONDS  # a build folder this old has no process left
_POLL_SECONDS = 0.05  # how often a running build checks its stop
_NAME = "libkernelcli_native.so"


def compiler() -> Optional[str]:
    for name in ("g++", "c++"):
        path = shutil.which(name)
        if path:
            return path
    return None


def load(symbols: Sequence[str], folder: Optional[Path], stop: Optional[Stop] = None):
    """``(library, None)`` with every name in ``symbols``, or ``(None, why not)``; kept
    in (and loaded from) ``folder`` when it is given and safe to use. A ``stop``
    requested while the compiler runs ends the build (the compiler killed, its folder
    removed) with :class:`~kernelcli.errors.Interrupted`."""
    if platform.system() != "Linux":
        return None, f"the native plan is built for Linux only (this is {platform.system()})"
    cxx = compiler()
    if cxx is None:
        return None, "no C++ compiler (g++ or c++) on PATH to build it"
    kept = _kept_path(folder, cxx)
    if kept is not None and _trusted(kept, stat.S_ISREG):
        lib = _open(kept, symbols)
        if lib is not None:
            return lib, None
    where = None
    if kept is not None:  # built beside its kept name: one filesystem, an atomic rename
        _sweep(kept.parent)
        try:
            where = tempfile.mkdtemp(prefix=".build-", dir=kept.parent)
        except OSError:
            kept = None
    where = where or tempfile.mkdtemp(prefix="kernelcli-native-")
    try:
        out = Path(where) / _NAME
        failed = _build(cxx, Path(where), out, stop)
        if failed:
            return None, failed
        lib = _open(out, symbols)
        if lib is None:
            return None, f"its build with {cxx} gave a library that does not load"
        if kept is not None:
            try:
                os.replace(out, kept)
            except OSError:
                pass  # loaded all the same; the next process builds again
        return lib, None
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _kept_path(folder: Optional[Path], cxx: str) -> Optional[Path]:
    """``folder/kernelcli-native/<key>.so``, the folder made (this user's only) if need
    be; ``None`` when there is no folder or it cannot be used safely."""
    if folder is None:
        return None
    home = Path(folder) / KEPT
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    if not _trusted(home, stat.S_ISDIR):
        return None
    key = _key(cxx)
    return None if key is None else home / f"{key}.so"


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


def _trusted(path: Path, kind) -> bool:
    """``path`` is a ``kind`` (file or folder, not a link) that this user owns and no one
    else may write: safe to load code from."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return kind(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _key(cxx: str) -> Optional[str]:
    """What the library's code depends on, hashed; ``None`` if the compiler cannot say
    its version."""
    try:
        version = subprocess.run([cxx, "--version"], stdin=subprocess.DEVNULL,
                                 capture_output=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    h = hashlib.sha256()
    for part in (cxx.encode(), version, " ".join(FLAGS).encode(), _cpu(),
                 jax.ffi.include_dir().encode(), jax.lib.__version__.encode(),
                 platform.machine().encode()):
        h.update(len(part).to_bytes(8, "little") + part)
    for src in (*SOURCES, *HEADERS):
        data = src.read_bytes()
        h.update(src.name.encode() + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:32]


def _cpu() -> bytes:
    """The CPU's model and feature flags (what ``-march=native`` compiles for)."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return platform.processor().encode()
    wanted = (b"model name", b"flags", b"vendor_id", b"cpu family", b"model\t")
    seen: dict = {}
    for line in lines:
        for w in wanted:
            if line.startswith(w) and w not in seen:
                seen[w] = line
    return b"\n".join(seen.get(w, b"") for w in wanted)


def _open(path: Path, symbols: Sequence[str]):
    """The library at ``path`` with every symbol, or ``None`` (it does not load)."""
    try:
        lib = ctypes.CDLL(str(path))
        for name in symbols:
            getattr(lib, name)
    except (OSError, AttributeError):
        return None
    return lib


def _build(cxx: str, folder: Path, out: Path, stop: Optional[Stop]) -> Optional[str]:
    """Compile the sources side by side (a core each), then link them into ``out``:
    ``None``, or why the build failed."""
    objects = [folder / f"{src.stem}.o" for src in SOURCES]
    failed = _run([[cxx, *FLAGS, "-I", jax.ffi.include_dir(), "-c", str(src), "-o",
                    str(obj)] for src, obj in zip(SOURCES, objects)], cxx, folder, stop)
    return failed or _run([[cxx, "-shared", *map(str, objects), "-o", str(out)]], cxx,
                          folder, stop)


def _run(commands, cxx: str, folder: Path, stop: Optional[Stop]) -> Optional[str]:
    """Run the compiler ``commands`` at once (their messages to files in ``folder``, so
    a long one cannot fill a pipe), checking ``stop`` while they run: ``None``, or why
    one failed."""
    procs, logs = [], [folder / f"cc{i}.log" for i in range(len(commands))]
    deadline = time.monotonic() + _BUILD_SECONDS
    try:
        for cmd, log in zip(commands, logs):
            with open(log, "wb") as err:
                # a group of its own: the driver's own children (cc1plus, as) end with it
                procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                              stdout=subprocess.DEVNULL, stderr=err,
                                              start_new_session=True))
        for proc in procs:
            while proc.poll() is None:
                check(stop)
                if time.monotonic() > deadline:
                    return f"its build with {cxx} failed: no result in {_BUILD_SECONDS} s"
                time.sleep(_POLL_SECONDS)
        for proc, log in zip(procs, logs):
            if proc.returncode != 0:
                text = log.read_bytes()[-4096:].decode("utf-8", "replace")
                last = (text.strip().splitlines() or ["no message"])[-1]
                return f"its build with {cxx} failed: {last}"
    except OSError as exc:
        return f"its build with {cxx} failed: {exc}"
    finally:
        for proc in procs:  # none left running (after a failure, a stop or an interrupt)
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
                proc.wait()
                _wait_group(proc.pid)
    return None


def _wait_group(pgid: int, timeout: float = 2.0) -> None:
    """Until no live process of group ``pgid`` is left, at most ``timeout`` seconds: a
    killed driver is reaped at once, while its cc1plus, killed with it, may still be
    tearing down its memory (a loop of the signal tests on a loaded machine found one
    alive once the command had exited)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and _group_alive(pgid):
        time.sleep(0.01)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is alive (not a zombie), from ``/proc``."""
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:  # no /proc: nothing to wait on
        return False
    for name in names:
        try:
            text = (Path("/proc") / name / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False
