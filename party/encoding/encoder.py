"""The encoder: rows or a streamed CSV -> hardened CLK Bloom filters and blocking-key digests.

CLK (Schnell, Bachteler & Reiher 2011): one l-bit Bloom filter per record; every q-gram of every
field sets the k positions its field's keyed hash gives (``party.encoding.hashing``), with k chosen
per field (CLKRBF-style weighting, Durham et al. 2013). Then the deterministic hardening of the
schema is applied identically by every party: XOR-folding (Schnell, Borgs & Encheva 2016) to l/2
bits, then balancing (Berger & Schnell; Schnell & Borgs 2016): the filter is concatenated with its
complement and the 2l bits are permuted by a keyed permutation (``hashing.keyed_permutation``).
Last, optional BLIP randomised response (Alaggan, Gambs & Kermarrec 2012; Schnell & Borgs 2016):
every output bit is flipped independently with probability f, from a per-party CSPRNG
(``os.urandom``) unless a seeded generator is injected for tests.

Speed. Per field the encoder memoises q-gram -> positions and, above that, raw value -> the packed
filter of that value alone, so a record costs one dict lookup per field plus a vectorised OR of
the per-field rows for the whole chunk. Memo tables are bounded and cleared between chunks.
Input is processed in chunks of ``CHUNK_ROWS`` into output arrays that grow in place.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from party.encoding import bits
from party.encoding.blocking import BlockingKeyer
from party.encoding.hashing import SCHEME_FUNCTIONS, check_secret, field_key, keyed_permutation
from party.encoding.normalise import field_qgrams
from party.encoding.records import EncodedRecords
from party.encoding.schema import FieldSpec, LinkageSchema
from party.errors import PprlError

log = logging.getLogger(__name__)

CHUNK_ROWS = 8192
_OK_EMPTY = 0  # table row 0 is the all-zero filter: a missing value with policy "empty"
_MISSING = -1
_TOO_LONG = -2
_NO_MATCH = -3


class EncodeDataError(PprlError, ValueError):
    """Input data cannot be encoded; names file, row and field, never the value."""


@dataclass
class EncodeReport:
    """What happened while encoding one input."""

    source: str
    rows_read: int = 0
    encoded: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    fill_mean: float = 0.0
    fill_min: float = 0.0
    fill_max: float = 0.0
    fill_std: float = 0.0
    k_per_field: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    blip_epsilon: float | None = None

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


@dataclass(frozen=True)
class FillStats:
    mean: float
    std: float
    min: float
    max: float


def fill_stats(filters: np.ndarray, nbits: int) -> FillStats:
    """Fraction of 1-bits per filter: mean, standard deviation, min, max (0s when empty)."""
    if filters.shape[0] == 0:
        return FillStats(0.0, 0.0, 0.0, 0.0)
    f = bits.popcount_rows(filters) / float(nbits)
    return FillStats(float(f.mean()), float(f.std()), float(f.min()), float(f.max()))


def choose_k(filter_bits: int, avg_qgrams: float, target_fill: float = 0.5) -> int:
    """Hash count giving about ``target_fill`` 1-bits for ``avg_qgrams`` q-grams per record.

    A filter of l bits after Q*k uniform insertions has expected fill 1 - exp(-Qk/l), so
    k = -(l/Q) ln(1 - target); for 50% this is k = (l/Q) ln 2 (Bloom 1970; Schnell et al. 2009).
    """
    if filter_bits <= 0 or not avg_qgrams > 0 or not 0 < target_fill < 1:
        raise PprlError(
            "choose_k needs filter_bits > 0, avg_qgrams > 0 and 0 < target_fill < 1, "
            f"got {filter_bits}, {avg_qgrams}, {target_fill}"
        )
    return max(1, round(-(filter_bits / avg_qgrams) * math.log(1.0 - target_fill)))


def blip_epsilon(schema: LinkageSchema) -> float | None:
    """Differential-privacy epsilon of the schema's BLIP noise, per substituted q-gram.

    Replacing one q-gram changes at most 2k bits of the unhardened filter (k = the largest field
    k); XOR-folding maps each bit to one bit, balancing doubles every bit. Flipping each output bit
    with probability f gives epsilon = changed_bits * ln((1 - f) / f) (randomised response,
    Warner 1965; Alaggan et al. 2012; Erlingsson et al. 2014, RAPPOR).
    """
    f = schema.hardening.blip_flip_probability
    if f is None:
        return None
    k_max = max(fs.k for fs in schema.fields)
    changed = 2 * k_max * (2 if schema.hardening.balance else 1)
    return changed * math.log((1.0 - f) / f)


class _FieldCodec:
    """Per-field memo: q-gram -> positions, raw value (+salt) -> row of a packed filter table."""

    MAX_VALUES = 200_000
    MAX_GRAMS = 500_000

    def __init__(self, spec: FieldSpec, schema: LinkageSchema, secret: bytes) -> None:
        self.spec = spec
        self.nbits = schema.filter_bits
        self.words = bits.words_for(self.nbits)
        self._key = field_key(secret, schema.hashing.scheme, spec.name)
        self._fn = SCHEME_FUNCTIONS[schema.hashing.scheme]
        self._grams: dict[str, np.ndarray] = {}
        self._index: dict[object, int] = {}
        self.table = np.zeros((1024, self.words), dtype=np.uint64)
        self._used = 1  # row 0 stays all-zero
        self._sentinels = frozenset(s.strip() for s in spec.missing_sentinels)
        self._pattern = re.compile(spec.pattern) if spec.pattern is not None else None
        self.salted = spec.salt_field is not None

    def gram_positions(self, gram: str) -> np.ndarray:
        """The k positions (int64, as the scheme gives them, possibly repeated) of one q-gram."""
        pos = self._grams.get(gram)
        if pos is None:
            pos = np.asarray(
                self._fn(self._key, gram.encode("utf-8"), self.nbits, self.spec.k), dtype=np.int64
            )
            if len(self._grams) >= self.MAX_GRAMS:
                self._grams.clear()
            self._grams[gram] = pos
        return pos

    def value_positions(self, value: str, salt: str | None) -> np.ndarray:
        grams = field_qgrams(self.spec, value, salt)
        if not grams:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate([self.gram_positions(g) for g in grams]))

    def status(self, value: str) -> int:
        """_OK_EMPTY-or-positive marker 1 for a usable value, else a negative code."""
        if value.strip() in self._sentinels:
            return _MISSING
        if self.spec.max_length is not None and len(value) > self.spec.max_length:
            return _TOO_LONG
        if self._pattern is not None and self._pattern.fullmatch(value.strip()) is None:
            return _NO_MATCH
        return 1

    def lookup(self, value: str, salt: str | None) -> int:
        """Row index in ``table`` of the value's filter (0 = empty), or a negative status code."""
        key: object = (value, salt) if self.salted else value
        idx = self._index.get(key)
        if idx is not None:
            return idx
        st = self.status(value)
        if st == _MISSING and self.spec.missing_policy == "empty":
            idx = _OK_EMPTY
        elif st < 0:
            idx = st
        else:
            pos = self.value_positions(value, salt)
            if pos.size == 0:
                idx = _OK_EMPTY
            else:
                if self._used == self.table.shape[0]:
                    self.table.resize((2 * self.table.shape[0], self.words), refcheck=False)
                row = self.table[self._used]
                row[:] = 0
                np.bitwise_or.at(
                    row, pos >> 6, np.left_shift(np.uint64(1), (pos & 63).astype(np.uint64))
                )
                idx = self._used
                self._used += 1
        self._index[key] = idx
        return idx

    def trim_cache(self) -> None:
        """Forget memoised values when the table is large (only between chunks)."""
        if self._used > self.MAX_VALUES:
            self._index.clear()
            self._used = 1
            self.table = np.zeros((1024, self.words), dtype=np.uint64)


class Encoder:
    """Encodes records under one schema and shared secret (see the module docstring)."""

    def __init__(
        self,
        schema: LinkageSchema,
        secret: bytes,
        *,
        blip_rng: np.random.Generator | None = None,
    ) -> None:
        self.schema = schema
        self._secret = check_secret(secret)
        self._blip_rng = blip_rng
        self._codecs = {f.name: _FieldCodec(f, schema, self._secret) for f in schema.fields}
        self._blockers = [BlockingKeyer(b, schema, self._secret) for b in schema.blocking]
        self._perm: np.ndarray | None = None
        if schema.hardening.balance:
            half = schema.filter_bits // 2 if schema.hardening.xor_fold else schema.filter_bits
            self._perm = np.asarray(keyed_permutation(self._secret, 2 * half), dtype=np.int64)
        # Input columns in a fixed order: fields, then salt and blocking columns not among them.
        cols: list[str] = [f.name for f in schema.fields]
        for f in schema.fields:
            if f.salt_field is not None and f.salt_field not in cols:
                cols.append(f.salt_field)
        for b in schema.blocking:
            for p in b.parts:
                if p.field not in cols:
                    cols.append(p.field)
        self.columns: tuple[str, ...] = tuple(cols)

    # ----------------------------------------------------------------- single values (audit API)
    def _codec(self, name: str) -> _FieldCodec:
        try:
            return self._codecs[name]
        except KeyError:
            raise PprlError(f"field {name!r} is not in the linkage schema") from None

    def field_qgrams(
        self, field: str, value: str, row: Mapping[str, str] | None = None
    ) -> list[str]:
        """The normalised (and, for a salted field, salted with ``row[salt field]``) q-grams."""
        codec = self._codec(field)
        return field_qgrams(codec.spec, value, self._salt_of(codec.spec, row))

    def qgram_positions(self, field: str, qgram: str) -> np.ndarray:
        """Sorted distinct bit positions of one q-gram in the l-bit filter before hardening."""
        return np.unique(self._codec(field).gram_positions(qgram))

    def value_positions(
        self, field: str, value: str, row: Mapping[str, str] | None = None
    ) -> np.ndarray:
        """Sorted distinct positions set by one value (union over its q-grams), before hardening."""
        codec = self._codec(field)
        return codec.value_positions(value, self._salt_of(codec.spec, row))

    @staticmethod
    def _salt_of(spec: FieldSpec, row: Mapping[str, str] | None) -> str | None:
        if spec.salt_field is None:
            return None
        return (row or {}).get(spec.salt_field, "")

    # ----------------------------------------------------------------- hardening
    def harden(self, filters: np.ndarray) -> np.ndarray:
        """Deterministic hardening (XOR-fold, then balance) of (n, words_for(l)) filters.

        Returns (n, words_for(schema.output_bits)) rows; the identity when there is no hardening.
        """
        hd = self.schema.hardening
        nbits = self.schema.filter_bits
        bits.check_rows(filters, nbits)
        out = filters
        if hd.xor_fold:
            half = nbits // 2
            out = bits.slice_bits(out, 0, half) ^ bits.slice_bits(out, half, nbits)
            nbits = half
        if hd.balance:
            assert self._perm is not None
            u = bits.unpack_rows(out, nbits)
            both = np.concatenate([u, 1 - u], axis=1)
            out = bits.pack_rows(both[:, self._perm])
        return out

    @property
    def blip_epsilon(self) -> float | None:
        return blip_epsilon(self.schema)

    def apply_blip(self, filters: np.ndarray) -> np.ndarray:
        """Flip every bit of (n, words_for(output_bits)) filters with the BLIP probability f.

        Each bit is flipped iff a uniform 32-bit integer is below round(f * 2^32). The integers
        come from os.urandom (a CSPRNG, fresh per party and run) unless a generator was injected.
        """
        f = self.schema.hardening.blip_flip_probability
        if f is None or filters.shape[0] == 0:
            return filters
        nbits = self.schema.output_bits
        n = filters.shape[0]
        if self._blip_rng is not None:
            u = self._blip_rng.integers(0, 1 << 32, size=(n, nbits), dtype=np.uint64)
        else:
            u = np.frombuffer(os.urandom(4 * n * nbits), dtype="<u4").reshape(n, nbits)
        flips = u < np.uint64(round(f * (1 << 32)))
        return filters ^ bits.pack_rows(flips)

    # ----------------------------------------------------------------- records
    def encode_rows(
        self, rows: Iterable[Mapping[str, str]], id_column: str | None = None
    ) -> EncodedRecords:
        """Encode an iterable of column -> value mappings (ids: ``id_column`` or 1-based row)."""
        cols = self.columns + ((id_column,) if id_column is not None else ())

        def tuples() -> Iterator[tuple[str, ...]]:
            for rowno, row in enumerate(rows, 1):
                try:
                    vals = tuple(row[c] for c in cols)
                except KeyError as exc:
                    raise EncodeDataError(
                        f"<rows>, row {rowno}: no column {exc.args[0]!r}"
                    ) from None
                for c, v in zip(cols, vals, strict=True):
                    if not isinstance(v, str):
                        raise EncodeDataError(
                            f"<rows>, row {rowno}, field {c!r}: value must be a string, "
                            f"got {type(v).__name__}"
                        )
                yield vals

        report = EncodeReport(source="<rows>")
        records = self._encode_stream(
            tuples(), "<rows>", id_column, len(self.columns) if id_column else None, report, None
        )
        for reason, count in report.skipped.items():
            log.info("skipped %d row(s): %s", count, reason)
        return records

    def encode_csv(
        self,
        path: str | Path,
        *,
        id_column: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[EncodedRecords, EncodeReport]:
        """Stream a CSV file with a header row. ``progress(n)`` is called after each chunk with
        the number of input rows just processed (an increment)."""
        p = Path(path)
        source = str(p)
        report = EncodeReport(source=source)
        t0 = time.perf_counter()
        try:
            fh = open(p, newline="", encoding="utf-8-sig")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            raise EncodeDataError(f"{source}: file not found") from None
        except OSError as exc:
            raise EncodeDataError(f"{source}: cannot read ({exc.strerror})") from None
        with fh:
            reader = csv.reader(fh, strict=True)
            try:
                header = next(reader)
            except StopIteration:
                raise EncodeDataError(f"{source}: empty file (no header row)") from None
            except UnicodeDecodeError:
                raise EncodeDataError(f"{source}, header: not valid UTF-8") from None
            except csv.Error as exc:
                raise EncodeDataError(f"{source}, header: malformed CSV ({exc})") from None
            header = [h.strip() for h in header]
            dup = sorted({h for h in header if header.count(h) > 1})
            if dup:
                raise EncodeDataError(f"{source}: duplicate column name(s) in header: {dup}")
            wanted = self.columns + ((id_column,) if id_column is not None else ())
            missing = [c for c in dict.fromkeys(wanted) if c not in header]
            if missing:
                raise EncodeDataError(
                    f"{source}: header lacks column(s) {missing} required by the schema"
                    + (" or --id-column" if id_column in missing else "")
                )
            positions = [header.index(c) for c in wanted]
            width = len(header)

            def tuples() -> Iterator[tuple[str, ...]]:
                rowno = 0
                try:
                    for row in reader:
                        rowno += 1
                        if len(row) != width:
                            if not row or row == [""] * len(row) and width > 1:
                                report.skipped["blank line"] = (
                                    report.skipped.get("blank line", 0) + 1
                                )
                                yield ()
                                continue
                            raise EncodeDataError(
                                f"{source}, row {rowno}: has {len(row)} column(s), the header has {width}"
                            )
                        yield tuple([row[i] for i in positions])
                except UnicodeDecodeError:
                    raise EncodeDataError(f"{source}, row {rowno + 1}: not valid UTF-8") from None
                except csv.Error as exc:
                    raise EncodeDataError(
                        f"{source}, row {rowno + 1}: malformed CSV ({exc})"
                    ) from None

            records = self._encode_stream(
                tuples(),
                source,
                id_column,
                len(self.columns) if id_column is not None else None,
                report,
                progress,
            )
        report.seconds = time.perf_counter() - t0
        return records, report

    # ----------------------------------------------------------------- core
    def _encode_stream(
        self,
        rows: Iterator[tuple[str, ...]],
        source: str,
        id_column: str | None,
        id_pos: int | None,
        report: EncodeReport,
        progress: Callable[[int], None] | None,
    ) -> EncodedRecords:
        t0 = time.perf_counter()
        out_words = bits.words_for(self.schema.output_bits)
        nblock = len(self._blockers)
        cap = CHUNK_ROWS
        filters = np.zeros((cap, out_words), dtype=np.uint64)
        digests = np.zeros((cap, nblock), dtype=np.uint64)
        ids: list[str] = []
        seen_ids: set[str] = set()
        n = 0
        rowno = 0
        skipped: Counter[str] = Counter()

        chunk: list[tuple[str, ...]] = []
        chunk_rows: list[int] = []

        def flush() -> None:
            nonlocal filters, digests, n, cap
            f_chunk, d_chunk, kept_ids = self._encode_chunk(
                chunk, chunk_rows, source, id_column, id_pos, seen_ids, skipped
            )
            m = f_chunk.shape[0]
            if n + m > cap:
                cap = max(2 * cap, n + m)
                filters.resize((cap, out_words), refcheck=False)
                digests.resize((cap, nblock), refcheck=False)
            filters[n : n + m] = f_chunk
            digests[n : n + m] = d_chunk
            ids.extend(kept_ids)
            n += m
            if progress is not None:
                progress(len(chunk))
            chunk.clear()
            chunk_rows.clear()
            for codec in self._codecs.values():
                codec.trim_cache()

        for vals in rows:
            rowno += 1
            if not vals:  # blank line, already counted by the reader
                continue
            chunk.append(vals)
            chunk_rows.append(rowno)
            if len(chunk) >= CHUNK_ROWS:
                flush()
        if chunk:
            flush()
        filters.resize((n, out_words), refcheck=False)
        digests.resize((n, nblock), refcheck=False)

        records = EncodedRecords(tuple(ids), filters, self.schema.output_bits, digests)
        stats = fill_stats(filters, self.schema.output_bits)
        report.rows_read = rowno
        report.encoded = n
        for reason, count in skipped.items():
            report.skipped[reason] = report.skipped.get(reason, 0) + count
        report.fill_mean, report.fill_std = stats.mean, stats.std
        report.fill_min, report.fill_max = stats.min, stats.max
        report.k_per_field = {f.name: f.k for f in self.schema.fields}
        report.blip_epsilon = self.blip_epsilon
        report.seconds = time.perf_counter() - t0
        return records

    def _encode_chunk(
        self,
        chunk: list[tuple[str, ...]],
        chunk_rows: list[int],
        source: str,
        id_column: str | None,
        id_pos: int | None,
        seen_ids: set[str],
        skipped: Counter[str],
    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
        codecs = list(self._codecs.values())
        col_index = {c: i for i, c in enumerate(self.columns)}
        plan = [
            (c, c.lookup, i, None if c.spec.salt_field is None else col_index[c.spec.salt_field])
            for i, c in enumerate(codecs)
        ]
        codes: list[list[int]] = []
        kept: list[int] = []
        kept_ids: list[str] = []
        for j, vals in enumerate(chunk):
            row_codes = [
                lookup(vals[i], None if si is None else vals[si]) for _c, lookup, i, si in plan
            ]
            if min(row_codes) < 0:
                reason = self._bad_value(row_codes, codecs, source, chunk_rows[j])
                skipped[reason] += 1
                continue
            if id_pos is not None:
                rid = vals[id_pos].strip()
                if not rid:
                    raise EncodeDataError(
                        f"{source}, row {chunk_rows[j]}, field {id_column!r}: empty record id"
                    )
            else:
                rid = str(chunk_rows[j])
            if rid in seen_ids:
                raise EncodeDataError(
                    f"{source}, row {chunk_rows[j]}, field {id_column!r}: duplicate record id"
                )
            seen_ids.add(rid)
            kept_ids.append(rid)
            codes.append(row_codes)
            kept.append(j)

        m = len(kept)
        nbits = self.schema.filter_bits
        raw = np.zeros((m, bits.words_for(nbits)), dtype=np.uint64)
        if m:
            code_arr = np.asarray(codes, dtype=np.int64)
            for fi, codec in enumerate(codecs):
                raw |= codec.table[code_arr[:, fi]]
        out = self.apply_blip(self.harden(raw))

        d = np.zeros((m, len(self._blockers)), dtype=np.uint64)
        for bi, keyer in enumerate(self._blockers):
            cols = [col_index[c] for c in keyer.columns]
            d[:, bi] = [keyer.digest(tuple(chunk[j][c] for c in cols)) for j in kept]
        return out, d, kept_ids

    @staticmethod
    def _bad_value(codes: list[int], codecs: list[_FieldCodec], source: str, rowno: int) -> str:
        """Skip reason for the first bad field, or raise if that field's policy is 'error'."""
        for code, codec in zip(codes, codecs, strict=True):
            if code >= 0:
                continue
            spec = codec.spec
            where = f"{source}, row {rowno}, field {spec.name!r}"
            if code == _MISSING:
                if spec.missing_policy == "error":
                    raise EncodeDataError(
                        f"{where}: missing value (missingValue policy is 'error')"
                    )
                return f"missing value in field {spec.name!r}"
            problem = (
                f"value longer than maxLength {spec.max_length}"
                if code == _TOO_LONG
                else "value does not match the validation pattern"
            )
            if spec.on_invalid == "error":
                raise EncodeDataError(f"{where}: {problem}")
            return f"invalid value in field {spec.name!r} ({problem})"
        raise AssertionError("no bad field")
