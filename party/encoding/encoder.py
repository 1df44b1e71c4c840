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
import multiprocessing
import os
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import reduce
from itertools import islice, repeat
from operator import or_
from pathlib import Path
from typing import Any

import numpy as np

from party.encoding import bits
from party.encoding.blocking import BlockingKeyer, InvalidText
from party.encoding.hashing import SCHEME_FUNCTIONS, check_secret, field_key, keyed_permutation
from party.encoding.normalise import field_qgram_list, field_qgrams, valid_text
from party.encoding.records import EncodedRecords
from party.encoding.schema import FieldSpec, LinkageSchema
from party.errors import PprlError

log = logging.getLogger(__name__)

CHUNK_ROWS = 8192
_OK_EMPTY = 0  # table row 0 is the all-zero filter: a missing value with policy "empty"
_MISSING = -1
_TOO_LONG = -2
_NO_MATCH = -3
_BAD_UTF8 = -4
_UNSEEN = -99  # not in the memo yet


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


class _MaskMemo(dict[str, int]):
    """q-gram -> bit mask; a missing gram is hashed by its codec (so lookups stay in C)."""

    def __init__(self, codec: _FieldCodec) -> None:
        super().__init__()
        self.codec = codec

    def __missing__(self, gram: str) -> int:
        mask = self.codec._gram(gram)[1]
        self[gram] = mask
        return mask


class _FieldCodec:
    """Per-field memo: q-gram -> positions and bit mask, raw value (+salt) -> row of a table
    of packed single-value filters (row 0 is the empty filter)."""

    MAX_VALUES = 200_000
    MAX_GRAMS = 500_000

    def __init__(self, spec: FieldSpec, schema: LinkageSchema, secret: bytes) -> None:
        self.spec = spec
        self.nbits = schema.filter_bits
        self.words = bits.words_for(self.nbits)
        self._key = field_key(secret, schema.hashing.scheme, spec.name)
        self._fn = SCHEME_FUNCTIONS[schema.hashing.scheme]
        self._grams: dict[str, tuple[np.ndarray, int]] = {}
        self._masks = _MaskMemo(self)  # gram -> bit mask, a dict filled on first use
        self.index: dict[object, int] = {}
        self.table = np.zeros((1024, self.words), dtype=np.uint64)
        self._used = 1  # row 0 stays all-zero
        self._sentinels = frozenset(s.strip() for s in spec.missing_sentinels)
        self._pattern = re.compile(spec.pattern) if spec.pattern is not None else None
        self.salted = spec.salt_field is not None

    def _gram(self, gram: str) -> tuple[np.ndarray, int]:
        """(positions, bit mask) of one q-gram, memoised."""
        entry = self._grams.get(gram)
        if entry is None:
            pos = self._fn(self._key, gram.encode("utf-8"), self.nbits, self.spec.k)
            mask = 0
            for p in pos:
                mask |= 1 << p
            entry = (np.asarray(pos, dtype=np.int64), mask)
            if len(self._grams) >= self.MAX_GRAMS:
                self._grams.clear()
                self._masks.clear()
            self._grams[gram] = entry
        return entry

    def gram_positions(self, gram: str) -> np.ndarray:
        """The k positions (int64, as the scheme gives them, possibly repeated) of one q-gram."""
        return self._gram(gram)[0]

    def value_mask(self, value: str, salt: str | None) -> int:
        """The value's filter (before hardening) as an int: bit p set = position p."""
        return reduce(
            or_, map(self._masks.__getitem__, field_qgram_list(self.spec, value, salt)), 0
        )

    def value_positions(self, value: str, salt: str | None) -> np.ndarray:
        grams = field_qgrams(self.spec, value, salt)
        if not grams:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate([self._gram(g)[0] for g in grams]))

    def status(self, value: str, salt: str | None) -> int:
        """1 for a usable value, else a negative code (missing / too long / no match / bad UTF-8)."""
        if not valid_text(value) or (salt is not None and not valid_text(salt)):
            return _BAD_UTF8
        if value.strip() in self._sentinels:
            return _MISSING
        if self.spec.max_length is not None and len(value) > self.spec.max_length:
            return _TOO_LONG
        if self._pattern is not None and self._pattern.fullmatch(value.strip()) is None:
            return _NO_MATCH
        return 1

    def _classify(self, value: str, salt: str | None) -> int | None:
        """The code of a value that needs no filter row (empty, or a negative status), else None."""
        st = self.status(value, salt)
        if st == _MISSING and self.spec.missing_policy == "empty":
            return _OK_EMPTY
        return st if st < 0 else None

    def _store(self, masks: list[int]) -> int:
        """Append value filters (int masks) to the table in one go; returns the first row index."""
        first = self._used
        need = first + len(masks)
        if need > self.table.shape[0]:
            self.table.resize((max(need, 2 * self.table.shape[0]), self.words), refcheck=False)
        nbytes = self.words * 8
        block = b"".join([m.to_bytes(nbytes, "little") for m in masks])
        self.table[first:need] = np.frombuffer(block, dtype="<u8").reshape(len(masks), self.words)
        self._used = need
        return first

    def lookup(self, value: str, salt: str | None) -> int:
        """Row index in ``table`` of the value's filter (0 = empty), or a negative status code."""
        key: object = (value, salt) if self.salted else value
        idx = self.index.get(key)
        if idx is None:
            idx = self._classify(value, salt)
            if idx is None:
                mask = self.value_mask(value, salt)
                idx = self._store([mask]) if mask else _OK_EMPTY
            self.index[key] = idx
        return idx

    def codes(self, chunk: list[list[str]], col: int, salt_col: int | None) -> np.ndarray:
        """Table rows (or negative status codes) of the field's values in every chunk row."""
        if salt_col is None:
            keys: list[Any] = [r[col] for r in chunk]
        else:
            keys = [(r[col], r[salt_col]) for r in chunk]
        index = self.index
        out = np.fromiter(
            map(index.get, keys, repeat(_UNSEEN, len(keys))), dtype=np.int64, count=len(keys)
        )
        miss = np.flatnonzero(out == _UNSEEN).tolist()
        if miss:
            new_keys: list[Any] = []
            masks: list[int] = []
            for key in dict.fromkeys([keys[j] for j in miss]):
                value, salt = key if salt_col is not None else (key, None)
                code = self._classify(value, salt)
                if code is None:
                    mask = self.value_mask(value, salt)
                    if mask:
                        new_keys.append(key)
                        masks.append(mask)
                        continue
                    code = _OK_EMPTY
                index[key] = code
            if masks:
                first = self._store(masks)
                index.update(zip(new_keys, range(first, first + len(masks)), strict=True))
            out[miss] = [index[keys[j]] for j in miss]
        return out

    def trim_cache(self) -> None:
        """Forget memoised values when the table is large (only between chunks)."""
        if self._used > self.MAX_VALUES or len(self.index) > 2 * self.MAX_VALUES:
            self.index.clear()
            self._used = 1
            self.table = np.zeros((1024, self.words), dtype=np.uint64)


_WORKER: Encoder | None = None


def _worker_init(schema: LinkageSchema, secret: bytes) -> None:
    global _WORKER
    _WORKER = Encoder(schema, secret)


def _worker_chunk(
    chunk: list[list[str]], chunk_rows: list[int], positions: dict[str, int], source: str
) -> tuple[list[int], np.ndarray, np.ndarray, Counter[str]]:
    assert _WORKER is not None, "worker not initialised"
    return _WORKER._chunk_core(chunk, chunk_rows, positions, source)


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

        def lists() -> Iterator[list[str]]:
            for rowno, row in enumerate(rows, 1):
                try:
                    vals = [row[c] for c in cols]
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

        def chunks() -> Iterator[list[list[str]]]:
            it = lists()
            while chunk := list(islice(it, CHUNK_ROWS)):
                yield chunk

        report = EncodeReport(source="<rows>")
        positions = {c: i for i, c in enumerate(cols)}
        records = self._encode_stream(chunks(), positions, "<rows>", id_column, report, None)
        for reason, count in report.skipped.items():
            log.info("skipped %d row(s): %s", count, reason)
        return records

    def encode_csv(
        self,
        path: str | Path,
        *,
        id_column: str | None = None,
        progress: Callable[[int], None] | None = None,
        workers: int = 1,
    ) -> tuple[EncodedRecords, EncodeReport]:
        """Stream a CSV file with a header row. ``progress(n)`` is called after each chunk with
        the number of input rows just processed (an increment). ``workers`` > 1 encodes chunks
        in that many processes (ignored when a BLIP generator was injected, so tests stay
        reproducible); results are identical to ``workers=1``.

        The file is read as UTF-8 (a BOM is skipped); bytes that are not valid UTF-8 are an error
        naming the row and column (or a skip, per the field's ``onInvalid``). Blank lines are
        skipped and counted; a row with a different number of columns than the header is an error.
        """
        p = Path(path)
        source = str(p)
        report = EncodeReport(source=source)
        t0 = time.perf_counter()
        try:
            fh = open(p, newline="", encoding="utf-8-sig", errors="surrogateescape")  # noqa: SIM115
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
            positions = {c: header.index(c) for c in wanted}
            width = len(header)

            def chunks() -> Iterator[list[list[str]]]:
                rowno = 0
                try:
                    while chunk := list(islice(reader, CHUNK_ROWS)):
                        if set(map(len, chunk)) - {width, 0}:  # 0 columns: a blank line
                            for i, row in enumerate(chunk, rowno + 1):
                                if len(row) not in (width, 0):
                                    raise EncodeDataError(
                                        f"{source}, row {i}: has {len(row)} column(s), "
                                        f"the header has {width}"
                                    )
                        rowno += len(chunk)
                        yield chunk
                except csv.Error as exc:
                    raise EncodeDataError(
                        f"{source}, line {reader.line_num}: malformed CSV ({exc})"
                    ) from None

            records = self._encode_stream(
                chunks(), positions, source, id_column, report, progress, workers
            )
        report.seconds = time.perf_counter() - t0
        return records, report

    # ----------------------------------------------------------------- core
    def _encode_stream(
        self,
        chunks: Iterator[list[list[str]]],
        positions: dict[str, int],
        source: str,
        id_column: str | None,
        report: EncodeReport,
        progress: Callable[[int], None] | None,
        workers: int = 1,
    ) -> EncodedRecords:
        t0 = time.perf_counter()
        out_words = bits.words_for(self.schema.output_bits)
        nblock = len(self._blockers)
        cap = CHUNK_ROWS
        filters = np.zeros((cap, out_words), dtype=np.uint64)
        digests = np.zeros((cap, nblock), dtype=np.uint64)
        ids: list[str] = []
        seen_ids: set[str] = set()
        id_pos = None if id_column is None else positions[id_column]
        n = 0
        rowno = 0
        skipped: Counter[str] = Counter()

        def collect(
            chunk: list[list[str]],
            chunk_rows: list[int],
            result: tuple[list[int], np.ndarray, np.ndarray, Counter[str]],
        ) -> None:
            nonlocal n, cap
            kept, f_chunk, d_chunk, chunk_skipped = result
            skipped.update(chunk_skipped)
            ids.extend(
                self._chunk_ids(chunk, chunk_rows, kept, id_pos, id_column, source, seen_ids)
            )
            m = f_chunk.shape[0]
            if n + m > cap:
                cap = max(2 * cap, n + m)
                filters.resize((cap, out_words), refcheck=False)
                digests.resize((cap, nblock), refcheck=False)
            filters[n : n + m] = f_chunk
            digests[n : n + m] = d_chunk
            n += m
            if progress is not None:
                progress(len(chunk))

        def prepared() -> Iterator[tuple[list[list[str]], list[int]]]:
            nonlocal rowno
            for raw_chunk in chunks:
                start = rowno + 1
                rowno += len(raw_chunk)
                if all(raw_chunk):
                    yield raw_chunk, list(range(start, start + len(raw_chunk)))
                    continue
                chunk = [r for r in raw_chunk if r]
                blank = len(raw_chunk) - len(chunk)
                skipped["blank line"] += blank
                if progress is not None:
                    progress(blank)
                if chunk:
                    yield chunk, [i for i, r in enumerate(raw_chunk, start) if r]

        if workers <= 1 or self._blip_rng is not None:
            for chunk, chunk_rows in prepared():
                collect(chunk, chunk_rows, self._chunk_core(chunk, chunk_rows, positions, source))
        else:
            self._run_pool(prepared(), positions, source, workers, collect)
        filters.resize((n, out_words), refcheck=False)
        digests.resize((n, nblock), refcheck=False)

        records = EncodedRecords(tuple(ids), filters, self.schema.output_bits, digests)
        stats = fill_stats(filters, self.schema.output_bits)
        report.rows_read = rowno
        report.encoded = n
        report.skipped = dict(skipped)
        report.fill_mean, report.fill_std = stats.mean, stats.std
        report.fill_min, report.fill_max = stats.min, stats.max
        report.k_per_field = {f.name: f.k for f in self.schema.fields}
        report.blip_epsilon = self.blip_epsilon
        report.seconds = time.perf_counter() - t0
        return records

    def _run_pool(
        self,
        work: Iterator[tuple[list[list[str]], list[int]]],
        positions: dict[str, int],
        source: str,
        workers: int,
        collect: Callable[..., None],
    ) -> None:
        """Encode chunks in ``workers`` processes, collecting results in input order.

        Each worker builds its own Encoder (schema and secret are passed once, at start-up) and
        memo tables. At most 2 * workers chunks are in flight, so memory stays bounded. Processes
        are forked when this process has a single thread (fast start), else spawned (safe with
        threads, e.g. inside the node's event loop)."""
        method = "fork" if threading.active_count() == 1 and os.name == "posix" else "spawn"
        ctx = multiprocessing.get_context(method)
        pending: deque[tuple[list[list[str]], list[int], Future[Any]]] = deque()
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=_worker_init,
            initargs=(self.schema, self._secret),
        ) as pool:
            try:
                for chunk, chunk_rows in work:
                    fut = pool.submit(_worker_chunk, chunk, chunk_rows, positions, source)
                    pending.append((chunk, chunk_rows, fut))
                    if len(pending) >= 2 * workers:
                        c, r, f = pending.popleft()
                        collect(c, r, f.result())
                while pending:
                    c, r, f = pending.popleft()
                    collect(c, r, f.result())
            except BaseException:
                for _c, _r, f in pending:
                    f.cancel()
                raise

    def _chunk_core(
        self,
        chunk: list[list[str]],
        chunk_rows: list[int],
        positions: dict[str, int],
        source: str,
    ) -> tuple[list[int], np.ndarray, np.ndarray, Counter[str]]:
        """Encode one chunk: (kept positions, filters, block digests, skip reasons).

        This is the part that runs in worker processes; record ids are handled by the caller."""
        skipped: Counter[str] = Counter()
        codecs = list(self._codecs.values())
        code_arr = np.empty((len(chunk), len(codecs)), dtype=np.int64)
        for fi, codec in enumerate(codecs):
            salt = codec.spec.salt_field
            code_arr[:, fi] = codec.codes(
                chunk, positions[codec.spec.name], None if salt is None else positions[salt]
            )
        keep = np.ones(len(chunk), dtype=bool)
        for j in np.flatnonzero((code_arr < 0).any(axis=1)).tolist():
            skipped[self._bad_value(code_arr[j].tolist(), codecs, source, chunk_rows[j])] += 1
            keep[j] = False
        kept = np.flatnonzero(keep).tolist()
        rows = [chunk[j] for j in kept] if len(kept) < len(chunk) else chunk

        raw = np.zeros((len(kept), bits.words_for(self.schema.filter_bits)), dtype=np.uint64)
        good = code_arr[keep]
        for fi, codec in enumerate(codecs):
            raw |= codec.table[good[:, fi]]
        out = self.apply_blip(self.harden(raw))

        d = np.zeros((len(kept), len(self._blockers)), dtype=np.uint64)
        for bi, keyer in enumerate(self._blockers):
            cols = [positions[c] for c in keyer.columns]
            keys = list(zip(*[[r[c] for r in rows] for c in cols], strict=True))
            try:
                d[:, bi] = keyer.digests(keys)
            except InvalidText:
                j = next(i for i, key in enumerate(keys) if not all(map(valid_text, key)))
                col = next(
                    c for c, v in zip(keyer.columns, keys[j], strict=True) if not valid_text(v)
                )
                raise EncodeDataError(
                    f"{source}, row {chunk_rows[kept[j]]}, field {col!r}: not valid UTF-8"
                ) from None
        for codec in codecs:
            codec.trim_cache()
        return kept, out, d, skipped

    @staticmethod
    def _chunk_ids(
        chunk: list[list[str]],
        chunk_rows: list[int],
        kept: list[int],
        id_pos: int | None,
        id_column: str | None,
        source: str,
        seen_ids: set[str],
    ) -> list[str]:
        """Record ids of the kept rows; checks they are non-empty, unique and valid UTF-8."""
        if id_pos is None:
            return [str(chunk_rows[j]) for j in kept]
        ids = [chunk[j][id_pos].strip() for j in kept]
        new = set(ids)
        if (
            len(new) == len(ids)
            and seen_ids.isdisjoint(new)
            and all(ids)
            and valid_text("".join(ids))
        ):
            seen_ids |= new
            return ids  # the common case, checked without a Python loop
        for rid, j in zip(ids, kept, strict=True):  # find the first bad id in row order
            if not rid or rid in seen_ids or not valid_text(rid):
                problem = (
                    "empty record id"
                    if not rid
                    else "duplicate record id"
                    if rid in seen_ids
                    else "not valid UTF-8"
                )
                raise EncodeDataError(
                    f"{source}, row {chunk_rows[j]}, field {id_column!r}: {problem}"
                )
            seen_ids.add(rid)
        return ids

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
            problem = {
                _TOO_LONG: f"value longer than maxLength {spec.max_length}",
                _NO_MATCH: "value does not match the validation pattern",
                _BAD_UTF8: "not valid UTF-8",
            }[code]
            if spec.on_invalid == "error":
                raise EncodeDataError(f"{where}: {problem}")
            return f"invalid value in field {spec.name!r} ({problem})"
        raise AssertionError("no bad field")
