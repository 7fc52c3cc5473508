"""How the native engine's library is built, named and checked: the one recipe that both
the package's build (``setup.py``, at ``pip install`` / ``pip wheel``) and a build at
first use (:mod:`._native_build`) follow.

Standard library only, and no imports from the package: ``setup.py`` loads this file
by its path, before kernelcli or jax can be imported.

Why each choice:

* **Portable targets, chosen at load.** A library is compiled once per *variant* of
  the machine's architecture (x86-64: ``x86-64-v2``, ``-v3`` with AVX2 and FMA, ``-v4``
  with AVX-512), never ``-march=native``: a wheel built on one machine runs on any
  other of its architecture, and the loader takes the best variant the CPU's features
  allow (:func:`cpu_variants`).
* **Bits that depend on the sources only.** ``-ffp-contract=off`` (no fused
  multiply-add the source does not write), no ``-ffast-math`` (no reassociation, so
  vector loops compute each entry as the scalar one does), and no libm function that
  rounds (the angle is the sources' own polynomial; ``sqrt`` is exact): every variant,
  and any compiler honouring these flags, gives the same bits. ``-fno-trapping-math``
  changes no value (kernelcli never reads the floating-point exception flags); it lets
  the compiler evaluate both sides of the angle's selects, so loops vectorise without
  AVX-512's masks: without it the x86-64-v3 and v2 loops stayed scalar, 11x and 4x
  slower (cnn1_gap, bench/native_variants.py). So the library's
  :func:`identity` hashes the sources and these flags, and a run records it: a run
  continues only with a library of the same identity.
* **Checked before it is loaded.** :func:`write_record` writes each library's size and
  sha256 beside it (``native.json``); the loader maps only bytes that match.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

NATIVE = Path(__file__).with_name("native")  # the sources, and the installed libraries
SOURCES = ("layer.cc", "chain.cc", "diag.cc")
# What decides the bits, in every build (see the module's docstring).
FLAGS = ("-O3", "-std=c++17", "-fPIC", "-fno-math-errno", "-fno-trapping-math",
         "-ffp-contract=off")
WARNINGS = ("-Wall", "-Wextra")
RECORD = "native.json"  # the installed libraries' identity, files and checksums
RECORD_FORMAT = 1
MAX_LIBRARY_BYTES = 64 << 20  # a library is read whole into memory before it is mapped
_MAX_RECORD_BYTES = 1 << 16

# architecture -> its variants, most capable first: (name, compiler flags, the
# /proc/cpuinfo flags the variant's instructions need, beyond the previous variant's)
_X86 = (
    ("x86-64-v4", ("-march=x86-64-v4", "-mtune=generic"),
     ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
    ("x86-64-v3", ("-march=x86-64-v3", "-mtune=generic"),
     ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")),
    ("x86-64-v2", ("-march=x86-64-v2", "-mtune=generic"),
     ("cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3")),
)
VARIANTS = {"x86_64": _X86, "AMD64": _X86,
            "aarch64": (("armv8-a", ("-march=armv8-a",), ()),),
            "arm64": (("armv8-a", ("-march=armv8-a",), ()),)}


def variants(machine: Optional[str] = None) -> tuple:
    """The names of the variants built for ``machine`` (default: this one), most
    capable first; ``()`` where kernelcli builds none."""
    return tuple(v[0] for v in VARIANTS.get(machine or platform.machine(), ()))


def variant_flags(name: str) -> tuple:
    for table in VARIANTS.values():
        for variant, flags, _ in table:
            if variant == name:
                return flags
    raise ValueError(f"native variant {name!r}: expected one of "
                     f"{sorted({v[0] for t in VARIANTS.values() for v in t})}")


def cpu_variants(cpuinfo: Optional[bytes] = None) -> tuple:
    """The variants this CPU runs, most capable first (each needs its own features and
    every less capable variant's). ``cpuinfo``: ``/proc/cpuinfo``'s bytes (read when
    ``None``); where its flags cannot be read, only the least capable variant."""
    table = VARIANTS.get(platform.machine(), ())
    if not table:
        return ()
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", "rb") as f:
                cpuinfo = f.read(1 << 20)
        except OSError:
            cpuinfo = b""
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith((b"flags", b"Features")):
            flags = set(line.partition(b":")[2].decode("ascii", "replace").split())
            break
    out = []
    for k, (name, _, _) in enumerate(table):
        if all(f in flags for _, _, more in table[k:] for f in more):
            out.append(name)
    return tuple(out) or (table[-1][0],)


def source_files(folder: Path = NATIVE) -> list:
    """Every file the library is compiled from: the sources and what they include."""
    return sorted(p for p in folder.iterdir()
                  if p.suffix in (".cc", ".h", ".inc") and p.is_file())


def identity(folder: Path = NATIVE) -> str:
    """What decides the library's bits, hashed: its source files and :data:`FLAGS`
    (16 hex digits; a run records it as ``engine.native_library``)."""
    h = hashlib.sha256(b"kernelcli-native\0" + " ".join(FLAGS).encode() + b"\0")
    for path in source_files(folder):
        data = path.read_bytes()
        h.update(path.name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:16]


def library_name(variant: str) -> str:
    return f"libkernelcli-native-{variant}.so"


def ffi_version(include_dir: str) -> Optional[tuple]:
    """``(major, minor)`` of the XLA FFI API the headers in ``include_dir`` declare."""
    try:
        text = (Path(include_dir) / "xla" / "ffi" / "api" / "c_api.h").read_text(
            "utf-8", "replace")
    except OSError:
        return None
    found = [re.search(rf"^#define XLA_FFI_API_{k} (\d+)\s*$", text, re.M)
             for k in ("MAJOR", "MINOR")]
    major, minor = found
    return None if major is None or minor is None else (int(major.group(1)),
                                                        int(minor.group(1)))


# The variant a library was compiled for, in its own bytes (layer.cc's
# ``kernelcli_variant``, from ``-DKERNELCLI_VARIANT``): the loader reads it before
# mapping, so bytes of another variant than their record names (v4 instructions under
# the v3 name, the record rewritten to match) are refused in one line, not run until a
# SIGILL on a CPU without those instructions.
VARIANT_MARK = b"kernelcli-variant:"


def marked_variant(data: bytes) -> Optional[str]:
    """The variant ``data`` (a library's bytes) says it was compiled for; ``None`` when
    it says none, or more than one."""
    found = set()
    at = data.find(VARIANT_MARK)
    while at >= 0:
        end = data.find(b"\0", at, at + 64)
        found.add(data[at + len(VARIANT_MARK):end].decode("ascii", "replace")
                  if end >= 0 else "")
        at = data.find(VARIANT_MARK, at + 1)
    return found.pop() if len(found) == 1 else None


def commands(cxx: str, variant: str, include_dir: str, folder: Path, out: Path,
             werror: bool = False) -> tuple:
    """``(compiles, link)``: the compiler's command lines that build ``variant`` into
    ``out`` (objects in ``folder``); the sources compile side by side."""
    flags = (*FLAGS, *variant_flags(variant), f'-DKERNELCLI_VARIANT="{variant}"', *WARNINGS,
             *(("-Werror",) if werror else ()))
    objects = [folder / f"{Path(s).stem}-{variant}.o" for s in SOURCES]
    compiles = [[cxx, *flags, "-isystem", include_dir, "-c", str(NATIVE / s), "-o", str(o)]
                for s, o in zip(SOURCES, objects, strict=True)]
    return compiles, [cxx, "-shared", *flags, *map(str, objects), "-o", str(out)]


def run(commands: Sequence[Sequence[str]], folder: Path, seconds: float,
        poll: Callable[[], None] = lambda: None, jobs: int = 0) -> Optional[str]:
    """Run the compiler ``commands``, ``jobs`` at a time (0: one per core), each in a
    process group of its own (so its children, ``cc1plus`` and ``as``, end with it),
    its messages to a file in ``folder`` (a long one cannot fill a pipe). ``None``, or
    why one failed; past ``seconds`` in all, every group still running is killed.
    ``poll`` is called while they run and may raise (a stop): the groups are killed
    then too."""
    jobs = jobs or os.cpu_count() or 1
    deadline = time.monotonic() + seconds
    pending = list(enumerate(commands))
    running: list = []
    try:
        while pending or running:
            while pending and len(running) < jobs:
                i, cmd = pending.pop(0)
                log = folder / f"cc{i}.log"
                with open(log, "wb") as err:
                    running.append((subprocess.Popen(
                        list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=err, start_new_session=True), log))
            for proc, log in list(running):
                if proc.poll() is None:
                    continue
                running.remove((proc, log))
                if proc.returncode != 0:
                    text = log.read_bytes()[-4096:].decode("utf-8", "replace")
                    last = (text.strip().splitlines() or ["no message"])[-1].strip()
                    return f"{proc.args[0]} exited with {proc.returncode}: {last}"
            poll()
            if time.monotonic() > deadline:
                return f"{commands[0][0]} gave no result in {seconds:g} s"
            time.sleep(0.05)
    except OSError as exc:
        return f"{commands[0][0]} could not run: {exc}"
    finally:
        for proc, _ in running:  # none left running: after a failure, a stop, a timeout
            kill_group(proc)
    return None


def kill_group(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s whole process group and wait until none of it is left alive (a
    killed driver is reaped at once, while its ``cc1plus`` may still be tearing down
    its memory)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.wait()
    end = time.monotonic() + 5.0
    while time.monotonic() < end and _group_alive(proc.pid):
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


def record(identity_: str, ffi: Optional[tuple], compiler: str, libraries: dict) -> dict:
    """The record of built libraries: ``libraries`` maps a variant to its file's bytes."""
    return {"format": RECORD_FORMAT, "identity": identity_,
            "ffi": list(ffi) if ffi else None, "compiler": compiler,
            "libraries": {v: {"file": library_name(v), "size": len(data),
                              "sha256": hashlib.sha256(data).hexdigest()}
                          for v, data in libraries.items()}}


def write_record(folder: Path, rec: dict) -> None:
    """``folder/native.json``, written whole (a temporary file, fsync, rename)."""
    write_file(folder / RECORD, (json.dumps(rec, indent=1, sort_keys=True) + "\n").encode())


def write_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """``data`` at ``path`` whole or not at all: a temporary file beside it, its mode
    set (not the umask's), fsynced, renamed, the folder fsynced."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_record(data: bytes) -> Optional[dict]:
    """The record in ``data`` (``native.json``'s bytes), or ``None`` when it is not one
    this version wrote: untrusted, so every field is checked before it is used."""
    if len(data) > _MAX_RECORD_BYTES:
        return None
    try:
        rec = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not (isinstance(rec, dict) and rec.get("format") == RECORD_FORMAT
            and isinstance(rec.get("identity"), str)
            and re.fullmatch(r"[0-9a-f]{16}", rec["identity"])
            and isinstance(rec.get("compiler"), str)
            and isinstance(rec.get("libraries"), dict)):
        return None
    ffi = rec.get("ffi")
    if ffi is not None and not (isinstance(ffi, list) and len(ffi) == 2
                                and all(type(x) is int for x in ffi)):
        return None
    for variant, lib in rec["libraries"].items():
        if not (isinstance(lib, dict) and lib.get("file") == library_name(variant)
                and type(lib.get("size")) is int and 0 < lib["size"] <= MAX_LIBRARY_BYTES
                and isinstance(lib.get("sha256"), str)
                and re.fullmatch(r"[0-9a-f]{64}", lib["sha256"])):
            return None
    return rec
