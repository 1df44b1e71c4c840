"""The node process's resident memory: reading it, and giving freed heap pages back to the OS.

glibc keeps freed small and mid-sized blocks (numpy arrays under its dynamic mmap threshold, up
to 32 MiB) in its heaps, so after a stage frees gigabytes the process's resident set need not
shrink. ``trim()`` calls ``malloc_trim(0)`` (glibc only; a no-op elsewhere), which returns every
free page of every heap; the node calls it when a stage ends, before the next one allocates.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource

_LIBC_NAME = ctypes.util.find_library("c")
try:
    _MALLOC_TRIM = getattr(ctypes.CDLL(_LIBC_NAME), "malloc_trim", None) if _LIBC_NAME else None
except OSError:  # pragma: no cover - no C library to load
    _MALLOC_TRIM = None


def rss_bytes() -> int:
    """The process's resident set now (Linux ``/proc/self/statm``; 0 where it does not exist)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        return 0


def peak_rss_bytes() -> int:
    """The process's peak resident set so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def trim() -> bool:
    """Return free heap pages to the OS; True if glibc's ``malloc_trim`` ran."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
