"""Give the start-up's freed memory back to the operating system once the gateway serves.

Importing the SDK and building the gateway's pydantic models (the tool schemas, the configuration) allocates
and frees a great deal; the C allocator keeps the freed pages mapped, so they stay in the idle RSS (~4 MB
here). Once serving begins, one garbage collection and ``malloc_trim(0)`` (glibc: every arena) return them.
Elsewhere (no glibc) this does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc

__all__ = ["release_startup_memory"]


def release_startup_memory() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim this way
        ctypes.CDLL(None).malloc_trim(0)
