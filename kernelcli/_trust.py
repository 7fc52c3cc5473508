"""Whether a file or folder may be trusted with code kernelcli runs: the native
library's folder and files (:mod:`kernelcli.kernels._native_build`) and JAX's compilation
cache, whose executables JAX loads as they are (:mod:`kernelcli.kernels._compile_cache`).
Standard library only: the CLI asks before jax is imported."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path
from typing import Optional


def safe_owner(st: os.stat_result) -> bool:
    """Owned by this user or root, and written by no one else: not by others, and by
    the group only where it is the owner's own private group (umask 002's files)."""
    if st.st_uid not in (os.getuid(), 0) or st.st_mode & 0o002:
        return False
    if not st.st_mode & 0o020:
        return True
    try:
        owner, group = pwd.getpwuid(st.st_uid), grp.getgrgid(st.st_gid)
    except KeyError:
        return False
    return (group.gr_name == owner.pw_name and owner.pw_gid == st.st_gid
            and set(group.gr_mem) <= {owner.pw_name})


def untrusted_folder(folder: Path) -> Optional[str]:
    """Why what ``folder`` holds may not be trusted (it, or a folder above it, may be
    written by another user; a folder with the sticky bit lets none rename another's
    entries), or ``None``."""
    path = Path(os.path.realpath(folder))
    for p in (path, *path.parents):
        try:
            st = os.stat(p)
        except OSError as exc:
            return f"{p} cannot be read ({exc.strerror})"
        sticky = p != path and st.st_mode & stat.S_ISVTX
        if not stat.S_ISDIR(st.st_mode) or not (sticky or safe_owner(st)):
            return f"{p} may be written by others than its owner"
    return None
