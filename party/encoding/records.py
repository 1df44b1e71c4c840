"""EncodedRecords: a party's encoded filters, popcounts, segments and blocking digests in memory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from party.encoding import bits


@dataclass(frozen=True)
class EncodedRecords:
    """The output of the encoder for one party.

    ``record_ids`` are the party's own ids (they never leave the party). ``filters`` is an
    (n, words_for(filter_bits)) uint64 array in the bits.py layout. ``block_digests`` is (n, B)
    uint64, one column per blocking key of the schema; 0 means "no blocking-key value".
    """

    record_ids: tuple[str, ...]
    filters: np.ndarray
    filter_bits: int
    block_digests: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.record_ids)
        bits.check_rows(self.filters, self.filter_bits)
        if self.filters.shape[0] != n:
            raise bits.BitLayoutError(f"{self.filters.shape[0]} filters for {n} record ids")
        bd = self.block_digests
        if bd.ndim != 2 or bd.dtype != np.uint64 or bd.shape[0] != n:
            raise bits.BitLayoutError(
                f"block_digests must be an (n={n}, B) uint64 array, got {bd.ndim}-D {bd.dtype} "
                f"of shape {bd.shape}"
            )

    def __len__(self) -> int:
        return len(self.record_ids)

    @property
    def popcounts(self) -> np.ndarray:
        """Number of 1-bits of each filter (x in the protocol), int64."""
        return bits.popcount_rows(self.filters)

    @property
    def blocking_keys(self) -> int:
        return int(self.block_digests.shape[1])

    def segments(self, parties: int) -> list[np.ndarray]:
        """Element j is segment j (bits [j*l/P, (j+1)*l/P)) of every filter, packed from bit 0.

        Raises bits.BitLayoutError (a PprlError) when l % P != 0 or P < 2."""
        return bits.segments(self.filters, self.filter_bits, parties)

    def subset(self, indices: np.ndarray | list[int] | slice) -> EncodedRecords:
        """The records at ``indices`` (integer positions or a boolean mask), in that order."""
        idx = np.asarray(np.arange(len(self))[indices], dtype=np.int64).reshape(-1)
        return EncodedRecords(
            tuple(self.record_ids[i] for i in idx.tolist()),
            self.filters[idx],
            self.filter_bits,
            self.block_digests[idx],
        )

    def fill(self) -> np.ndarray:
        """Fraction of 1-bits of each filter (float64)."""
        return self.popcounts / float(self.filter_bits)
