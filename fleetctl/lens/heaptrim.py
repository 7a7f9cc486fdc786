"""Give the C heap's free pages back to the system (glibc's malloc_trim), for a long-running
coordinator.

numpy's temporaries of a window (tens of MB each at 1,280 hosts x 8 NICs) come from glibc's
heaps once its dynamic mmap threshold has risen past them, and its per-thread arenas keep freed
pages resident: the coordinator's RSS rose by ~0.3 MB a minute over an hour with no Python
object piling up (docs/scale.md). malloc_trim(0) hands the free pages of every arena back; what
a later window needs is faulted in again. Elsewhere than glibc (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time

_trim = None  # the bound malloc_trim, False where there is none


def _malloc_trim():
    global _trim
    if _trim is None:
        _trim = False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            fn = libc.malloc_trim
        except (OSError, AttributeError):
            return _trim
        fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
        _trim = fn
    return _trim


def release_free_heap() -> float | None:
    """malloc_trim(0); the seconds it took, or None where the C library has no malloc_trim."""
    fn = _malloc_trim()
    if not fn:
        return None
    began = time.perf_counter()
    fn(0)
    return time.perf_counter() - began
