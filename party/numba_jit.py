"""The one numba decorator for compiled loops: nogil, no bounds checks, cached on disk when possible."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import njit


def jit(fn: Callable[..., Any]) -> Any:
    """``njit`` with an on-disk cache; without one where numba finds no writable cache folder
    (it refuses ``cache=True`` at decoration time there, e.g. a read-only install)."""
    for cache in (True, False):
        try:
            return njit(cache=cache, nogil=True, boundscheck=False)(fn)
        except RuntimeError:
            if not cache:
                raise
    raise AssertionError("unreachable")
