"""The insider segment attack: a co-party holding the hashing key decodes the segment it receives.

Threat. In the Vatsalan-Christen protocol party j receives segment j of every record in a common block.
Every party holds the linkage secret, so party j can compute the *atom filter* of any q-gram (the bit
positions the q-gram sets, per field) and the deterministic hardening. Published dictionary attacks on
Bloom filters with a known key (e.g. Niedermeyer et al., "Cryptanalysis of basic Bloom filters used for
privacy preserving record linkage", J. Privacy and Confidentiality 6(2), 2014; Christen et al.,
"Efficient cryptanalysis of Bloom filters for PPRL", PAKDD 2017) recover most names from filters; a
segment is a filter restricted to a bit range, which the attack below handles directly.

Attack (simulated with the party's own data as the worst-case dictionary):

1. Per segment, the revealed bits are turned into knowledge about unhardened input bits through the
   hardening map (hardening_map.py): for every input position observable in the segment, the bit is
   known set, known unset, or unknown (several outputs disagree, e.g. under BLIP noise).
2. A q-gram is *possibly present* in a record's field if none of its atom positions is known unset.
3. A dictionary entry (a value's q-gram set; values with identical q-gram sets are one entry) is
   *consistent* with the segment if all its q-grams are possibly present.
4. Outcomes per record and field (records with a missing value for the field are not counted):
   one-to-one = exactly one consistent entry and it is the record's true entry; one-to-many = the true
   entry is consistent among 2..max_candidates consistent entries; top-1 = the true entry is consistent
   and strictly ranks first among the consistent entries by the number of its (observable) positions known
   set (one-to-one included).
5. Whole record: the dictionary is the party's distinct records (combinations of the schema fields'
   entries); a record entry is consistent if every field's entry is (a missing field constrains nothing).
   One-to-one / one-to-many / top-1 (by summed field scores) as above.

The dictionary holds every distinct value of the party's data (plus optional external lists per field);
the attacked records may be a random sample (``max_targets``), reported as such. Nothing here logs or
returns values: only counts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from party.audit.hardening_map import HardeningMap
from party.audit.stats import Rate
from party.encoding.bits import (
    check_rows,
    empty_rows,
    pack_rows,
    rows_from_positions,
    segment_bounds,
    unpack_rows,
    words_for,
)
from party.errors import PprlError

log = logging.getLogger(__name__)

DEFAULT_MAX_TARGETS = 5000
DEFAULT_MAX_CANDIDATES = 10
# Records with more consistent candidates than this are not ranked for top-1 (counted as not
# re-identified and reported as "unranked").
DEFAULT_RANK_CAP = 2000
# Bytes of temporary boolean matrices per chunk of attacked records.
_CHUNK_BYTES = 64 * 2**20
# Largest dense q-gram x entry matrix, and how many more multiply-adds a BLAS product may do than
# the list-based count touches items, for the same time (measured roughly on the 2-core machine).
_DENSE_BYTES = 64 * 2**20
_BLAS_ADVANTAGE = 1000.0


class AtomSource(Protocol):
    """What the attacker can compute with the key: the encoder's q-grams and atom filters."""

    def field_qgrams(
        self, field: str, value: str, row: Mapping[str, str] | None = None
    ) -> list[str]: ...

    def qgram_positions(self, field: str, qgram: str) -> np.ndarray: ...


@dataclass(frozen=True)
class FieldDictionary:
    """A field's dictionary of q-gram sets, and each data row's true entry (-1: missing)."""

    field: str
    qgram_positions: tuple[np.ndarray, ...]  # input-space atom positions of each vocabulary q-gram
    entry_ptr: np.ndarray  # (V+1,) int64 CSR offsets into entry_qgrams
    entry_qgrams: np.ndarray  # q-gram indices of each entry
    record_entry: np.ndarray  # (n_rows,) int64 entry of each data row, -1 when missing
    post_ptr: np.ndarray  # (Q+1,) int64 CSR offsets: q-gram -> entries containing it
    post_entries: np.ndarray

    @property
    def entries(self) -> int:
        return int(self.entry_ptr.size - 1)

    @property
    def entry_len(self) -> np.ndarray:
        return np.diff(self.entry_ptr)


def _csr_transpose(ptr: np.ndarray, idx: np.ndarray, ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the transpose: for each column, the rows containing it (rows ascending)."""
    rows = np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))
    order = np.argsort(idx, kind="stable")
    counts = np.bincount(idx, minlength=ncols)
    tptr = np.zeros(ncols + 1, dtype=np.int64)
    np.cumsum(counts, out=tptr[1:])
    return tptr, rows[order]


def _expand(
    rows: np.ndarray, keys: np.ndarray, ptr: np.ndarray, idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each (row, key) pair, one (row, item) pair per item in key's CSR list."""
    lens = ptr[keys + 1] - ptr[keys]
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rep_rows = np.repeat(rows, lens)
    starts = np.repeat(ptr[keys] - (np.cumsum(lens) - lens), lens)
    return rep_rows, idx[starts + np.arange(total, dtype=np.int64)]


def build_dictionary(
    atoms: AtomSource,
    field: str,
    rows: Sequence[Mapping[str, str]],
    *,
    salt_field: str | None = None,
    external_values: Sequence[str] = (),
) -> FieldDictionary:
    """Dictionary of a field from the party's rows (each row's true entry) plus external values."""
    entry_of: dict[tuple[str, ...], int] = {}
    qgram_of: dict[str, int] = {}
    entries: list[tuple[int, ...]] = []
    cache: dict[Any, int] = {}

    def entry_for(value: str, row: Mapping[str, str] | None) -> int:
        try:
            grams = atoms.field_qgrams(field, value, row)
        except PprlError:
            return -1  # an invalid value is treated as missing: it is not encoded either
        if not grams:
            return -1
        key = tuple(sorted(set(grams)))
        e = entry_of.get(key)
        if e is None:
            e = len(entries)
            entry_of[key] = e
            entries.append(tuple(qgram_of.setdefault(g, len(qgram_of)) for g in key))
        return e

    record_entry = np.empty(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):
        value = row.get(field, "")
        ck: Any = (value, row.get(salt_field, "")) if salt_field else value
        e = cache.get(ck)
        if e is None:
            e = entry_for(value, row)
            cache[ck] = e
        record_entry[i] = e
    if not salt_field:
        for value in external_values:
            if value not in cache:
                cache[value] = entry_for(value, None)
    vocab = sorted(qgram_of.items(), key=lambda kv: kv[1])
    positions = tuple(
        np.unique(np.asarray(atoms.qgram_positions(field, g), dtype=np.int64)) for g, _ in vocab
    )
    lengths = np.fromiter((len(e) for e in entries), dtype=np.int64, count=len(entries))
    ptr = np.zeros(len(entries) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    flat = np.fromiter((q for e in entries for q in e), dtype=np.int64, count=int(ptr[-1]))
    post_ptr, post_entries = _csr_transpose(ptr, flat, len(vocab))
    return FieldDictionary(field, positions, ptr, flat, record_entry, post_ptr, post_entries)


@dataclass(frozen=True)
class AttackOutcome:
    """Re-identification rates of one attack (one field or the whole record, one segment)."""

    one_to_one: Rate
    one_to_many: Rate
    top1: Rate
    mean_consistent: float  # mean number of consistent dictionary entries per attacked record
    unranked: int = 0  # records with more than rank_cap candidates: not ranked (not re-identified)

    def to_dict(self) -> dict[str, Any]:
        return {
            "one_to_one": self.one_to_one.to_dict(),
            "one_to_many": self.one_to_many.to_dict(),
            "top1": self.top1.to_dict(),
            "mean_consistent": self.mean_consistent,
            "unranked": self.unranked,
        }


@dataclass(frozen=True)
class SegmentAttack:
    """The attack by the receiver of one segment (``segment`` = -1 for the full-filter reference)."""

    segment: int
    start: int
    stop: int
    observable_bits: int  # input positions read exactly from this segment
    fields: dict[str, AttackOutcome]
    record: AttackOutcome

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "bits": [self.start, self.stop],
            "observable_input_bits": self.observable_bits,
            "fields": {k: v.to_dict() for k, v in self.fields.items()},
            "record": self.record.to_dict(),
        }

    def max_one_to_one(self) -> float:
        return max((o.one_to_one.value for o in self.fields.values()), default=0.0)


@dataclass(frozen=True)
class InsiderResult:
    """The insider attack on every segment (and, for reference, on the full filter)."""

    parties: int
    records: int
    targets: int
    sampled: bool
    dictionary_entries: dict[str, int]
    segments: tuple[SegmentAttack, ...]
    full: SegmentAttack | None
    max_candidates: int
    exact_hardening: bool  # False when the hardening map is not affine (no bit read exactly)

    def to_dict(self) -> dict[str, Any]:
        return {
            "parties": self.parties,
            "records": self.records,
            "targets": self.targets,
            "sampled": self.sampled,
            "max_candidates": self.max_candidates,
            "dictionary_entries": self.dictionary_entries,
            "exact_hardening": self.exact_hardening,
            "segments": [s.to_dict() for s in self.segments],
            "full_filter": self.full.to_dict() if self.full else None,
        }


def _knowledge(
    out_bits: np.ndarray, hmap: HardeningMap, start: int, stop: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observable input positions and per-record known-set / known-unset bits for output range."""
    src = hmap.source[start:stop]
    inv = hmap.inverted[start:stop]
    keep = np.flatnonzero(src >= 0)
    obs, col = np.unique(src[keep], return_inverse=True)
    n = out_bits.shape[0]
    m = obs.size
    vals = out_bits[:, keep].astype(bool) ^ inv[keep][None, :]
    ones = np.zeros((n, m), dtype=np.uint8)
    zeros = np.zeros((n, m), dtype=np.uint8)
    col = col.reshape(-1)
    for c_idx in range(keep.size):  # usually one output per input; loop over columns is cheap
        j = col[c_idx]
        ones[:, j] += vals[:, c_idx]
        zeros[:, j] += ~vals[:, c_idx]
    known1 = (ones > 0) & (zeros == 0)
    known0 = (zeros > 0) & (ones == 0)
    return obs.astype(np.int64), known1, known0


@dataclass
class _FieldView:
    """A field's dictionary restricted to the observable positions of one segment."""

    qgram_atoms: np.ndarray  # (Q, m) float32
    observable: np.ndarray  # (Q,) bool: the q-gram has a position readable in this segment
    post_len: np.ndarray  # (Q,) float32: entries per q-gram
    obs_len: np.ndarray  # (V,) int64: observable q-grams per entry
    value_atoms: np.ndarray  # (V, words) uint64 packed union of the entry's q-gram atoms
    incidence: np.ndarray | None  # (Q, V) float32 q-gram-in-entry matrix when small enough
    tolerance: np.ndarray  # (Q,) float32: known-unset atom positions tolerated (BLIP noise)


def binomial_tolerance(trials: np.ndarray, flip: float | None, level: float) -> np.ndarray:
    """Per count m, the smallest t with P(Binomial(m, flip) <= t) >= level (0 without noise).

    Used against BLIP: a present q-gram's set positions are each flipped to 0 with probability
    ``flip``, so a noise-aware attacker tolerates up to t unset positions.
    """
    out = np.zeros(trials.shape, dtype=np.float32)
    if not flip:
        return out
    for m in np.unique(trials).tolist():
        m = int(m)
        cdf, t = 0.0, 0
        while t <= m:
            cdf += math.comb(m, t) * flip**t * (1 - flip) ** (m - t)
            if cdf >= level:
                break
            t += 1
        out[trials == m] = t
    return out


def _field_view(
    d: FieldDictionary,
    obs: np.ndarray,
    input_bits: int,
    flip: float | None = None,
    level: float = 0.99,
) -> _FieldView:
    col_of = np.full(input_bits, -1, dtype=np.int64)
    col_of[obs] = np.arange(obs.size)
    q = len(d.qgram_positions)
    m = obs.size
    qa = np.zeros((q, m), dtype=np.float32)
    for i, pos in enumerate(d.qgram_positions):
        cols = col_of[pos[pos < input_bits]]
        qa[i, cols[cols >= 0]] = 1.0
    observable: np.ndarray = np.asarray(qa.any(axis=1), dtype=bool)
    post_len = np.diff(d.post_ptr).astype(np.float32)
    obs_len = (
        np.add.reduceat(observable[d.entry_qgrams].astype(np.int64), d.entry_ptr[:-1])
        if d.entries
        else np.zeros(0, dtype=np.int64)
    )
    words = max(1, (m + 63) // 64)
    va = np.zeros((d.entries, words), dtype=np.uint64)
    if m and d.entries:
        qpacked = pack_rows(qa.astype(np.uint8))
        lens = d.entry_len
        for r in range(int(lens.max())):  # OR the r-th q-gram of every entry that has one
            has = np.flatnonzero(lens > r)
            va[has] |= qpacked[d.entry_qgrams[d.entry_ptr[has] + r]]
    incidence = None
    if 0 < q * d.entries * 4 <= _DENSE_BYTES:
        incidence = np.zeros((q, d.entries), dtype=np.float32)
        entry_of = np.repeat(np.arange(d.entries), d.entry_len)
        incidence[d.entry_qgrams, entry_of] = 1.0
    tolerance = binomial_tolerance(qa.sum(axis=1).astype(np.int64), flip, level)
    return _FieldView(qa, observable, post_len, obs_len, va, incidence, tolerance)


def _consistent(
    d: FieldDictionary, v: _FieldView, k0: np.ndarray, route: str | None = None
) -> np.ndarray:
    """(c, V) bool: entries whose q-grams are all possibly present, exactly.

    Counts, per record, either the impossible q-grams of each entry (consistent iff 0) or the
    possible observable ones (consistent iff all the entry's observable q-grams), through the q-gram ->
    entries lists, whichever touches fewer list items; or, when the dictionary's q-gram vocabulary is
    small (dates, codes), with one dense matrix product.
    """
    c = k0.shape[0]
    vn = d.entries
    impossible = (k0 @ v.qgram_atoms.T) > v.tolerance[None, :]  # (c, Q)
    possible = ~impossible & v.observable[None, :]
    cost_imp = float((impossible.astype(np.float32) @ v.post_len).sum())
    cost_pos = float((possible.astype(np.float32) @ v.post_len).sum())
    use_imp = cost_imp <= cost_pos if route is None else route == "impossible"
    dense_cost = c * impossible.shape[1] * vn / _BLAS_ADVANTAGE
    dense = dense_cost < min(cost_imp, cost_pos) if route is None else route == "dense"
    if v.incidence is not None and dense:
        return (impossible.astype(np.float32) @ v.incidence) == 0
    r, q = np.nonzero(impossible if use_imp else possible)
    rr, ee = _expand(r.astype(np.int64), q.astype(np.int64), d.post_ptr, d.post_entries)
    counts = np.bincount(rr * vn + ee, minlength=c * vn).reshape(c, vn)
    if use_imp:
        return counts == 0
    return counts == v.obs_len[None, :]


def _pair_scores(k1p: np.ndarray, va: np.ndarray, r: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Number of the entry's observable positions known set, per (record, entry) pair."""
    if r.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.bitwise_count(k1p[r] & va[e]).sum(axis=1, dtype=np.int64)


class _Acc:
    def __init__(self) -> None:
        self.valid = self.o2o = self.o2m = self.top = self.unranked = 0
        self.cons = 0.0

    def add(
        self,
        truth_ok: np.ndarray,
        ncons: np.ndarray,
        top: np.ndarray,
        max_candidates: int,
        unranked: int = 0,
    ) -> None:
        self.valid += int(ncons.size)
        self.o2o += int(np.count_nonzero(truth_ok & (ncons == 1)))
        self.o2m += int(np.count_nonzero(truth_ok & (ncons >= 2) & (ncons <= max_candidates)))
        self.top += int(np.count_nonzero(top))
        self.cons += float(ncons.sum())
        self.unranked += unranked

    def outcome(self) -> AttackOutcome:
        return AttackOutcome(
            Rate(self.o2o, self.valid),
            Rate(self.o2m, self.valid),
            Rate(self.top, self.valid),
            self.cons / self.valid if self.valid else 0.0,
            self.unranked,
        )


def _top1(r: np.ndarray, scores: np.ndarray, is_true: np.ndarray, c: int) -> np.ndarray:
    """(c,) bool: the true candidate's score is strictly the best of the record's candidates."""
    best = np.full(c, -1, dtype=np.int64)
    np.maximum.at(best, r, scores)
    at_best = scores == best[r]
    n_best = np.bincount(r[at_best], minlength=c)
    true_best = np.zeros(c, dtype=bool)
    true_best[r[is_true & at_best]] = True
    return true_best & (n_best == 1)


@dataclass
class _Combos:
    """The whole-record dictionary: distinct combinations of field entries."""

    table: np.ndarray  # (D, F) int64 entry per field, -1 missing
    of_record: np.ndarray  # (n,) int64 combination of each data row, -1: no value at all
    post: list[tuple[np.ndarray, np.ndarray]]  # per field: entry -> combos CSR
    missing: list[np.ndarray]  # per field: combos without a value for it


def _build_combos(dicts: Sequence[FieldDictionary], n: int) -> _Combos:
    if not dicts or n == 0:
        return _Combos(np.zeros((0, len(dicts)), np.int64), np.full(n, -1, np.int64), [], [])
    entry_matrix = np.stack([d.record_entry for d in dicts], axis=1)
    table, of_record = np.unique(entry_matrix, axis=0, return_inverse=True)
    of_record = of_record.reshape(-1).astype(np.int64)
    of_record[(entry_matrix < 0).all(axis=1)] = -1
    post = []
    missing = []
    for f, d in enumerate(dicts):
        col = table[:, f]
        has = np.flatnonzero(col >= 0)
        order = has[np.argsort(col[has], kind="stable")]
        counts = np.bincount(col[has], minlength=d.entries)
        ptr = np.zeros(d.entries + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        post.append((ptr, order.astype(np.int64)))
        missing.append(np.flatnonzero(col < 0).astype(np.int64))
    return _Combos(table, of_record, post, missing)


def _attack_range(
    out_bits: np.ndarray,
    hmap: HardeningMap,
    start: int,
    stop: int,
    segment: int,
    dicts: Sequence[FieldDictionary],
    targets: np.ndarray,
    combos: _Combos,
    max_candidates: int,
    rank_cap: int,
    flip: float | None = None,
    level: float = 0.99,
) -> SegmentAttack:
    obs, known1, known0 = _knowledge(out_bits, hmap, start, stop)
    views = [_field_view(d, obs, hmap.input_bits, flip, level) for d in dicts]
    widest = max([d.entries for d in dicts] + [1])
    chunk = int(max(8, min(1024, _CHUNK_BYTES // (10 * widest))))
    field_acc = [_Acc() for _ in dicts]
    rec_acc = _Acc()
    k1_all = (
        pack_rows(known1.astype(np.uint8)) if obs.size else np.zeros((targets.size, 1), np.uint64)
    )
    for lo in range(0, targets.size, chunk):
        idx = targets[lo : lo + chunk]
        c = idx.size
        k0 = known0[lo : lo + chunk].astype(np.float32)
        k1p = k1_all[lo : lo + chunk]
        cons: list[np.ndarray] = []
        for d, v, acc in zip(dicts, views, field_acc, strict=True):
            cf = _consistent(d, v, k0) if d.entries else np.zeros((c, 0), dtype=bool)
            cons.append(cf)
            truth = d.record_entry[idx]
            valid = np.flatnonzero(truth >= 0)
            if valid.size == 0:
                continue
            t = truth[valid]
            cv = cf[valid]
            ncons = cv.sum(axis=1)
            truth_ok = cv[np.arange(valid.size), t]
            top = truth_ok & (ncons == 1)
            rank = np.flatnonzero(truth_ok & (ncons >= 2) & (ncons <= rank_cap))
            if rank.size:
                r, e = np.nonzero(cv[rank])
                sc = _pair_scores(k1p, v.value_atoms, valid[rank][r], e)
                top[rank] = _top1(r, sc, e == t[rank][r], rank.size)
            unranked = int(np.count_nonzero(truth_ok & (ncons > rank_cap)))
            acc.add(truth_ok, ncons, top, max_candidates, unranked)
        if dicts:
            _record_chunk(rec_acc, idx, cons, dicts, views, combos, k1p, max_candidates, rank_cap)
    return SegmentAttack(
        segment=segment,
        start=start,
        stop=stop,
        observable_bits=int(obs.size),
        fields={d.field: a.outcome() for d, a in zip(dicts, field_acc, strict=True)},
        record=rec_acc.outcome(),
    )


def _record_chunk(
    acc: _Acc,
    idx: np.ndarray,
    cons: Sequence[np.ndarray],
    dicts: Sequence[FieldDictionary],
    views: Sequence[_FieldView],
    combos: _Combos,
    k1p: np.ndarray,
    max_candidates: int,
    rank_cap: int,
) -> None:
    """Whole-record outcomes for one chunk of attacked records (see the module docstring)."""
    truth = combos.of_record[idx]
    valid = np.flatnonzero(truth >= 0)
    if valid.size == 0:
        return
    nf = len(dicts)
    # candidate combinations reachable through each field: its consistent entries' combos + missing
    cand = np.stack(
        [
            cons[f][valid].astype(np.float32) @ np.diff(combos.post[f][0]).astype(np.float32)
            + combos.missing[f].size
            for f in range(nf)
        ],
        axis=1,
    )
    pick = cand.argmin(axis=1)
    resolved = cand.min(axis=1) <= rank_cap
    rs: list[np.ndarray] = []
    ds: list[np.ndarray] = []
    for f in range(nf):
        rows = np.flatnonzero(resolved & (pick == f))
        if rows.size == 0:
            continue
        r, e = np.nonzero(cons[f][valid[rows]])
        rr, dd = _expand(rows[r].astype(np.int64), e.astype(np.int64), *combos.post[f])
        miss = combos.missing[f]
        rs += [rr, np.repeat(rows, miss.size)]
        ds += [dd, np.tile(miss, rows.size)]
    ncons = np.zeros(valid.size, dtype=np.int64)
    truth_ok = np.zeros(valid.size, dtype=bool)
    top = np.zeros(valid.size, dtype=bool)
    if rs:
        r = np.concatenate(rs)
        d = np.concatenate(ds)
        ok = np.ones(r.size, dtype=bool)
        rec = valid[r]  # row within the chunk
        for g in range(nf):
            ent = combos.table[d, g]
            has = ent >= 0
            ok[has] &= cons[g][rec[has], ent[has]]
        r, d, rec = r[ok], d[ok], rec[ok]
        ncons = np.bincount(r, minlength=valid.size)
        is_true = d == truth[valid][r]
        truth_ok[r[is_true]] = True
        top = truth_ok & (ncons == 1)
        rank_rows = truth_ok & (ncons >= 2) & (ncons <= rank_cap)
        sel = rank_rows[r]
        if sel.any():
            score = np.zeros(int(sel.sum()), dtype=np.int64)
            for g in range(nf):
                ent = combos.table[d[sel], g]
                has = ent >= 0
                score[has] += _pair_scores(k1p, views[g].value_atoms, rec[sel][has], ent[has])
            top |= _top1(r[sel], score, is_true[sel], valid.size) & rank_rows
    # unresolved records: more than rank_cap candidates through their most selective field; counted
    # as consistent with many candidates (not re-identified).
    unresolved = ~resolved
    ncons[unresolved] = rank_cap + 1
    acc.add(truth_ok, ncons, top, max_candidates, int(np.count_nonzero(unresolved)))


def sample_targets(n: int, max_targets: int, seed: int = 0) -> np.ndarray:
    """The seeded uniform sample of attacked rows insider_attack uses (sorted indices)."""
    if n <= max_targets:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=max_targets, replace=False))


def prepare_combos(dicts: Sequence[FieldDictionary]) -> Any:
    """The whole-record dictionary of these field dictionaries (reusable across attacks)."""
    n = int(dicts[0].record_entry.size) if dicts else 0
    return _build_combos(dicts, n)


def entry_filters(d: FieldDictionary, input_bits: int) -> np.ndarray:
    """Packed unhardened filter of each dictionary entry (union of its q-gram atoms)."""
    qrows = rows_from_positions([p[p < input_bits] for p in d.qgram_positions], input_bits)
    out = np.zeros((d.entries, words_for(input_bits)), dtype=np.uint64)
    lens = d.entry_len
    for r in range(int(lens.max()) if lens.size else 0):
        has = np.flatnonzero(lens > r)
        out[has] |= qrows[d.entry_qgrams[d.entry_ptr[has] + r]]
    return out


def unhardened_from_dictionaries(dicts: Sequence[FieldDictionary], input_bits: int) -> np.ndarray:
    """Every row's unhardened CLK filter: OR over fields of its entry's filter (missing: nothing)."""
    n = int(dicts[0].record_entry.size) if dicts else 0
    out = empty_rows(n, input_bits)
    for d in dicts:
        table = entry_filters(d, input_bits)
        has = d.record_entry >= 0
        out[has] |= table[d.record_entry[has]]
    return out


def insider_attack(
    rows: Sequence[Mapping[str, str]],
    filters: np.ndarray,
    atoms: AtomSource,
    fields: Sequence[str],
    hmap: HardeningMap,
    parties: int,
    *,
    salt_fields: Mapping[str, str | None] | None = None,
    external: Mapping[str, Sequence[str]] | None = None,
    max_targets: int | None = DEFAULT_MAX_TARGETS,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    rank_cap: int = DEFAULT_RANK_CAP,
    include_full: bool = True,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    dictionaries: Sequence[FieldDictionary] | None = None,
    only_segments: Sequence[int] | None = None,
    targets: np.ndarray | None = None,
    combos: Any = None,
    flip_probability: float | None = None,
    tolerance_level: float = 0.99,
) -> InsiderResult:
    """Simulate the insider attack on every segment of ``filters`` (the revealed, hardened filters).

    ``rows[i]`` is the plaintext of ``filters[i]``; ``hmap`` maps revealed bits to unhardened bits.
    Attacked records: all, or a uniform random sample of ``max_targets`` (seeded). ``dictionaries``
    (from build_dictionary over the same rows, one per field in order) skips rebuilding them;
    ``only_segments`` restricts the attack to those segment indices; ``targets`` gives the attacked
    row indices explicitly (only their filters are read); ``combos`` (from prepare_combos over the same
    dictionaries) skips rebuilding the whole-record dictionary. ``flip_probability`` (the schema's BLIP
    f, known to every party) makes the attack noise-aware: a q-gram stays possible while at most the
    ``tolerance_level`` binomial quantile of its observable positions are unset.
    """
    n = len(rows)
    check_rows(filters, hmap.output_bits)
    if filters.shape[0] != n:
        raise PprlError(f"insider attack: {n} plaintext rows but {filters.shape[0]} filters")
    if max_candidates < 2:
        raise PprlError("insider attack: max_candidates must be at least 2")
    bounds = segment_bounds(hmap.output_bits, parties)
    salts = salt_fields or {}
    ext = external or {}
    if dictionaries is not None:
        dicts = list(dictionaries)
        if [d.field for d in dicts] != list(fields) or any(d.record_entry.size != n for d in dicts):
            raise PprlError("insider attack: the given dictionaries do not match fields and rows")
    else:
        dicts = []
        for name in fields:
            if progress:
                progress(f"dictionary {name}")
            dicts.append(
                build_dictionary(
                    atoms, name, rows, salt_field=salts.get(name), external_values=ext.get(name, ())
                )
            )
    if combos is None:
        combos = _build_combos(dicts, n)
    if targets is not None:
        targets = np.asarray(targets, dtype=np.int64)
        if targets.size and (targets.min() < 0 or targets.max() >= n):
            raise PprlError("insider attack: target index out of range")
    elif max_targets is not None and n > max_targets:
        targets = sample_targets(n, max_targets, seed)
    else:
        targets = np.arange(n)
    out_bits = unpack_rows(filters[targets], hmap.output_bits)
    seg_results = []
    for j, (a, b) in enumerate(bounds):
        if only_segments is not None and j not in only_segments:
            continue
        if progress:
            progress(f"segment {j}")
        seg_results.append(
            _attack_range(
                out_bits[:, a:b],
                hmap,
                a,
                b,
                j,
                dicts,
                targets,
                combos,
                max_candidates,
                rank_cap,
                flip_probability,
                tolerance_level,
            )
        )
    full = None
    if include_full:
        if progress:
            progress("full filter")
        full = _attack_range(
            out_bits,
            hmap,
            0,
            hmap.output_bits,
            -1,
            dicts,
            targets,
            combos,
            max_candidates,
            rank_cap,
            flip_probability,
            tolerance_level,
        )
    return InsiderResult(
        parties=parties,
        records=n,
        targets=int(targets.size),
        sampled=int(targets.size) < n,
        dictionary_entries={d.field: d.entries for d in dicts},
        segments=tuple(seg_results),
        full=full,
        max_candidates=max_candidates,
        exact_hardening=hmap.affine,
    )
