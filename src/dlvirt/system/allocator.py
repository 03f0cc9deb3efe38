"""glibc malloc: keep freed memory in the process instead of returning it to the kernel.

By default glibc serves an allocation above its mmap threshold (128 KiB at first, raised up to the
largest block freed so far) with a fresh ``mmap`` and returns it with ``munmap`` when freed, and it
trims the top of a heap once more than twice that is free. A framework's per-batch temporaries
(a parsed batch, an activation tensor) are that size, so every batch faults in fresh zeroed pages
and, with threads on several cores, each ``munmap`` interrupts every core the process runs on to
flush its TLB: an IPI, which costs a VM exit in a guest. Measured on RS's text parser, 400 lines per
call (2-core AMD EPYC KVM guest, 2026-12-04): 2.4-3.4 ms per call on glibc's defaults against
1.4-2.1 ms with the thresholds below, pinned to one core or running on two.
docs/measurement.md, "Freed memory kept by the allocator".
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Blocks up to glibc's largest mmap threshold (32 MiB on 64-bit) come from the heap; up to 256 MiB
# of free memory at a heap's top stays there. Setting either also stops glibc's own adjustment.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20


class AllocatorError(RuntimeError):
    """The C library cannot be told to keep freed memory (not glibc, or it refused)."""


def environment() -> dict[str, str]:
    """The same settings for processes started from here (glibc reads them once, at start-up)."""
    return {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


def retain_freed_memory() -> dict[str, int]:
    """Set this process's thresholds (``mallopt``, every arena, from the next allocation on) and
    return them; an AllocatorError where the C library has no ``mallopt`` or refuses a value."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError) as err:
        raise AllocatorError(f"the C library ({name}) has no mallopt: not glibc, cannot keep freed memory") from err
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = {"mmap_threshold": (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                "trim_threshold": (_M_TRIM_THRESHOLD, TRIM_THRESHOLD)}
    for key, (param, value) in settings.items():
        if mallopt(param, value) != 1:
            raise AllocatorError(f"mallopt refused {key} {value}")
    return {key: value for key, (_, value) in settings.items()}
