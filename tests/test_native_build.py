"""The native library kept between processes (``kernelcli.kernels._native_build``): named
by what its code depends on, loaded only from this user's own files, written whole,
and built again where the kept one is damaged."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import numpy as np
import pytest

from helpers_cli import cli_env, finish, start_cli, wait_until, write_config
from kernelcli.kernels import _native, _native_build

SYMBOLS = _native.SYMBOLS
needs_compiler = pytest.mark.skipif(_native_build.compiler() is None,
                                    reason="no C++ compiler here")


def test_only_this_users_own_unshared_regular_files_are_trusted(tmp_path):
    lib = tmp_path / "a.so"
    lib.write_bytes(b"\x7fELF")
    lib.chmod(0o644)
    assert _native_build._trusted(lib, stat.S_ISREG)
    lib.chmod(0o664)  # group may write
    assert not _native_build._trusted(lib, stat.S_ISREG)
    lib.chmod(0o646)  # anyone may write
    assert not _native_build._trusted(lib, stat.S_ISREG)
    lib.chmod(0o644)
    (tmp_path / "link.so").symlink_to(lib)
    assert not _native_build._trusted(tmp_path / "link.so", stat.S_ISREG)
    os.mkfifo(tmp_path / "fifo.so")  # never opened: nothing to hang on
    assert not _native_build._trusted(tmp_path / "fifo.so", stat.S_ISREG)
    assert not _native_build._trusted(tmp_path / "missing.so", stat.S_ISREG)
    assert not _native_build._trusted(tmp_path, stat.S_ISREG)


@needs_compiler
def test_the_kept_folder_is_made_private_and_a_shared_one_is_not_used(tmp_path):
    cxx = _native_build.compiler()
    kept = _native_build._kept_path(tmp_path, cxx)
    assert kept.parent == tmp_path / "kernelcli-native"
    assert stat.S_IMODE(kept.parent.stat().st_mode) & 0o077 == 0
    assert kept.name == f"{_native_build._key(cxx)}.so" and len(kept.stem) == 32
    kept.parent.chmod(0o777)
    assert _native_build._kept_path(tmp_path, cxx) is None
    assert _native_build._kept_path(None, cxx) is None


@needs_compiler
def test_a_damaged_kept_library_is_built_again_and_then_loaded_as_kept(tmp_path):
    kept = _native_build._kept_path(tmp_path, _native_build.compiler())
    kept.write_bytes(b"not a library")  # e.g. a disk that filled while it was copied
    kept.chmod(0o600)
    lib, why = _native_build.load(SYMBOLS, tmp_path)
    assert why is None and lib is not None
    assert kept.read_bytes()[:4] == b"\x7fELF"  # replaced, whole
    assert sorted(p.name for p in kept.parent.iterdir()) == [kept.name]  # no build left
    again = kept.stat()
    lib, why = _native_build.load(SYMBOLS, tmp_path)
    assert why is None
    assert (kept.stat().st_ino, kept.stat().st_mtime_ns) == (again.st_ino, again.st_mtime_ns)


def test_build_folders_killed_processes_left_are_swept_once_older_than_any_build(tmp_path):
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


def compilers_of(folder: Path) -> list:
    """Compiler processes still running on files of ``folder`` (by their command lines)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(folder).encode() in a for a in args) and b"--version" not in args:
            found.append(args)
    return found


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_first_build_stops_it_at_once(tmp_path, signum):
    """The library's build (10-50 s) is the first thing a run of auto's native plan does
    on a new machine: a signal then ends it within a poll, the compilers killed and
    their folder removed, and the command exits 128 + the signal's number."""
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((8, 6, 6, 3)))
    cfg = write_config(tmp_path, "b", layers=[
        {"conv": {"filter": [3, 3], "padding": "SAME"}}, "relu", "global_avg_pool",
        {"dense": {}}])
    cache = tmp_path / "cache"
    proc = start_cli("compute", cfg, cwd=tmp_path, log_dir=tmp_path / "logs",
                     env=cli_env(KERNELCLI_CACHE_DIR=str(cache)))
    home = cache / "kernelcli-native"
    assert wait_until(lambda: list(home.glob(".build-*/cc1.log")), proc, timeout=120)
    assert compilers_of(home)
    t = time.monotonic()
    proc.send_signal(signum)
    rc, _, err = finish(proc, timeout=60)
    assert rc == 128 + signum, err
    assert time.monotonic() - t < 5, err  # a build takes 10 s or more
    assert compilers_of(home) == []
    assert list(home.iterdir()) == []  # nothing kept, no build folder left
