"""One array per party handed to a compiled loop as an array of addresses: one variant for any P.

numba compiles a loop once per type signature, and a tuple of P arrays is a new type for every P:
a loop taking one would compile anew (~5-10 CPU-s each) in the first run of every new party
count. ``PartyArrays`` passes the P arrays instead as two int64 arrays, their data addresses
(``at``) and their row counts (``rows``), whatever P; inside the loop ``u64_rows`` / ``i64_rows``
turn party j's address back into an array view (no copy, no reference count). The views are
valid only while the ``PartyArrays`` object (which holds the arrays) is alive: keep it referenced
for as long as a loop may run on its addresses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import carray, types
from numba.extending import intrinsic

from party.numba_jit import jit


class PartyArrays:
    """C-contiguous copies (only where needed) of one array per party, all of ``dtype`` and of
    ``width`` columns (None: 1-D), with their addresses ``at`` and row counts ``rows``."""

    def __init__(self, arrays: Sequence[np.ndarray], dtype: type, width: int | None = None):
        views: list[np.ndarray] = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
        for j, v in enumerate(views):
            if (v.ndim != 1) if width is None else (v.ndim != 2 or v.shape[1] != width):
                shape = "1-D" if width is None else f"2-D with {width} columns"
                raise ValueError(f"party {j}'s array must be {shape}, got shape {v.shape}")
        self.arrays = tuple(views)
        self.width = width
        self.at = np.array([v.ctypes.data for v in views], dtype=np.int64)
        self.rows = np.array([v.shape[0] for v in views], dtype=np.int64)
        self.at.flags.writeable = False
        self.rows.flags.writeable = False

    def __len__(self) -> int:
        return len(self.arrays)


@intrinsic
def _u64_pointer(typingctx, address):  # type: ignore[no-untyped-def]
    """An int64 address as a pointer to uint64 (no load: ``carray`` reads through it)."""
    if not isinstance(address, types.Integer):
        return None
    sig = types.CPointer(types.uint64)(address)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


@intrinsic
def _i64_pointer(typingctx, address):  # type: ignore[no-untyped-def]
    """An int64 address as a pointer to int64 (no load: ``carray`` reads through it)."""
    if not isinstance(address, types.Integer):
        return None
    sig = types.CPointer(types.int64)(address)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


@intrinsic
def _load_u64(typingctx, address):  # type: ignore[no-untyped-def]
    """The uint64 at an int64 address."""
    if not isinstance(address, types.Integer):
        return None
    sig = types.uint64(address)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        pointer = builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.uint64)))
        return builder.load(pointer)

    return sig, codegen


@jit
def u64_item(at, j, i):  # type: ignore[no-untyped-def]
    """Item i of party j's uint64 array of a 1-D ``PartyArrays`` (i below its ``rows[j]``)."""
    return _load_u64(at[j] + 8 * i)  # type: ignore[call-arg]


@jit
def u64_rows(at, rows, j, width):  # type: ignore[no-untyped-def]
    """Party j's (rows[j], width) uint64 array of a 2-D ``PartyArrays`` (its ``at``, ``rows``)."""
    return carray(_u64_pointer(at[j]), (rows[j], width))  # type: ignore[call-arg]


@jit
def u64_values(at, rows, j):  # type: ignore[no-untyped-def]
    """Party j's (rows[j],) uint64 array of a 1-D ``PartyArrays``."""
    return carray(_u64_pointer(at[j]), rows[j])  # type: ignore[call-arg]


@jit
def i64_values(at, rows, j):  # type: ignore[no-untyped-def]
    """Party j's (rows[j],) int64 array of a 1-D ``PartyArrays``."""
    return carray(_i64_pointer(at[j]), rows[j])  # type: ignore[call-arg]
