"""Facts about the machine this process runs on: memory now (cgroup limits and devices
belong here too when they are needed). Read only; no jax, no h5py."""

from __future__ import annotations

import os
import resource


def available_ram_bytes(meminfo: str = "/proc/meminfo") -> int:
    """Host memory available to a new process now (``MemAvailable``), in bytes."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes(status: str = "/proc/self/status") -> int:
    """This process's peak resident memory, in bytes. VmHWM, not ru_maxrss: Linux
    carries ru_maxrss over from the parent process, VmHWM starts afresh at exec."""
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
