"""The shape of a party's encoded table as the protocol engine reads it (a structural type)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from party.encoding.bits import BitLayoutError, check_rows
from party.protocol.errors import ProtocolError


class EncodedTable(Protocol):
    """What the engine needs from ``party.encoding.records.EncodedRecords``.

    ``filters`` is (n, words_for(filter_bits)) uint64 in the layout of ``party.encoding.bits``;
    ``block_digests`` is (n, B) uint64 with 0 meaning "no blocking-key value".
    """

    @property
    def record_ids(self) -> tuple[str, ...]: ...

    @property
    def filters(self) -> np.ndarray: ...

    @property
    def filter_bits(self) -> int: ...

    @property
    def block_digests(self) -> np.ndarray: ...


def validate_table(table: EncodedTable, filter_bits: int, what: str) -> None:
    """Raise ProtocolError unless ``table`` fits the parameters (``what`` names it in messages)."""
    if table.filter_bits != filter_bits:
        raise ProtocolError(
            f"{what}: filters have {table.filter_bits} bits, the parameters say {filter_bits}"
        )
    filters = table.filters
    if not isinstance(filters, np.ndarray):
        raise ProtocolError(f"{what}: filters must be a numpy array")
    try:
        check_rows(filters, filter_bits)
    except BitLayoutError as exc:
        raise ProtocolError(f"{what}: filters: {exc}") from None
    n = filters.shape[0]
    if len(table.record_ids) != n:
        raise ProtocolError(f"{what}: {len(table.record_ids)} record ids for {n} filters")
    if len(set(table.record_ids)) != n:
        raise ProtocolError(f"{what}: record ids are not unique")
    digests = table.block_digests
    if (
        not isinstance(digests, np.ndarray)
        or digests.dtype != np.uint64
        or digests.ndim != 2
        or digests.shape[0] != n
        or digests.shape[1] < 1
    ):
        raise ProtocolError(f"{what}: block_digests must be an (n={n}, B>=1) uint64 array")
