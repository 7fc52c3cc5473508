"""The allocator thresholds of a solving process (:mod:`kernelcli._malloc`), in a fresh
process of their own: the setting is process-wide."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# a 24 MB array freed raises glibc's default threshold past the next 20 MB one, which
# then comes from the heap; under a fixed 16 MiB threshold it is mapped, and its free
# gives the memory back at once
_PROBE = """
import sys
import numpy as np
from kernelcli._malloc import return_large_frees
from kernelcli._system import _proc_kib
took = return_large_frees() if sys.argv[1] == "set" else None
def rss():
    return _proc_kib("/proc/self/status", "VmRSS")
a = np.ones(3 * 2**20); del a            # 24 MB, mapped, freed: the threshold rises
keep, before = [], rss()
for _ in range(20):
    b = np.ones(20 * 2**20 // 8)         # 20 MB
    keep.append(np.ones(4096))           # small and long-lived, above it in the heap
    del b
print(took, (rss() - before) // 2**20)
"""


@pytest.mark.skipif(not GLIBC, reason="the setting is glibc's mallopt; other C "
                                       "libraries keep their own behaviour")
def test_large_arrays_freed_go_back_to_the_system():
    """Without the setting the probe's heap keeps a freed 20 MB array; with it, none."""
    def run(mode):
        out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True,
                             text=True, check=True).stdout.split()
        return out[0], int(out[1])

    took, grown = run("set")
    assert took == "True" and grown < 8, grown
    assert run("default")[1] >= 16  # the probe does show what the setting prevents
