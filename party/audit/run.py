"""Running the whole self-audit on a party's own data with the agreed parameters.

Inputs: the party's plaintext rows (optional: without them only the plaintext-free measures run), the
EncodedRecords it would reveal (filters after its hardening, blocking digests), the Encoder (the
attacker's view: q-grams, atom filters, deterministic hardening), the number of parties and the
protocol mode (party.audit.modes: in mpc3 no segment leaves the party, so only the blocking and
plaintext measures run and the report says why the others did not). Outputs an AuditReport.
Suggestions ("what would pass") come from re-running the insider attack on a small sample with more
parties or with simulated hardening of the same unhardened filters (the unhardened filters are
rebuilt from the encoder's per-value atom filters, so no secret is needed here).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.audit.frequency import frequency_risk_rows
from party.audit.hardening_map import HardeningMap, identity_map, probe_hardening
from party.audit.insider import (
    DEFAULT_MAX_CANDIDATES,
    FieldDictionary,
    InsiderResult,
    build_dictionary,
    insider_attack,
    prepare_combos,
    sample_targets,
    unhardened_from_dictionaries,
)
from party.audit.modes import DEFAULT_MODE, MPC3, check_mode, not_run, revealed_statement
from party.audit.report import AuditReport, CvplRow
from party.audit.revealed import blocking_reveal, segment_reveal
from party.audit.sensitivity import bit_sensitivity, per_segment
from party.audit.uniqueness import DEFAULT_K, factorize, uniqueness
from party.encoding import bits
from party.errors import PprlError

log = logging.getLogger(__name__)

DEFAULT_TAUS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0)
SUGGESTION_TARGETS = 300
SUGGESTION_PARTY_TRIES = 3


@dataclass(frozen=True)
class AuditOptions:
    """Knobs of one audit run (the policy sets some of them)."""

    k: int = DEFAULT_K
    insider_max_targets: int | None = 2000
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    include_full_filter: bool = False
    external: Mapping[str, Sequence[str]] = field(default_factory=dict)
    cvpl: bool = True
    cvpl_taus: tuple[float, ...] = DEFAULT_TAUS
    cvpl_corruption: float = 0.2  # share of the attacker's register records perturbed (corruptor)
    cvpl_max_sources: int = 2000
    cvpl_settings: bool = False  # also assess simulated hardening settings (BLIP, XOR-fold)
    suggestions: bool = True
    seed: int = 0


def _fields(schema: Any) -> list[str]:
    return [f.name for f in schema.fields]


def _salts(schema: Any) -> dict[str, str | None]:
    return {f.name: getattr(f, "salt_field", None) for f in schema.fields}


def _hardening_label(schema: Any) -> str:
    hd = schema.hardening
    parts = []
    if hd.xor_fold:
        parts.append("xor-fold")
    if hd.balance:
        parts.append("balance")
    if hd.blip_flip_probability is not None:
        parts.append(f"blip f={hd.blip_flip_probability}")
    return ", ".join(parts) or "none"


def unhardened_filters(
    encoder: Any, fields: Sequence[str], rows: Sequence[Mapping[str, str]], nbits: int
) -> np.ndarray:
    """The rows' CLK filters before hardening, rebuilt from the encoder's q-gram atom filters."""
    salts = _salts(encoder.schema) if hasattr(encoder, "schema") else {}
    dicts = [build_dictionary(encoder, f, rows, salt_field=salts.get(f)) for f in fields]
    return unhardened_from_dictionaries(dicts, nbits)


def _fold(rows: np.ndarray, nbits: int) -> np.ndarray:
    half = nbits // 2
    return bits.slice_bits(rows, 0, half) ^ bits.slice_bits(rows, half, nbits)


def _blip(rows: np.ndarray, nbits: int, f: float, rng: np.random.Generator) -> np.ndarray:
    flips = rng.random((rows.shape[0], nbits), dtype=np.float32) < f
    return rows ^ bits.pack_rows(flips.astype(np.uint8))


def _worst_insider(res: InsiderResult, receiving: Sequence[int]) -> float:
    vals = [
        o.one_to_one.value
        for s in res.segments
        if s.segment in receiving
        for o in [*s.fields.values(), s.record]
    ]
    return max(vals, default=0.0)


def run_audit(
    records: Any,
    encoder: Any,
    schema: Any,
    parties: int,
    *,
    rows: Sequence[Mapping[str, str]] | None = None,
    self_index: int | None = None,
    options: AuditOptions | None = None,
    insider_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
    mode: str = DEFAULT_MODE,
) -> AuditReport:
    """Every audit measure of ``mode`` on ``records`` (EncodedRecords) with ``parties`` parties.

    ``rows[i]`` must be the plaintext of ``records`` row i (see gate.aligned_rows). In segments mode
    segment j goes to party j; with ``self_index`` the party's own segment is left out of the
    worst-case figures. In mpc3 mode no segment is sent: only the blocking digests and the plaintext
    uniqueness are measured, and ``meta.not_run`` says why the segment measures were not.
    ``insider_limit`` (the policy's) guides the suggestions.
    """
    mode = check_mode(mode)
    opts = options or AuditOptions()
    say = progress or (lambda _msg: None)
    seconds: dict[str, float] = {}
    notes: list[str] = []
    filters = records.filters
    out_bits = int(records.filter_bits)
    n = filters.shape[0]
    if rows is not None and len(rows) != n:
        raise PprlError(f"audit: {len(rows)} plaintext rows for {n} encoded records")
    receiving = [] if mode == MPC3 else [j for j in range(parties) if j != self_index]
    fields = _fields(schema)
    meta: dict[str, Any] = {
        "mode": mode,
        "revealed": revealed_statement(mode, parties, self_index),
        "not_run": not_run(mode),
        "records": n,
        "parties": parties,
        "self_index": self_index,
        "receiving_segments": receiving,
        "filter_bits": int(schema.filter_bits),
        "output_bits": out_bits,
        "hardening": _hardening_label(schema),
        "schema_digest": schema.digest() if hasattr(schema, "digest") else None,
        "fields": fields,
        "blocking_keys": [getattr(bk, "name", f"key {j}") for j, bk in enumerate(schema.blocking)],
        "seconds": seconds,
        "notes": notes,
    }
    notes.append(
        "Measured on all records: which blocks are common is only known during the run, so every "
        "block is assumed common (worst case)."
    )

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        say(name)
        t0 = time.perf_counter()
        value = fn()
        seconds[name] = round(time.perf_counter() - t0, 3)
        return value

    blocking = timed("blocking", lambda: blocking_reveal(records.block_digests, k=opts.k))
    if mode == MPC3:
        report = AuditReport(meta=meta, blocking=blocking, segments=None)
        return _mpc3_audit(report, records, schema, rows, opts, timed)
    segs = timed("segments", lambda: segment_reveal(filters, out_bits, parties, k=opts.k))
    report = AuditReport(meta=meta, blocking=blocking, segments=segs)
    hmap: HardeningMap = timed(
        "hardening map",
        lambda: (
            probe_hardening(getattr(encoder, "harden", None), int(schema.filter_bits), out_bits)
            if int(schema.filter_bits) != out_bits or _has_hardening(schema)
            else identity_map(out_bits)
        ),
    )
    if not hmap.affine:
        notes.append(
            "The hardening is not affine over GF(2): the insider attack read no bit exactly."
        )
    if schema.hardening.xor_fold:
        notes.append(
            "XOR-folded bits are treated as unreadable by the insider attack: its rates are a lower "
            "bound for folded filters."
        )
    if schema.hardening.blip_flip_probability is not None:
        notes.append(
            "Under BLIP the insider attack is noise-aware: a q-gram stays possible while no more of its "
            "observable positions are unset than the 99% binomial quantile of BLIP flips."
        )
    if opts.suggestions:
        report.suggestions.extend(_blocking_suggestions(report, records, schema))
    if rows is None:
        notes.append(
            "No plaintext rows were given: uniqueness, bit sensitivity, frequency and insider measures "
            "were not run."
        )
        return report

    report.uniqueness = timed("uniqueness", lambda: _field_uniqueness(rows, fields, opts.k))
    plain = factorize([tuple(r.get(f, "") for f in fields) for r in rows])

    def freq() -> dict[str, Any]:
        out = {"full_filter": frequency_risk_rows(plain, filters)}
        for j, seg in enumerate(bits.segments(filters, out_bits, parties)):
            out[f"segment_{j}"] = frequency_risk_rows(plain, seg)
        return out

    report.frequency = timed("frequency", freq)
    ext = {k: list(v) for k, v in opts.external.items()}
    salts = _salts(schema)
    dicts: list[FieldDictionary] = timed(
        "dictionaries",
        lambda: [
            build_dictionary(
                encoder, f, rows, salt_field=salts.get(f), external_values=ext.get(f, ())
            )
            for f in fields
        ],
    )
    insider = timed(
        "insider",
        lambda: insider_attack(
            rows,
            filters,
            encoder,
            fields,
            hmap,
            parties,
            max_targets=opts.insider_max_targets,
            max_candidates=opts.max_candidates,
            include_full=opts.include_full_filter,
            seed=opts.seed,
            dictionaries=dicts,
            flip_probability=schema.hardening.blip_flip_probability,
        ),
    )
    report.insider = insider
    if insider.sampled:
        notes.append(
            f"Insider attack on a uniform random sample of {insider.targets} of {n} records "
            "(the dictionary holds every distinct value); rates carry Wilson 95% intervals."
        )
    sens = timed("sensitivity", lambda: bit_sensitivity(dicts, hmap, filters))
    report.bit_sensitivity = sens
    report.sensitivity = per_segment(sens, parties, k=opts.k)
    unhardened: np.ndarray | None = None
    if opts.cvpl or opts.suggestions:
        unhardened = timed(
            "unhardened filters",
            lambda: unhardened_from_dictionaries(dicts, int(schema.filter_bits)),
        )
    if opts.cvpl and unhardened is not None:
        report.cvpl = timed(
            "cvpl",
            lambda: _cvpl(
                records, rows, encoder, schema, parties, receiving, unhardened, opts, notes
            ),
        )
    if opts.suggestions and unhardened is not None:
        report.suggestions[:0] = timed(
            "suggestions",
            lambda: _suggest(
                report,
                rows,
                encoder,
                schema,
                parties,
                receiving,
                unhardened,
                opts,
                insider_limit,
                dicts,
            ),
        )
    return report


def _field_uniqueness(rows: Sequence[Mapping[str, str]], fields: Sequence[str], k: int) -> Any:
    return uniqueness({f: [r.get(f, "") for r in rows] for f in fields}, fields, k=k, greedy=True)


def _blocking_suggestions(report: AuditReport, records: Any, schema: Any) -> list[str]:
    names = [getattr(bk, "name", f"key {j}") for j, bk in enumerate(schema.blocking)]
    return blocking_suggestions(report, records.block_digests, names)


def _mpc3_audit(
    report: AuditReport,
    records: Any,
    schema: Any,
    rows: Sequence[Mapping[str, str]] | None,
    opts: AuditOptions,
    timed: Callable[[str, Callable[[], Any]], Any],
) -> AuditReport:
    """The rest of an mpc3 audit: what leaves the party in the clear is its blocking digests."""
    report.meta["notes"].append(
        "Mode mpc3: filters leave this party only as secret shares, so the segment measures "
        "(segment uniqueness, frequency, bit sensitivity, insider attack, CVPL) were not run; see "
        "not_run."
    )
    if opts.suggestions:
        report.suggestions.extend(_blocking_suggestions(report, records, schema))
    if rows is not None:
        fields = _fields(schema)
        report.uniqueness = timed("uniqueness", lambda: _field_uniqueness(rows, fields, opts.k))
    return report


def _has_hardening(schema: Any) -> bool:
    hd = schema.hardening
    return bool(hd.xor_fold or hd.balance)


def _cvpl(
    records: Any,
    rows: Sequence[Mapping[str, str]],
    encoder: Any,
    schema: Any,
    parties: int,
    receiving: Sequence[int],
    unhardened: np.ndarray,
    opts: AuditOptions,
    notes: list[str],
) -> list[CvplRow] | None:
    try:
        from party.audit.cvpl import assess_bits
    except ImportError:
        notes.append("CVPL engine not available: CVPL measures not run.")
        return None
    n = len(rows)
    fields = _fields(schema)
    rng = np.random.default_rng(opts.seed + 17)
    # D: the attacker's register, encoded with the key (optionally perturbed by the corruptor)
    register = unhardened
    if opts.cvpl_corruption > 0:
        try:
            from party.synthetic import Corruptor

            corr = Corruptor(opts.seed + 3)
            pick = rng.random(n) < opts.cvpl_corruption
            perturbed = [corr.corrupt(r, 1) if p else r for r, p in zip(rows, pick, strict=True)]
            register = unhardened_filters(encoder, fields, perturbed, int(schema.filter_bits))
            notes.append(
                f"CVPL register: {int(pick.sum())} of {n} records perturbed with one corruptor "
                "error each (a realistic outside register)."
            )
        except ImportError:
            notes.append("Corruptor not available: CVPL register is the exact own data.")
    harden = getattr(encoder, "harden", None)
    hardened_register = (
        harden(register) if harden is not None and _has_hardening(schema) else register
    )
    src_idx = np.arange(n)
    if n > opts.cvpl_max_sources:
        src_idx = np.sort(rng.choice(n, size=opts.cvpl_max_sources, replace=False))
        notes.append(f"CVPL sources: a uniform sample of {src_idx.size} of {n} revealed records.")
    # (label, revealed rows of the sources, attacker's register, bits)
    settings: list[tuple[str, np.ndarray, np.ndarray, int]] = [
        ("agreed", records.filters[src_idx], hardened_register, int(records.filter_bits))
    ]
    if opts.cvpl_settings and not _has_hardening(schema):
        lb = int(schema.filter_bits)
        if schema.hardening.blip_flip_probability is None:
            settings.append(
                ("simulated blip f=0.05", _blip(unhardened[src_idx], lb, 0.05, rng), register, lb)
            )
        if lb % (2 * parties) == 0:
            settings.append(
                (
                    "simulated xor-fold",
                    _fold(unhardened[src_idx], lb),
                    _fold(register, lb),
                    lb // 2,
                )
            )
    digests = records.block_digests
    keys = list(range(digests.shape[1])) or [-1]
    out: list[CvplRow] = []
    truth = src_idx.copy()
    for label, revealed, reg, nb in settings:
        if nb % parties:
            continue
        for j in receiving:
            a, b = nb // parties * j, nb // parties * (j + 1)
            src = bits.slice_bits(revealed, a, b)
            tgt = bits.slice_bits(reg, a, b)
            for key in keys:
                blocks = digests[:, key] if key >= 0 else np.zeros(n, dtype=np.uint64)
                res = assess_bits(
                    src,
                    tgt,
                    b - a,
                    blocks[src_idx],
                    blocks,
                    list(opts.cvpl_taus),
                    truth=truth,
                )
                out.append(
                    CvplRow(
                        setting=label,
                        segment=j,
                        blocking_key=key,
                        taus=[float(t) for t in res.taus],
                        linkage_rate=list(res.linkage_rate),
                        top1_precision=list(res.top1_precision) if res.top1_precision else None,
                        best_similarity=res.best_similarity,
                    )
                )
    return out


def blocking_suggestions(
    report: AuditReport, digests: np.ndarray, names: Sequence[str]
) -> list[str]:
    """For each blocking key leaving over 1% of records alone: the share alone without that key."""
    out = []
    b = report.blocking
    for key in sorted(b.keys, key=lambda k: -k.alone.value):
        if key.alone.value <= 0.01:
            continue
        name = names[key.key] if key.key < len(names) else f"key {key.key}"
        others = [j for j in range(digests.shape[1]) if j != key.key]
        if others:
            without = blocking_reveal(digests[:, others]).alone_in_some_block
            effect = f"; without it, {without} of records would be alone in some block"
        else:
            effect = ""
        out.append(
            f"blocking: key {name!r} leaves {key.alone} of its records alone in their block{effect}; "
            "a coarser key (shorter prefix, phonetic code alone, year band) or a minimum block size "
            "would lower it"
        )
    return out


def _suggest(
    report: AuditReport,
    rows: Sequence[Mapping[str, str]],
    encoder: Any,
    schema: Any,
    parties: int,
    receiving: Sequence[int],
    unhardened: np.ndarray,
    opts: AuditOptions,
    insider_limit: float | None,
    dicts: Sequence[FieldDictionary],
) -> list[str]:
    """Alternatives that lower the insider risk, measured on a small sample."""
    out: list[str] = []
    fields = _fields(schema)
    lb = int(schema.filter_bits)
    current = _worst_insider(report.insider, receiving) if report.insider else 0.0
    target = insider_limit if insider_limit is not None else 0.05
    if current > target:
        sample = sample_targets(len(rows), SUGGESTION_TARGETS, opts.seed)
        kw: dict[str, Any] = {
            "include_full": False,
            "dictionaries": dicts,
            "combos": prepare_combos(dicts),
            "targets": sample,
        }
        found = False
        tried: list[str] = []
        candidates = [p2 for p2 in range(parties + 1, min(8 * parties, 64) + 1) if lb % p2 == 0]
        for p2 in candidates[:SUGGESTION_PARTY_TRIES]:
            res = insider_attack(
                rows, unhardened, encoder, fields, identity_map(lb), p2, only_segments=(0, 1), **kw
            )
            worst = _worst_insider(res, range(p2))  # segments are exchangeable: two suffice
            tried.append(f"P={p2}: {worst:.3f}")
            if worst <= target:
                out.append(
                    f"more parties: with P={p2} (segments of {lb // p2} bits, unhardened) the worst "
                    f"insider one-to-one rate would be {worst:.3f} (limit {target:.3f}; "
                    f"sample of {res.targets})"
                )
                found = True
                break
        if not found:
            out.append(
                f"more parties: no P tried brings the worst insider one-to-one rate (fields and "
                f"whole record) to {target:.3f} without hardening ({'; '.join(tried) or 'no P divides l'})"
            )
        rng = np.random.default_rng(opts.seed + 5)
        one = receiving[:1]
        blip_tried: list[str] = []
        for f in (0.02, 0.05, 0.1, 0.2):
            noisy = unhardened.copy()
            noisy[sample] = _blip(unhardened[sample], lb, f, rng)
            res = insider_attack(
                rows,
                noisy,
                encoder,
                fields,
                identity_map(lb),
                parties,
                only_segments=one,
                flip_probability=f,
                **kw,
            )
            worst = _worst_insider(res, one)
            blip_tried.append(f"f={f}: {worst:.3f}")
            if worst <= target:
                eps = 2 * np.log((1 - f) / f)
                out.append(
                    f"hardening: BLIP with flip probability {f} (epsilon {eps:.2f} per bit) gives a "
                    f"worst insider one-to-one rate of {worst:.3f} at P={parties} against a "
                    "noise-aware attacker (check its top-1 rate and the linkage quality)"
                )
                break
        else:
            out.append(f"hardening: BLIP alone does not pass ({'; '.join(blip_tried)})")
        if lb % (2 * parties) == 0:
            folded = _fold(unhardened, lb)
            fmap = probe_hardening(lambda r: _fold(r, lb), lb, lb // 2)
            res = insider_attack(
                rows, folded, encoder, fields, fmap, parties, only_segments=one, **kw
            )
            out.append(
                f"hardening: XOR-folding gives a worst insider one-to-one rate of "
                f"{_worst_insider(res, one):.3f} for this attack (a lower bound: folded bits "
                "are not read exactly)"
            )
        if schema.hardening.balance:
            out.append(
                "balancing does not protect against a co-party holding the key (the complement "
                "half reveals the same bits)"
            )
    return out
