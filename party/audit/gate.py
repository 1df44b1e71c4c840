"""The gate a party passes before joining a linkage: run the self-audit, compare with its policy.

``check_before_join`` is what the node calls after encoding and before anything leaves. It knows the
protocol mode: in segments mode every limit applies; in mpc3 (no segment leaves the party) only the
limits on what is revealed in the clear (blocking digests) and ``allowed_modes`` apply. It is
fail-closed: a limit whose measure could not be computed (e.g. no plaintext rows were given, so the
insider attack could not run) declines the run with a reason saying so. Reasons name the measure, its
value and the limit, never data.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from party.audit.modes import MPC3, ModeError, mode_of
from party.audit.policy import AuditPolicy, load_value_list
from party.audit.report import AuditReport
from party.audit.run import AuditOptions, run_audit
from party.audit.stats import Rate
from party.errors import PprlError

log = logging.getLogger(__name__)


class GateError(PprlError, ValueError):
    """The gate cannot run on its inputs (misaligned rows, unreadable data file, bad parameters)."""


@dataclass(frozen=True)
class GateDecision:
    allowed: bool
    reasons: list[str]
    report: AuditReport | None = field(default=None, repr=False)


def _parties(protocol_params: Any) -> int:
    if isinstance(protocol_params, int) and not isinstance(protocol_params, bool):
        return protocol_params
    if isinstance(protocol_params, Mapping):
        p = protocol_params.get("parties")
    else:
        p = getattr(protocol_params, "parties", None)
    if isinstance(p, int) and not isinstance(p, bool):
        return p
    if isinstance(p, Sequence) and not isinstance(p, str):
        return len(p)
    raise GateError("protocol parameters: cannot tell the number of parties")


def aligned_rows(
    csv_path: str | Path, id_column: str | None, record_ids: Sequence[str]
) -> list[dict[str, str]]:
    """The plaintext rows of ``csv_path`` in the order of ``record_ids`` (EncodedRecords' ids).

    Ids are the id column's (stripped) values, or the 1-based data row number as the encoder counts
    it (blank lines included), as in party.encoding. Errors name the file and row, never values.
    """
    p = Path(csv_path)
    wanted = set(record_ids)
    found: dict[str, dict[str, str]] = {}
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = [h.strip() for h in next(reader, [])]
            if not header:
                raise GateError(f"{p}: empty file, expected a header row")
            if id_column is not None and id_column not in header:
                raise GateError(f"{p}: no id column {id_column!r}")
            ip = header.index(id_column) if id_column is not None else -1
            for rowno, row in enumerate(reader, 1):
                if not row:
                    continue
                rid = row[ip].strip() if ip >= 0 and ip < len(row) else str(rowno)
                if rid in wanted:
                    found[rid] = dict(zip(header, row, strict=False))
    except OSError as exc:
        raise GateError(f"{p}: cannot read ({exc.strerror})") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise GateError(f"{p}: unreadable CSV ({type(exc).__name__})") from None
    missing = len(wanted) - len(found)
    if missing:
        raise GateError(f"{p}: {missing} encoded record id(s) not found in the data file")
    return [found[r] for r in record_ids]


def _exceeds(rate: Rate, limit: float, conservative: bool) -> tuple[bool, float]:
    v = rate.interval[1] if conservative else rate.value
    return v > limit, v


def evaluate_policy(report: AuditReport, policy: AuditPolicy) -> list[str]:
    """Reasons the report violates the policy (empty: allowed)."""
    reasons: list[str] = []
    cons = policy.conservative
    how = "upper 95% bound" if cons else "rate"

    def check(name: str, rate: Rate, limit: float | None) -> None:
        if limit is None:
            return
        bad, v = _exceeds(rate, limit, cons)
        if bad:
            reasons.append(
                f"{name}: {how} {v:.4f} ({rate.count}/{rate.total}) exceeds limit {limit:.4f}"
            )

    def missing(name: str, why: str) -> None:
        reasons.append(
            f"{name}: not measured ({why}); the policy sets a limit, so the gate declines"
        )

    if report.mode not in policy.allowed_modes:
        reasons.append(
            f"protocol mode {report.mode}: not among the policy's allowed_modes "
            f"({', '.join(policy.allowed_modes)})"
        )
    if report.mode != MPC3:  # in mpc3 no segment leaves the party: segment limits are moot
        _check_segment_limits(report, policy, reasons, check, missing)
    check(
        "records alone in their block",
        report.blocking.alone_in_some_block,
        policy.max_alone_in_block,
    )
    return reasons


def _check_segment_limits(
    report: AuditReport,
    policy: AuditPolicy,
    reasons: list[str],
    check: Callable[[str, Rate, float | None], None],
    missing: Callable[[str, str], None],
) -> None:
    """Append the reasons the segment measures of ``report`` (segments mode) break ``policy``."""
    recv = report.receiving_segments
    ins = report.insider
    need_insider = (
        policy.max_insider_reidentification is not None
        or policy.max_insider_one_to_one
        or policy.max_insider_record_one_to_one is not None
        or policy.max_insider_top1 is not None
    )
    if need_insider and ins is None:
        missing("insider attack", "no plaintext rows were available to the gate")
    elif ins is not None:
        segs = [s for s in ins.segments if s.segment in recv]
        for name in ins.dictionary_entries:
            limit = policy.field_limit(name)
            if limit is not None and segs:
                worst = max(segs, key=lambda s: s.fields[name].one_to_one.value)
                check(
                    f"insider one-to-one re-identification of {name} (segment {worst.segment})",
                    worst.fields[name].one_to_one,
                    limit,
                )
            if policy.max_insider_top1 is not None and segs:
                worst = max(segs, key=lambda s: s.fields[name].top1.value)
                check(
                    f"insider top-1 re-identification of {name} (segment {worst.segment})",
                    worst.fields[name].top1,
                    policy.max_insider_top1,
                )
        unknown = sorted(
            f for f in policy.max_insider_one_to_one if f != "*" and f not in ins.dictionary_entries
        )
        if unknown:
            reasons.append(
                f"max_insider_one_to_one names field(s) not in the schema: {', '.join(unknown)}"
            )
        rec_limits = [
            v
            for v in (policy.max_insider_record_one_to_one, policy.max_insider_reidentification)
            if v is not None
        ]
        if rec_limits and segs:
            worst = max(segs, key=lambda s: s.record.one_to_one.value)
            check(
                f"insider one-to-one re-identification of whole records (segment {worst.segment})",
                worst.record.one_to_one,
                min(rec_limits),
            )
    freq_keys = [f"segment_{j}" for j in recv if f"segment_{j}" in report.frequency]
    if policy.max_dr_mark is not None or policy.max_dr_mean is not None:
        if not freq_keys:
            missing("frequency attack", "no plaintext rows were available to the gate")
        else:
            worst_k = max(freq_keys, key=lambda k: report.frequency[k].dr_mark.value)
            check(
                f"frequency attack DR_Mark ({worst_k.replace('_', ' ')})",
                report.frequency[worst_k].dr_mark,
                policy.max_dr_mark,
            )
            if policy.max_dr_mean is not None:
                worst_m = max(freq_keys, key=lambda k: report.frequency[k].dr_mean)
                v = report.frequency[worst_m].dr_mean
                if v > policy.max_dr_mean:
                    reasons.append(
                        f"frequency attack DR_Mean ({worst_m.replace('_', ' ')}): {v:.4f} exceeds "
                        f"limit {policy.max_dr_mean:.4f}"
                    )
    if policy.max_unique_segment is not None and recv and report.segments is not None:
        segments = report.segments.segments
        worst_j = max(recv, key=lambda j: segments[j].alone.value)
        check(
            f"records with a unique segment pattern (segment {worst_j})",
            segments[worst_j].alone,
            policy.max_unique_segment,
        )
    if policy.max_cvpl_lr is not None:
        rows = [
            c for c in (report.cvpl or []) if c.setting == "agreed" and c.rate_at(policy.cvpl_tau)
        ]
        if not rows:
            missing(
                f"CVPL-LR at tau={policy.cvpl_tau}",
                "CVPL did not run or tau is not on the grid",
            )
        else:
            worst_c = max(rows, key=lambda c: c.rate_at(policy.cvpl_tau).value)  # type: ignore[union-attr]
            rate = worst_c.rate_at(policy.cvpl_tau)
            assert rate is not None
            check(
                f"CVPL-LR at tau={policy.cvpl_tau} (segment {worst_c.segment}, "
                f"blocking key {worst_c.blocking_key})",
                rate,
                policy.max_cvpl_lr,
            )


def check_before_join(
    records: Any,
    encoder: Any,
    schema: Any,
    protocol_params: Any,
    policy: AuditPolicy | Mapping[str, Any] | None,
    *,
    rows: Sequence[Mapping[str, str]] | None = None,
    data_csv: str | Path | None = None,
    id_column: str | None = None,
    self_index: int | None = None,
    options: AuditOptions | None = None,
    progress: Callable[[str], None] | None = None,
    mode: str | None = None,
) -> GateDecision:
    """Audit what this party would reveal and decide whether it may join.

    ``records``: the EncodedRecords the party will reveal, or its plaintext rows (a sequence of
    mappings), which are then encoded with ``encoder``. Plaintext for the measures that need it comes
    from ``rows`` (aligned with records), from ``data_csv`` (+ ``id_column``, aligned by record id), or
    from ``records`` itself when it is rows. ``protocol_params``: ProtocolParameters (or anything with
    ``parties``), an int P, or a mapping with "parties". ``self_index``: this party's ring index (its own
    segment is not revealed); None audits every segment. ``mode``: the protocol mode ("segments" or
    "mpc3"); None takes ``protocol_params``' mode, else segments. In mpc3 the segment measures do not
    run and the policy's limits on them are moot (listed in ``decision.not_applicable``).
    """
    pol = policy if isinstance(policy, AuditPolicy) else AuditPolicy.from_mapping(policy)
    try:
        run_mode = mode_of(protocol_params, mode)
    except ModeError as exc:
        raise GateError(str(exc)) from None
    parties = _parties(protocol_params)
    if self_index is None and hasattr(protocol_params, "parties"):
        self_index = None  # ProtocolParameters does not say which party we are
    if hasattr(records, "filters"):
        encoded = records
    else:
        rows = list(records)
        encoded = encoder.encode_rows(rows)
        if len(encoded.record_ids) != len(rows):
            kept = [int(r) - 1 for r in encoded.record_ids]
            rows = [rows[i] for i in kept]
    fb = getattr(protocol_params, "filter_bits", None)
    if isinstance(fb, int) and fb != int(encoded.filter_bits):
        raise GateError(
            f"protocol parameters: filter_bits={fb} but the encoder emits {encoded.filter_bits}-bit "
            "filters"
        )
    if rows is None and data_csv is not None:
        rows = aligned_rows(data_csv, id_column, list(encoded.record_ids))
    if rows is not None and len(rows) != len(encoded.record_ids):
        raise GateError(
            f"{len(rows)} plaintext rows given for {len(encoded.record_ids)} encoded records"
        )
    # Without explicit options (the node's call) the gate computes what the decision needs: CVPL only
    # when the policy limits it, and no "what would pass" search (most of a small audit's time; the
    # report of `pprl-party audit` has it).
    opts = options or AuditOptions(cvpl=pol.max_cvpl_lr is not None, suggestions=False)
    ext: dict[str, list[str]] = {}
    if run_mode != MPC3:  # the value lists serve the insider attack, which mpc3 does not run
        for fname, path in pol.external_dictionaries.items():
            ext[fname] = load_value_list(path)
    opts = AuditOptions(
        **{
            **opts.__dict__,
            "insider_max_targets": pol.insider_max_targets,
            "external": {**dict(opts.external), **ext},
        }
    )
    limit = (
        pol.field_limit("*")
        if pol.max_insider_one_to_one or pol.max_insider_reidentification
        else None
    )
    report = run_audit(
        encoded,
        encoder,
        schema,
        parties,
        rows=rows,
        self_index=self_index,
        options=opts,
        insider_limit=limit,
        progress=progress,
        mode=run_mode,
    )
    reasons = evaluate_policy(report, pol)
    allowed = not reasons
    report.decision = {
        "allowed": allowed,
        "reasons": reasons,
        "policy": pol.to_dict(),
        "not_applicable": pol.segment_limits() if run_mode == MPC3 else [],
    }
    if not allowed and report.suggestions:
        log.info("audit gate declined; %d suggestion(s) in the report", len(report.suggestions))
    return GateDecision(allowed=allowed, reasons=reasons, report=report)
