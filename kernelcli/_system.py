"""Facts about the machine this process runs on: memory now (cgroup limits and devices
belong here too when they are needed). Read only; no jax, no h5py."""

from __future__ import annotations

import os
import resource


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


def available_ram_bytes(meminfo: str = "/proc/meminfo") -> int:
    """Host memory available to a new process now (``MemAvailable``), in bytes."""
    found = _proc_kib(meminfo, "MemAvailable")
    if found is not None:
        return found
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


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
