"""Facts about the machine this process runs on: memory now, within the limits of the
process's cgroup. Read only; no jax, no h5py.

Every function takes the files it reads as arguments (``/proc/...``, the cgroup file
system's mount point) so tests can lay out files as the kernel does in a folder of
their own.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Optional


def _proc_kib(path: str, key: str) -> int | None:
    """The ``key:  N kB`` line of a /proc file, in bytes; None where it cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_ram_bytes(meminfo: str = "/proc/meminfo", cgroup: str = "/proc/self/cgroup",
                        cgroup_fs: str = "/sys/fs/cgroup") -> int:
    """Memory this process can still take now, in bytes: the smaller of the host's
    ``MemAvailable`` and what its cgroup's limit leaves (see :func:`memory_available`).
    The one measure of free memory: ``memory: auto``, ``kernel_matrix`` and the solver
    choice of ``predict`` all read it."""
    return memory_available(meminfo, cgroup, cgroup_fs)[0]


def memory_available(meminfo: str = "/proc/meminfo", cgroup: str = "/proc/self/cgroup",
                     cgroup_fs: str = "/sys/fs/cgroup") -> tuple[int, str]:
    """``(bytes, source)``: memory this process can still take now, and what bounds it.

    A scheduler (SLURM, Kubernetes, systemd, docker) confines a job to a cgroup whose
    limit is usually far below the host's free memory; a process that plans by the
    host's figure is killed by the cgroup's OOM killer. ``source`` is
    ``"MemAvailable"`` (the host's figure, from ``meminfo``) or ``"cgroup <folder>"``,
    the cgroup (this one or an ancestor) whose limit less its usage is the tighter.
    """
    host = _proc_kib(meminfo, "MemAvailable")
    if host is None:
        host = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limited = cgroup_memory_available(cgroup, cgroup_fs)
    if limited is not None and limited[0] < host:
        return limited[0], f"cgroup {limited[1]}"
    return host, "MemAvailable"


# cgroup v1 writes "no limit" as the largest page-aligned counter (0x7FFFFFFFFFFFF000
# with 4 KiB pages); anything this large is no limit on any real machine.
_NO_LIMIT = 1 << 62
_FILES = {2: ("memory.max", "memory.current"),
          1: ("memory.limit_in_bytes", "memory.usage_in_bytes")}


def cgroup_memory_available(cgroup: str = "/proc/self/cgroup",
                            cgroup_fs: str = "/sys/fs/cgroup") -> Optional[tuple[int, str]]:
    """``(limit - usage, folder)`` of the tightest memory cgroup this process is in, its
    own or an ancestor's (a parent's limit caps its children); ``None`` where no cgroup
    limits memory (``max``, or no cgroup file system).

    ``cgroup`` is ``/proc/self/cgroup``: ``0::<path>`` for cgroup v2 (the unified
    hierarchy at ``cgroup_fs``, or at ``cgroup_fs/unified`` on a hybrid system), and
    ``<id>:<controllers>:<path>`` with ``memory`` among the controllers for v1
    (``cgroup_fs/memory``). v2 reads ``memory.max`` and ``memory.current``, v1
    ``memory.limit_in_bytes`` and ``memory.usage_in_bytes``.
    """
    try:
        with open(cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    fs = Path(cgroup_fs)
    best = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ident, controllers, path = parts
        if ident == "0" and controllers == "":
            version = 2
            bases = [fs] if (fs / "cgroup.controllers").is_file() else [fs / "unified"]
        elif "memory" in controllers.split(","):
            version = 1
            bases = [fs / controllers, fs / "memory"]
        else:
            continue
        for base in bases:
            found = _tightest(base, path, *_FILES[version])
            if found is not None and (best is None or found[0] < best[0]):
                best = found
            if base.is_dir():
                break
    return best


def _tightest(base: Path, path: str, limit_name: str, usage_name: str):
    """The tightest ``(limit - usage, folder)`` from the cgroup of ``path`` up to
    ``base``, the hierarchy's mount point; ``None`` when no level has a limit."""
    leaf = _locate(base, path)
    if leaf is None:
        return None
    best = None
    folder = leaf
    while True:
        limit = _read_int(folder / limit_name)
        if limit is not None and limit < _NO_LIMIT:
            usage = _read_int(folder / usage_name) or 0
            left = max(0, limit - usage)
            if best is None or left < best[0]:
                best = (left, str(folder))
        if folder == base or folder.parent == folder:
            return best
        folder = folder.parent


def _locate(base: Path, path: str) -> Optional[Path]:
    """The folder of the cgroup ``path`` under the mount point ``base``. Inside a
    container the mount shows only the container's own subtree while
    ``/proc/self/cgroup`` may still name the full path, so leading components are
    dropped until a folder exists (at the least ``base`` itself)."""
    if not base.is_dir():
        return None
    parts = [p for p in path.strip().split("/") if p and p not in (".", "..")]
    for k in range(len(parts) + 1):
        folder = base.joinpath(*parts[k:])
        if folder.is_dir():
            return folder
    return base


def _read_int(path: Path) -> Optional[int]:
    """The integer in a cgroup file; ``None`` for ``max`` (no limit) or no such file."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def peak_rss_bytes(status: str = "/proc/self/status") -> int:
    """This process's peak resident memory, in bytes. VmHWM, not ru_maxrss: Linux
    carries ru_maxrss over from the parent process, VmHWM starts afresh at exec."""
    found = _proc_kib(status, "VmHWM")
    if found is not None:
        return found
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def process_age_seconds(stat: str = "/proc/self/stat", uptime: str = "/proc/uptime") -> float:
    """Seconds since this process started (0.0 where /proc cannot say)."""
    try:
        with open(stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name
        with open(uptime) as f:
            up = float(f.read().split()[0])
        return max(0.0, up - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22
    except (OSError, ValueError, IndexError):
        return 0.0
