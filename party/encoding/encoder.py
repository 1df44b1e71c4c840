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

Speed. CSV input is parsed by pyarrow's streaming reader and each needed column of a block is
dictionary-encoded in C++, so Python only sees each block's distinct values. Per field the encoder
memoises raw value -> the packed filter of that value alone (a row of a table), so a record costs a
gather of one table row per field and a vectorised OR. The filters of a batch's new values are
built together: normalised in one pass over the batch (``normalise.normalise_many``), split into
q-grams as integer codes by numpy (``value_filters.gram_codes``), one keyed hash stream per
distinct q-gram, and the bits ORed per distinct (gram, k) pair (``value_filters.GramStreams``).
Normalisation is memoised per spec and shared with the blocking keys, whose part values are
computed per batch of new values (``blocking.part_values``) and whose digests are one AES call per
key part over the batch (``blocking``, ``hashing``). Memo tables are bounded and cleared between
batches. Output arrays grow in place, batch by batch.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice, repeat
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from party.encoding import bits
from party.encoding.blocking import BlockingKeyer, InvalidText, LshKeyer, all_pairs_digest
from party.encoding.hashing import SCHEME_FUNCTIONS, check_secret, field_key, keyed_permutation
from party.encoding.normalise import (
    PAD,
    NormaliserMemos,
    field_qgram_list,
    field_qgrams,
    memoised_normaliser,
    memoised_normaliser_many,
    valid_text,
)
from party.encoding.records import EncodedRecords
from party.encoding.schema import FieldSpec, LinkageSchema
from party.encoding.value_filters import GramCodes, GramStreams, gram_codes
from party.errors import PprlError

log = logging.getLogger(__name__)

CHUNK_ROWS = 8192  # rows per batch for encode_rows
CSV_BLOCK_BYTES = 1 << 22  # bytes per pyarrow CSV block (one batch) for encode_csv
_OK_EMPTY = 0  # table row 0 is the all-zero filter: a missing value with policy "empty"
_MISSING = -1
_TOO_LONG = -2
_NO_MATCH = -3
_BAD_UTF8 = -4
_UNSEEN = -99  # not in the memo yet
# ``Encoder.step_cpu``: decoding a batch's columns; field filters (memo look-ups, first sight
# of new values, the gather and hardening); blocking-key digests; record ids and fill counts
STEPS = ("columns", "fields", "blocking", "ids")


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
    """Per-field memo: raw value (+salt) -> row of a table of packed single-value filters (row 0
    is the empty filter); q-gram -> hash-stream positions for the single-value API."""

    MAX_VALUES = 250_000
    MAX_GRAMS = 500_000

    def __init__(
        self,
        spec: FieldSpec,
        schema: LinkageSchema,
        secret: bytes,
        norm_memos: NormaliserMemos | None = None,
    ) -> None:
        self.spec = spec
        self.nbits = schema.filter_bits
        self.words = bits.words_for(self.nbits)
        self._key = field_key(secret, schema.hashing.scheme, spec.name)
        self._fn = SCHEME_FUNCTIONS[schema.hashing.scheme]
        self._streams: dict[str, list[int]] = {}  # gram -> the longest position stream computed
        self._streams_table = GramStreams(self._fn, self._key, self.nbits)  # batch path
        self._normalise = memoised_normaliser(spec.normalisation, norm_memos)
        self._normalise_many = memoised_normaliser_many(spec.normalisation, norm_memos)
        self.index: dict[object, int] = {}
        self.table = np.zeros((1024, self.words), dtype=np.uint64)
        self._used = 1  # row 0 stays all-zero
        self._sentinels = frozenset(s.strip() for s in spec.missing_sentinels)
        self._pattern = re.compile(spec.pattern) if spec.pattern is not None else None
        self.salted = spec.salt_field is not None
        # when a list: every block of new memo entries is also appended to it (values, their
        # codes, the filter rows of the codes > 0), for lanes that share first sight
        self.fresh: list[tuple[list[Any], np.ndarray, np.ndarray]] | None = None

    def _positions(self, gram: str, k: int | None = None) -> np.ndarray:
        """The first k (default: the field's k) positions of the gram's hash stream; one memoised
        stream, as long as the largest k asked, serves every k (bitsPerFeature varies k)."""
        k = self.spec.k if k is None else k
        stream = self._streams.get(gram)
        if stream is None or len(stream) < k:
            stream = self._fn(self._key, gram.encode("utf-8"), self.nbits, k)
            if len(self._streams) >= self.MAX_GRAMS:
                self._streams.clear()
            self._streams[gram] = stream
        return np.asarray(stream[:k], dtype=np.int64)

    def gram_positions(self, gram: str) -> np.ndarray:
        """The k positions (int64, as the scheme gives them, possibly repeated) of one q-gram."""
        return self._positions(gram)

    def value_positions(self, value: str, salt: str | None) -> np.ndarray:
        grams = field_qgram_list(self.spec, value, salt)
        if not grams:
            return np.zeros(0, dtype=np.int64)
        ks = self.spec.token_ks(len(grams))
        return np.unique(
            np.concatenate([self._positions(g, k) for g, k in zip(grams, ks, strict=True)])
        )

    def status(self, value: str, salt: str | None, checked: bool = False) -> int:
        """1 for a usable value, else a negative code (missing / too long / no match / bad UTF-8);
        ``checked``: the value is known to be valid UTF-8."""
        if not (checked or valid_text(value)) or (salt is not None and not valid_text(salt)):
            return _BAD_UTF8
        if value.strip() in self._sentinels:
            return _MISSING
        if self.spec.max_length is not None and len(value) > self.spec.max_length:
            return _TOO_LONG
        if self._pattern is not None and self._pattern.fullmatch(value.strip()) is None:
            return _NO_MATCH
        return 1

    def _classify(self, value: str, salt: str | None, checked: bool = False) -> int | None:
        """The code of a value that needs no filter row (empty, or a negative status), else None.
        ``checked``: the value (unsalted) is known to be valid UTF-8."""
        st = self.status(value, salt, checked)
        if st == _MISSING and self.spec.missing_policy == "empty":
            return _OK_EMPTY
        return st if st < 0 else None

    def _store_rows(self, rows: np.ndarray) -> int:
        """Append value filters (packed rows) to the table; returns the first row index."""
        first = self._used
        need = first + rows.shape[0]
        if need > self.table.shape[0]:
            self.table.resize((max(need, 2 * self.table.shape[0]), self.words), refcheck=False)
        self.table[first:need] = rows
        self._used = need
        return first

    def codes_for_keys(self, keys: list[Any], checked: bool = False) -> np.ndarray:
        """Table rows (or negative status codes) for memo keys: values, or (value, salt) pairs
        for a salted field. Misses are computed together and stored in one block."""
        index = self.index
        out = np.fromiter(
            map(index.get, keys, repeat(_UNSEEN, len(keys))), dtype=np.int64, count=len(keys)
        )
        miss = np.flatnonzero(out == _UNSEEN)
        if miss.size:
            miss_keys = list(map(keys.__getitem__, miss.tolist()))
            new_keys = list(dict.fromkeys(miss_keys))
            codes = self._classify_many(new_keys, checked)
            index.update([(k, c) for k, c in zip(new_keys, codes, strict=True) if c is not None])
            usable = [k for k, c in zip(new_keys, codes, strict=True) if c is None]
            if usable:
                spec = self.spec
                rows = self._streams_table.value_rows(
                    self._grams_of(usable), spec.k, spec.bits_per_feature
                )
                nonzero = np.asarray(rows.any(axis=1), dtype=bool)
                first = self._store_rows(rows[nonzero])
                row_of = np.full(len(usable), _OK_EMPTY, dtype=np.int64)
                row_of[nonzero] = np.arange(first, first + int(nonzero.sum()))
                index.update(zip(usable, row_of.tolist(), strict=True))
            out[miss] = np.fromiter(
                map(index.__getitem__, miss_keys), dtype=np.int64, count=len(miss_keys)
            )
            if self.fresh is not None:
                new = np.fromiter(map(index.__getitem__, new_keys), np.int64, len(new_keys))
                self.fresh.append((new_keys, new, self.table[new[new > 0]]))
        return out

    def _classify_many(self, keys: list[Any], checked: bool) -> list[int | None]:
        """``_classify`` of each memo key; for an unsalted, checked field with the default
        missing sentinel and no length or pattern rule, one comprehension (a value is missing
        iff it is empty after ``str.strip()``, i.e. empty or all ``str.isspace()``)."""
        spec = self.spec
        if (
            not self.salted
            and checked
            and self._sentinels == {""}
            and spec.max_length is None
            and self._pattern is None
        ):
            missing = _OK_EMPTY if spec.missing_policy == "empty" else _MISSING
            return [missing if not v or v.isspace() else None for v in keys]
        if self.salted:
            return [self._classify(v, salt) for v, salt in keys]
        return [self._classify(v, None, checked) for v in keys]

    def _grams_of(self, usable: list[Any]) -> GramCodes | list[list[str]]:
        """The q-grams of usable memo keys: as codes (one vectorised pass over the batch) for an
        unsalted field, else (or where codes do not fit) as lists of strings."""
        spec = self.spec
        if not self.salted:
            grams = gram_codes(
                self._normalise_many(usable), spec.q, spec.padding, spec.positional, PAD
            )
            if grams is not None:
                return grams
            return [field_qgram_list(spec, v, None, self._normalise) for v in usable]
        return [field_qgram_list(spec, v, salt, self._normalise) for v, salt in usable]

    def trim_cache(self) -> None:
        """Forget memoised values when the table is large (only between chunks)."""
        if self._used > self.MAX_VALUES or len(self.index) > 2 * self.MAX_VALUES:
            self.index.clear()
            self._used = 1
            self.table = np.zeros((1024, self.words), dtype=np.uint64)


@dataclass
class _Column:
    """One column of a batch, dictionary-encoded: row i holds ``uniques[indices[i]]``."""

    indices: np.ndarray  # (n,) int64
    uniques: list[str]
    _valid: bool | None = None
    dictionary: Any = None  # from_arrow: the distinct raw values, an arrow binary array

    @property
    def valid(self) -> bool:
        """True if every value is valid UTF-8 (checked once; ASCII text in one C call)."""
        if self._valid is None:
            self._valid = "".join(self.uniques).isascii() or all(map(valid_text, self.uniques))
        return self._valid

    @classmethod
    def from_values(cls, values: list[str]) -> _Column:
        seen: dict[str, int] = {}
        idx = [seen.setdefault(v, len(seen)) for v in values]
        return cls(np.asarray(idx, dtype=np.int64), list(seen))

    @classmethod
    def from_arrow(cls, array: Any, dedupe: bool = True) -> _Column:
        """From a pyarrow binary array: bytes that are not UTF-8 become lone surrogates
        (``surrogateescape``), which validation reports as invalid UTF-8 with row and field.
        ``dedupe=False`` keeps every row's value (a column of mostly distinct values, record
        ids: hashing them would find nothing to share); ``uniques`` may then repeat."""
        if dedupe:
            enc = pc.dictionary_encode(array)
            indices = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            values = enc.dictionary
        else:
            indices = np.arange(len(array), dtype=np.int64)
            values = array
        try:  # valid UTF-8 (checked in C): pyarrow makes the strings, and the column is valid
            return cls(indices, values.cast(pa.string()).to_pylist(), True, values)
        except pa.ArrowInvalid:
            pass
        uniques = [b.decode("utf-8", "surrogateescape") for b in values.to_pylist()]
        return cls(indices, uniques, None, values)


def _combine(cols: list[_Column]) -> tuple[list[Any], np.ndarray]:
    """Distinct value tuples across columns, and each row's index into them."""
    if len(cols) == 1:
        return [(u,) for u in cols[0].uniques], cols[0].indices
    stacked = np.stack([c.indices for c in cols], axis=1)
    combos, inverse = np.unique(stacked, axis=0, return_inverse=True)
    keys = [tuple(c.uniques[i] for c, i in zip(cols, row, strict=True)) for row in combos.tolist()]
    return keys, inverse.reshape(-1)


def _may_have_blank_lines(p: Path) -> bool:
    """True if the file contains an empty line (b"\\n\\n" or b"\\n\\r\\n"; possibly inside a
    quoted value, which only costs the slower exact path). Reads the file once, in C."""
    tail = b""  # the last two bytes read: a blank line may straddle two blocks
    try:
        with open(p, "rb") as fh:
            while block := fh.read(1 << 22):
                edge = tail + block[:2]
                if b"\n\n" in block or b"\n\r\n" in block or b"\n\n" in edge or b"\n\r\n" in edge:
                    return True
                tail = block[-2:] if len(block) >= 2 else (tail + block)[-2:]
    except OSError:
        return False  # the reader reports the problem
    return False


def estimate_rows(p: Path) -> int:
    """Rows a CSV probably has (lines per byte of its first 64 KiB times its size, +2%), so
    that the output arrays are allocated once rather than grown by copying; at least
    ``CHUNK_ROWS`` (and that if the file cannot be read: the reader reports it)."""
    try:
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            sample = fh.read(1 << 16)
    except OSError:
        return CHUNK_ROWS
    per_byte = sample.count(b"\n") / max(1, len(sample))
    return max(CHUNK_ROWS, math.ceil(per_byte * size * 1.02) + 1)


def locate_csv_problem(
    text: Iterable[str], source: str, width: int, first_row: int
) -> EncodeDataError | None:
    """The first problem the csv module finds in CSV rows (no header; the first is row
    ``first_row``, blank lines counted): a wrong number of columns or malformed quoting."""
    rowno = first_row - 1
    try:
        for row in csv.reader(text, strict=True):
            rowno += 1
            if row and len(row) != width:
                return EncodeDataError(
                    f"{source}, row {rowno}: has {len(row)} column(s), the header has {width}"
                )
    except csv.Error as exc:
        return EncodeDataError(f"{source}, row {rowno + 1}: malformed CSV ({exc})")
    return None


@dataclass(frozen=True)
class CsvLayout:
    """What to read of a CSV with a given header: ``width`` columns named ``internal`` for
    pyarrow; ``needed`` maps each input column the encoder reads to its internal name,
    ``positions`` to its index; ``plain``: columns not worth deduplicating (record ids)."""

    width: int
    internal: tuple[str, ...]
    needed: dict[str, str]
    positions: dict[str, int]
    plain: frozenset[str]

    def arrow_options(self, block_bytes: int, *, skip_header: bool = True) -> dict[str, Any]:
        """pyarrow CSV reader options: the needed columns as bytes, RFC 4180 quoting, quoted
        newlines allowed, empty lines ignored (``_may_have_blank_lines`` routes files with
        them elsewhere), ``block_bytes`` per block."""
        return {
            "read_options": pcsv.ReadOptions(
                skip_rows=1 if skip_header else 0,
                column_names=list(self.internal),
                block_size=block_bytes,
                use_threads=skip_header,
            ),
            "parse_options": pcsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=True),
            "convert_options": pcsv.ConvertOptions(
                column_types={name: pa.binary() for name in self.needed.values()},
                include_columns=list(dict.fromkeys(self.needed.values())),
                strings_can_be_null=False,
            ),
        }


@dataclass
class _Batch:
    """``n`` input rows, column by column. Row numbers are ``first_row + j`` unless ``rownos``
    lists them (when blank lines, which are skipped but counted, fall inside the batch). A batch
    from pyarrow keeps its record batch in ``arrow`` (column -> arrow name in ``arrow_names``)
    until ``materialise`` decodes the columns, so a worker process can do that work."""

    n: int
    first_row: int
    columns: dict[str, _Column]
    rownos: list[int] | None = None
    blank_lines: int = 0
    arrow: Any = None
    arrow_names: dict[str, str] | None = None
    plain: frozenset[str] = frozenset()  # arrow columns not worth deduplicating (record ids)

    def row(self, j: int) -> int:
        return self.first_row + j if self.rownos is None else self.rownos[j]

    def materialise(self) -> None:
        if self.arrow is not None:
            assert self.arrow_names is not None
            names = self.arrow_names
            self.columns = {
                c: _Column.from_arrow(self.arrow.column(n), dedupe=c not in self.plain)
                for c, n in names.items()
            }
            self.arrow = None


@dataclass
class _BatchResult:
    """One encoded batch (picklable): kept row offsets, filters, block digests, the kept rows'
    raw record ids (None: ids are row numbers), skip reasons, and the batch's row numbering."""

    n: int
    first_row: int
    rownos: list[int] | None
    blank_lines: int
    kept: Sequence[int]  # a lane sends ``range(n)`` when every row was kept
    filters: np.ndarray
    digests: np.ndarray
    ids: list[str] | None
    skipped: Counter[str]
    popcounts: np.ndarray | None = None  # 1-bits per filter (uint16), for the fill statistics
    ids_valid: bool = False  # every id is known to be valid UTF-8 (checked in C)
    placed: int | None = None  # filters and digests already written at this output row
    id_hashes: np.ndarray | None = None  # a 64-bit hash of each id (``_IdCheck``)

    def row(self, j: int) -> int:
        return self.first_row + j if self.rownos is None else self.rownos[j]


BatchMap = Callable[[Iterator[_Batch]], Iterator[_BatchResult]]


class _IdCheck:
    """Record ids across batches: non-empty, unique, valid UTF-8, the first problem in row
    order (``Encoder._check_ids``). Batches whose ids a lane hashed (``id_hashes``) and found
    valid are checked together at the end by sorting the hashes, without a set of strings;
    exactly (a set, in row order) only if two hashes are equal or an error comes first."""

    def __init__(self, id_column: str, source: str, ids: list[str]) -> None:
        self.id_column, self.source, self.ids = id_column, source, ids
        self.seen: set[str] = set()  # the ids of every batch before the deferred ones
        self.deferred: list[tuple[_BatchResult, int]] = []  # (batch, its first index in ids)

    def add(self, batch: _BatchResult) -> None:
        """Check a batch's ids (or defer the check) and append them to ``ids``."""
        assert batch.ids is not None
        if batch.id_hashes is not None and batch.ids_valid and all(batch.ids):
            self.deferred.append((batch, len(self.ids)))
            self.ids.extend(batch.ids)
            return
        self.settle()
        self.ids.extend(Encoder._check_ids(batch, self.id_column, self.source, self.seen, self.ids))

    def settle(self) -> None:
        """Check the deferred batches exactly, in row order (raises the first problem)."""
        for batch, start in self.deferred:
            Encoder._check_ids(batch, self.id_column, self.source, self.seen, self.ids[:start])
        self.deferred.clear()

    def finish(self) -> None:
        """At the end: the deferred batches' hashes all distinct, or the exact check."""
        if self.deferred:
            each = [b.id_hashes for b, _ in self.deferred if b.id_hashes is not None]
            hashes = np.sort(np.concatenate(each))
            if bool((hashes[1:] == hashes[:-1]).any()):
                self.settle()


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
        norm_memos: NormaliserMemos = {}  # shared by the fields and blocking keys, not global
        self._codecs = {
            f.name: _FieldCodec(f, schema, self._secret, norm_memos) for f in schema.fields
        }
        part_memos: dict[Any, Any] = {}  # shared by the blocking keys
        self._blockers: list[BlockingKeyer | LshKeyer] = [
            LshKeyer(b, schema, self._secret)
            if b.lsh is not None
            else BlockingKeyer(b, schema, self._secret, part_memos, norm_memos)
            for b in schema.blocking
        ]
        self._all_pairs = None if schema.blocking else all_pairs_digest(self._secret)
        self._perm: np.ndarray | None = None
        if schema.hardening.balance:
            half = schema.filter_bits // 2 if schema.hardening.xor_fold else schema.filter_bits
            self._perm = np.asarray(keyed_permutation(self._secret, 2 * half), dtype=np.int64)
        # Input columns in a fixed order: fields, then salt and blocking columns not among them.
        cols: list[str] = [f.source_column for f in schema.fields]
        for f in schema.fields:
            if f.salt_field is not None and schema.column_of(f.salt_field) not in cols:
                cols.append(schema.column_of(f.salt_field))
        for b in schema.blocking:
            for p in b.parts:
                if schema.column_of(p.field) not in cols:
                    cols.append(schema.column_of(p.field))
        self.columns: tuple[str, ...] = tuple(cols)
        # CPU seconds of ``encode_batch``'s steps so far (``STEPS``), for the node's report
        self.step_cpu: dict[str, float] = dict.fromkeys(STEPS, 0.0)

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

    def _salt_of(self, spec: FieldSpec, row: Mapping[str, str] | None) -> str | None:
        if spec.salt_field is None:
            return None
        return (row or {}).get(self.schema.column_of(spec.salt_field), "")

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

        def batches() -> Iterator[_Batch]:
            it = lists()
            first = 1
            while chunk := list(islice(it, CHUNK_ROWS)):
                columns = {
                    c: _Column.from_values([r[i] for r in chunk]) for i, c in enumerate(cols)
                }
                yield _Batch(len(chunk), first, columns)
                first += len(chunk)

        report = EncodeReport(source="<rows>")
        records = self._encode_stream(batches(), "<rows>", id_column, report, None)
        for reason, count in report.skipped.items():
            log.info("skipped %d row(s): %s", count, reason)
        return records

    def encode_csv(
        self,
        path: str | Path,
        *,
        id_column: str | None = None,
        progress: Callable[[int], None] | None = None,
        map_batches: BatchMap | None = None,
        block_bytes: int | None = None,
    ) -> tuple[EncodedRecords, EncodeReport]:
        """Stream a CSV file with a header row. ``progress(n)`` is called after each batch with
        the number of rows just processed (an increment). ``map_batches`` encodes the batches
        elsewhere (``party.encoding.parallel``: worker processes) and must yield
        ``encode_batch``'s results in input order; the default encodes them here, one by one.
        ``block_bytes`` (default ``CSV_BLOCK_BYTES``) sets the batch size; results do not
        depend on it.

        The file is parsed by pyarrow's streaming CSV reader (RFC 4180 quoting, quoted newlines
        allowed) in blocks of ``CSV_BLOCK_BYTES``, with the needed columns read as bytes and
        dictionary-encoded, so per-row work stays in C. A file that contains an empty line is
        read with the csv module instead (pyarrow drops blank lines without a trace, and they
        count in row numbers). A BOM is skipped. Bytes that are not valid UTF-8 are an error
        naming the row and column (or a skip, per the field's ``onInvalid``). A row with a
        different number of columns than the header is an error naming the row. Rows are
        numbered from 1 after the header, blank lines counted; they are the default record ids.
        """
        p = Path(path)
        source = str(p)
        report = EncodeReport(source=source)
        t0 = time.perf_counter()
        layout = self.csv_layout(p, id_column)
        positions, needed, plain = layout.positions, layout.needed, layout.plain

        def batches() -> Iterator[_Batch]:
            first = 1
            try:
                reader = pcsv.open_csv(p, **layout.arrow_options(block_bytes or CSV_BLOCK_BYTES))
                for rb in reader:
                    if rb.num_rows == 0:
                        continue
                    yield _Batch(rb.num_rows, first, {}, arrow=rb, arrow_names=needed, plain=plain)
                    first += rb.num_rows
            except pa.ArrowException:
                # pyarrow's message may quote the offending row: find the problem ourselves.
                problem = self._locate_csv_problem(p, source, layout.width)
                if problem is not None:
                    raise problem from None
                if first != 1:
                    raise EncodeDataError(
                        f"{source}, after row {first - 1}: malformed CSV (rejected by the CSV "
                        "parser)"
                    ) from None
                # e.g. a header without a final newline: the exact reader accepts the file
                yield from self._csv_module_batches(p, source, layout.width, positions)

        if _may_have_blank_lines(p):
            stream = self._csv_module_batches(p, source, layout.width, positions)
        else:
            stream = batches()
        records = self._encode_stream(
            stream, source, id_column, report, progress, map_batches, estimate_rows(p)
        )
        report.seconds = time.perf_counter() - t0
        return records, report

    def csv_layout(self, p: Path, id_column: str | None) -> CsvLayout:
        """The CSV's header checked against the schema (and ``id_column``): what to read."""
        source = str(p)
        header = self._read_header(p, source)
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
        width = len(header)
        internal = tuple(f"c{i}" for i in range(width))  # header names may repeat or need stripping
        return CsvLayout(
            width=width,
            internal=internal,
            needed={c: internal[header.index(c)] for c in dict.fromkeys(wanted)},
            positions={c: header.index(c) for c in dict.fromkeys(wanted)},
            plain=frozenset({id_column} - set(self.columns) if id_column is not None else ()),
        )

    @staticmethod
    def _csv_module_batches(
        p: Path, source: str, width: int, positions: dict[str, int]
    ) -> Iterator[_Batch]:
        """Batches read with the csv module: the exact path for files with blank lines, which are
        skipped but counted in the row numbers (pyarrow would drop them without a trace)."""
        rowno = 0
        try:
            with open(p, newline="", encoding="utf-8-sig", errors="surrogateescape") as fh:
                reader = csv.reader(fh, strict=True)
                next(reader, None)
                while raw := list(islice(reader, CHUNK_ROWS)):
                    start = rowno + 1
                    if set(map(len, raw)) - {width, 0}:  # 0 columns: a blank line
                        for i, row in enumerate(raw, start):
                            if len(row) not in (width, 0):
                                raise EncodeDataError(
                                    f"{source}, row {i}: has {len(row)} column(s), "
                                    f"the header has {width}"
                                )
                    rowno += len(raw)
                    rows = [r for r in raw if r]
                    nums = [i for i, r in enumerate(raw, start) if r]
                    columns = {
                        c: _Column.from_values([r[i] for r in rows]) for c, i in positions.items()
                    }
                    yield _Batch(len(rows), start, columns, nums, len(raw) - len(rows))
        except csv.Error as exc:
            raise EncodeDataError(f"{source}, row {rowno + 1}: malformed CSV ({exc})") from None
        except OSError as exc:
            raise EncodeDataError(f"{source}: cannot read ({exc.strerror})") from None

    @staticmethod
    def _read_header(p: Path, source: str) -> list[str]:
        try:
            with open(p, newline="", encoding="utf-8-sig", errors="surrogateescape") as fh:
                header = next(csv.reader(fh, strict=True))
        except FileNotFoundError:
            raise EncodeDataError(f"{source}: file not found") from None
        except StopIteration:
            raise EncodeDataError(f"{source}: empty file (no header row)") from None
        except csv.Error as exc:
            raise EncodeDataError(f"{source}, header: malformed CSV ({exc})") from None
        except OSError as exc:
            raise EncodeDataError(f"{source}: cannot read ({exc.strerror})") from None
        return [h.strip() for h in header]

    @staticmethod
    def _locate_csv_problem(p: Path, source: str, width: int) -> EncodeDataError | None:
        """The error for a CSV the fast parser rejected, found by re-reading it with the csv
        module (only on this error path; blank lines are counted, as everywhere), or None if
        the csv module finds nothing wrong."""
        try:
            with open(p, newline="", encoding="utf-8-sig", errors="surrogateescape") as fh:
                next(csv.reader(fh, strict=True), None)
                return locate_csv_problem(fh, source, width, 1)
        except OSError as exc:
            return EncodeDataError(f"{source}: cannot read ({exc.strerror})")

    def encode_results(
        self,
        results: Iterator[_BatchResult],
        source: str,
        id_column: str | None,
        progress: Callable[[int], None] | None = None,
        rows: int = CHUNK_ROWS,
        out: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[EncodedRecords, EncodeReport]:
        """The records and report of ``encode_batch`` results made elsewhere (in input order),
        checked and assembled as ``encode_csv`` does; ``rows``: the rows expected (an estimate:
        the output arrays are allocated once for as many and grow if needed); ``out``: the
        output arrays, a row for every input row (``_encode_stream``)."""
        t0 = time.perf_counter()
        report = EncodeReport(source=source)
        records = self._encode_stream(
            iter(()), source, id_column, report, progress, lambda _: results, rows, out
        )
        report.seconds = time.perf_counter() - t0
        return records, report

    # ----------------------------------------------------------------- core
    def encode_batch(self, batch: _Batch, source: str, id_column: str | None) -> _BatchResult:
        """Encode one batch on its own (no state shared with other batches but memo tables)."""
        if batch.arrow is not None:  # else decoded already (a lane, while reading)
            c0 = time.process_time()
            batch.materialise()
            self.step_cpu["columns"] += time.process_time() - c0
        skipped: Counter[str] = Counter()
        kept, f_batch, d_batch = self._batch_core(batch, source, skipped)
        c1 = time.process_time()
        ids = None if id_column is None else self._raw_ids(batch, kept, id_column)
        for codec in self._codecs.values():
            codec.trim_cache()
        result = _BatchResult(
            batch.n,
            batch.first_row,
            batch.rownos,
            batch.blank_lines,
            kept,
            f_batch,
            d_batch,
            ids,
            skipped,
            bits.popcount_rows(f_batch).astype(np.uint16),  # here: in a lane, if there is one
            id_column is not None and batch.columns[id_column]._valid is True,
        )
        self.step_cpu["ids"] += time.process_time() - c1
        return result

    def _encode_stream(
        self,
        batches: Iterator[_Batch],
        source: str,
        id_column: str | None,
        report: EncodeReport,
        progress: Callable[[int], None] | None,
        map_batches: BatchMap | None = None,
        rows: int = CHUNK_ROWS,
        out: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> EncodedRecords:
        """``out``: the output arrays (filters, digests), with a row for every input row (lanes
        may have written their rows in place: ``_BatchResult.placed``); the records are views
        of their first rows. Else arrays allocated for ``rows`` rows, grown if needed."""
        t0 = time.perf_counter()
        out_words = bits.words_for(self.schema.output_bits)
        nblock = self.schema.digest_width
        if out is None:
            cap = max(1, rows)
            filters = np.zeros((cap, out_words), dtype=np.uint64)
            digests = np.zeros((cap, nblock), dtype=np.uint64)
        else:
            filters, digests = out
            cap = filters.shape[0]
        ids: list[str] = []
        check = _IdCheck(id_column or "", source, ids)
        n = 0
        rows_read = 0
        skipped: Counter[str] = Counter()
        counts: list[np.ndarray] = []  # per-batch popcounts, for the fill statistics
        if map_batches is None:
            results: Iterator[_BatchResult] = (
                self.encode_batch(b, source, id_column) for b in batches
            )
        else:
            results = map_batches(batches)
        try:
            for batch in results:
                kept, f_batch, d_batch = batch.kept, batch.filters, batch.digests
                skipped.update(batch.skipped)
                rows_read += batch.n + batch.blank_lines
                if batch.blank_lines:
                    skipped["blank line"] += batch.blank_lines
                if batch.ids is None and batch.rownos is None and len(kept) == batch.n:
                    ids.extend(map(str, range(batch.first_row, batch.first_row + batch.n)))
                elif batch.ids is None:
                    ids.extend(str(batch.row(j)) for j in kept)
                else:
                    check.add(batch)
                m = len(kept)
                if batch.placed is not None:  # written in place by a lane: moved up past skips
                    if batch.placed != n:
                        filters[n : n + m] = filters[batch.placed : batch.placed + m]
                        digests[n : n + m] = digests[batch.placed : batch.placed + m]
                else:
                    if n + m > cap:
                        assert out is None, "more rows than the output arrays hold"
                        cap = max(2 * cap, n + m)
                        filters.resize((cap, out_words), refcheck=False)
                        digests.resize((cap, nblock), refcheck=False)
                    filters[n : n + m] = f_batch
                    digests[n : n + m] = d_batch
                counts.append(
                    bits.popcount_rows(f_batch) if batch.popcounts is None else batch.popcounts
                )
                n += m
                if progress is not None:
                    progress(batch.n + batch.blank_lines)
        except EncodeDataError:
            check.settle()  # a problem with an earlier record id comes first
            raise
        check.finish()
        if out is None:
            filters.resize((n, out_words), refcheck=False)
            digests.resize((n, nblock), refcheck=False)
        else:
            filters, digests = filters[:n], digests[:n]

        records = EncodedRecords(tuple(ids), filters, self.schema.output_bits, digests)
        del ids
        fill = (np.concatenate(counts) if counts else np.zeros(0)) / self.schema.output_bits
        stats = (
            FillStats(float(fill.mean()), float(fill.std()), float(fill.min()), float(fill.max()))
            if n
            else FillStats(0.0, 0.0, 0.0, 0.0)
        )
        report.rows_read = rows_read
        report.encoded = n
        report.skipped = dict(skipped)
        report.fill_mean, report.fill_std = stats.mean, stats.std
        report.fill_min, report.fill_max = stats.min, stats.max
        report.k_per_field = {f.name: f.k for f in self.schema.fields}
        report.blip_epsilon = self.blip_epsilon
        report.seconds = time.perf_counter() - t0
        return records

    def _batch_core(
        self, batch: _Batch, source: str, skipped: Counter[str]
    ) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Encode one batch: (kept row offsets, filters, block digests); counts skips."""
        c0 = time.process_time()
        codecs = list(self._codecs.values())
        cols = batch.columns
        code_arr = np.empty((batch.n, len(codecs)), dtype=np.int64)
        for fi, codec in enumerate(codecs):
            col = cols[codec.spec.source_column]
            if codec.spec.salt_field is None:
                ucodes = codec.codes_for_keys(col.uniques, checked=col.valid)
                code_arr[:, fi] = ucodes[col.indices]
            else:
                keys, inverse = _combine([col, cols[self.schema.column_of(codec.spec.salt_field)]])
                code_arr[:, fi] = codec.codes_for_keys(keys)[inverse]
        keep = np.ones(batch.n, dtype=bool)
        for j in np.flatnonzero((code_arr < 0).any(axis=1)).tolist():
            reason = self._bad_value(code_arr[j].tolist(), codecs, source, batch.row(j))
            skipped[reason] += 1
            keep[j] = False
        kept = np.flatnonzero(keep)

        raw = np.zeros((kept.size, bits.words_for(self.schema.filter_bits)), dtype=np.uint64)
        good = code_arr[kept]
        gathered = np.empty_like(raw)  # one buffer for every field's gather
        for fi, codec in enumerate(codecs):
            np.take(codec.table, good[:, fi], axis=0, out=gathered)
            raw |= gathered
        out = self.apply_blip(self.harden(raw))
        c1 = time.process_time()
        self.step_cpu["fields"] += c1 - c0

        d = np.zeros((kept.size, self.schema.digest_width), dtype=np.uint64)
        if self._all_pairs is not None:
            d[:, 0] = self._all_pairs
        col0 = 0
        shared: dict[Any, Any] = {}  # parts common to several keys, for this batch only
        for keyer in self._blockers:
            bi = col0
            col0 += keyer.spec.width
            if isinstance(keyer, LshKeyer):
                if set(keyer.fields) == set(self._codecs):
                    sub = raw
                else:
                    sub = np.zeros_like(raw)
                    for fi, codec in enumerate(codecs):
                        if codec.spec.name in keyer.fields:
                            sub |= codec.table[good[:, fi]]
                d[:, bi:col0] = keyer.digests(sub)
                continue
            try:
                parts = [(cols[c].uniques, cols[c].indices) for c in keyer.columns]
                checked = all(cols[c].valid for c in keyer.columns)
                d[:, bi] = keyer.column_digests(parts, checked=checked, shared=shared)[kept]
            except InvalidText:
                keys, inverse = _combine([cols[c] for c in keyer.columns])
                bad = next(i for i, key in enumerate(keys) if not all(map(valid_text, key)))
                name = next(
                    c for c, v in zip(keyer.columns, keys[bad], strict=True) if not valid_text(v)
                )
                row = batch.row(int(np.flatnonzero(inverse == bad)[0]))
                raise EncodeDataError(
                    f"{source}, row {row}, field {name!r}: not valid UTF-8"
                ) from None
        self.step_cpu["blocking"] += time.process_time() - c1
        return kept.tolist(), out, d

    @staticmethod
    def _raw_ids(batch: _Batch, kept: list[int], id_column: str) -> list[str]:
        """Record ids (stripped) of the kept rows, unchecked."""
        col = batch.columns[id_column]
        u = [s.strip() for s in col.uniques]
        idx = col.indices
        return (
            [u[i] for i in idx[kept].tolist()]
            if len(kept) < batch.n
            else [u[i] for i in idx.tolist()]
        )

    @staticmethod
    def _check_ids(
        batch: _BatchResult, id_column: str, source: str, seen_ids: set[str], earlier: list[str]
    ) -> list[str]:
        """Checks the kept rows' record ids are non-empty, unique and valid UTF-8; ``seen_ids``
        holds the ``earlier`` batches' ids and gains this batch's."""
        ids = batch.ids
        assert ids is not None
        kept = batch.kept
        before = len(seen_ids)
        seen_ids.update(ids)
        if (
            len(seen_ids) == before + len(ids)
            and all(ids)
            and (batch.ids_valid or valid_text("".join(ids)))
        ):
            return ids  # the common case, checked without a Python loop
        seen_ids.clear()  # an error follows: find the first bad id in row order
        seen_ids.update(earlier)
        for rid, j in zip(ids, kept, strict=True):
            if not rid or rid in seen_ids or not valid_text(rid):
                problem = (
                    "empty record id"
                    if not rid
                    else "duplicate record id"
                    if rid in seen_ids
                    else "not valid UTF-8"
                )
                raise EncodeDataError(
                    f"{source}, row {batch.row(j)}, field {id_column!r}: {problem}"
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
