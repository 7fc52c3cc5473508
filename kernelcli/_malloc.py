"""The C allocator's thresholds for a process that solves on large arrays (glibc only;
stdlib only).

glibc serves a request below its mmap threshold from the heap, and raises that
threshold (up to 32 MiB) each time a larger mapped block is freed; a heap gives memory
back only from its top. Conjugate gradients free and make arrays of 5-30 MB every
iteration (the active columns, row chunks, block products), so with glibc's defaults
a solve's heap keeps hundreds of MB it no longer uses: ``predict`` at N = 50,000
peaked at 2.11 GiB where its live arrays were about 1.6. With the threshold fixed at
16 MiB the larger ones are mapped fresh and returned when freed (the cost, the kernel
zeroing their pages, measured within noise at N = 20,000: 76.7 s against 74.4; at
4 MiB it was 98 s, the row chunks being mapped too), and a heap's free top of 16 MiB
is given back. Where the C library has no ``mallopt`` (musl, macOS) nothing changes.
"""

from __future__ import annotations

import ctypes

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
LARGE_BYTES = 16 * 2**20


def return_large_frees(threshold: int = LARGE_BYTES) -> bool:
    """Fix glibc's mmap and trim thresholds at ``threshold`` bytes for this process;
    whether the C library took them (False where it has no ``mallopt``)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                        threshold))
