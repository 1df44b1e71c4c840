"""The audit report: every measure's result, serialised to JSON and to a self-contained HTML page.

JSON format (``AuditReport.to_dict``; counts and rates only, never values, filters or segments)::

    {"format": "pprl-audit-report", "version": 2,
     "meta": {mode,                       # protocol mode: "segments" or "mpc3" (party.audit.modes)
              revealed: [str, ...],       # what the party reveals in this mode, and to whom
              not_run: {measure: reason}, # measures that do not apply to the mode (mpc3: segments,
                                          #   frequency, sensitivity, insider, cvpl)
              records, parties, self_index, receiving_segments ([] in mpc3), filter_bits,
              output_bits, hardening, schema_digest, fields, blocking_keys, seconds: {measure: s},
              notes: [...]},
     "uniqueness": {...} | null,          # uniqueness.UniquenessResult.to_dict over the schema fields
     "blocking": {...},                    # revealed.BlockingReveal.to_dict
     "segments": {...} | null,             # revealed.SegmentReveal.to_dict (null in mpc3)
     "sensitivity": [{...} per segment],   # sensitivity.SegmentSensitivity.to_dict
     "frequency": {"full_filter": {...}, "segment_0": {...}, ...},   # frequency.FrequencyRisk
     "insider": {...} | null,              # insider.InsiderResult.to_dict
     "cvpl": [{setting, segment, blocking_key, taus, linkage_rate: [...], top1_precision: [...]}] | null,
     "suggestions": [str, ...],
     "decision": {"allowed": bool, "reasons": [str, ...], "policy": {...},
                  "not_applicable": [policy key, ...]} | null}   # limits the mode makes moot

Every rate is ``{"value", "count", "total", "ci95": [low, high]}`` (``party.audit.stats.Rate``).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.audit import htmlreport
from party.audit.frequency import FrequencyRisk
from party.audit.insider import InsiderResult
from party.audit.modes import DEFAULT_MODE
from party.audit.revealed import BlockingReveal, SegmentReveal
from party.audit.sensitivity import BitSensitivity, SegmentSensitivity
from party.audit.stats import Rate
from party.audit.uniqueness import UniquenessResult

REPORT_FORMAT = "pprl-audit-report"
REPORT_VERSION = 2


@dataclass
class CvplRow:
    """CVPL on one receiving party's segment under one hardening setting."""

    setting: str
    segment: int
    blocking_key: int
    taus: list[float]
    linkage_rate: list[Rate]
    top1_precision: list[Rate] | None
    best_similarity: np.ndarray = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "segment": self.segment,
            "blocking_key": self.blocking_key,
            "taus": self.taus,
            "linkage_rate": [r.to_dict() for r in self.linkage_rate],
            "top1_precision": (
                [r.to_dict() for r in self.top1_precision] if self.top1_precision else None
            ),
        }

    def rate_at(self, tau: float) -> Rate | None:
        for t, r in zip(self.taus, self.linkage_rate, strict=True):
            if abs(t - tau) < 1e-9:
                return r
        return None


@dataclass
class AuditReport:
    """All measures of one self-audit (see the module docstring for the JSON form)."""

    meta: dict[str, Any]
    blocking: BlockingReveal
    segments: SegmentReveal | None  # None in mpc3: no segment is revealed
    uniqueness: UniquenessResult | None = None
    bit_sensitivity: BitSensitivity | None = None
    sensitivity: tuple[SegmentSensitivity, ...] = ()
    frequency: dict[str, FrequencyRisk] = field(default_factory=dict)
    insider: InsiderResult | None = None
    cvpl: list[CvplRow] | None = None
    suggestions: list[str] = field(default_factory=list)
    decision: dict[str, Any] | None = None

    @property
    def receiving_segments(self) -> list[int]:
        default = range(self.segments.parties) if self.segments is not None else ()
        return list(self.meta.get("receiving_segments", default))

    @property
    def mode(self) -> str:
        return str(self.meta.get("mode", DEFAULT_MODE))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "meta": self.meta,
            "uniqueness": self.uniqueness.to_dict() if self.uniqueness else None,
            "blocking": self.blocking.to_dict(),
            "segments": self.segments.to_dict() if self.segments is not None else None,
            "sensitivity": [s.to_dict() for s in self.sensitivity],
            "frequency": {k: v.to_dict() for k, v in self.frequency.items()},
            "insider": self.insider.to_dict() if self.insider else None,
            "cvpl": [c.to_dict() for c in self.cvpl] if self.cvpl is not None else None,
            "suggestions": self.suggestions,
            "decision": self.decision,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, default=_json_default)

    # ------------------------------------------------------------------ summary
    def summary_rows(self) -> list[tuple[str, str]]:
        """(measure, value) pairs for the short printed summary."""
        rows: list[tuple[str, str]] = [("protocol mode", self.mode)]
        recv = self.receiving_segments
        if self.uniqueness:
            rows.append(("records alone over the schema fields", str(self.uniqueness.alone)))
        rows.append(("records alone in some block", str(self.blocking.alone_in_some_block)))
        seg_alone = [self.segments.segments[j].alone for j in recv if self.segments is not None]
        if seg_alone:
            worst = max(seg_alone, key=lambda r: r.value)
            rows.append(("unique segment pattern (worst segment)", str(worst)))
        marks = [
            self.frequency[f"segment_{j}"].dr_mark for j in recv if f"segment_{j}" in self.frequency
        ]
        if marks:
            rows.append(
                ("frequency DR_Mark (worst segment)", str(max(marks, key=lambda r: r.value)))
            )
        if self.insider:
            segs = [s for s in self.insider.segments if s.segment in recv]
            for name in self.insider.dictionary_entries:
                worst_f = max((s.fields[name].one_to_one for s in segs), key=lambda r: r.value)
                rows.append((f"insider one-to-one: {name}", str(worst_f)))
            if segs:
                worst_r = max((s.record.one_to_one for s in segs), key=lambda r: r.value)
                rows.append(("insider one-to-one: whole record", str(worst_r)))
        if "insider" in self.not_run:
            rows.append(("insider segment attack", f"not run (mode {self.mode}: no segments sent)"))
        if self.cvpl:
            best = max(self.cvpl, key=lambda c: c.linkage_rate[-1].value)
            rows.append(
                (
                    f"CVPL-LR at tau={best.taus[-1]:.2f} (worst, {best.setting})",
                    str(best.linkage_rate[-1]),
                )
            )
        if self.decision is not None:
            rows.append(("decision", "ALLOWED" if self.decision["allowed"] else "DECLINED"))
        return rows

    # ------------------------------------------------------------------ HTML
    def to_html(self) -> str:
        sections: list[str] = []
        m = self.meta
        sections.append(
            "<h2>Parameters</h2>"
            + htmlreport.table_html(
                ["parameter", "value"],
                [
                    ("protocol mode", self.mode),
                    ("records", m.get("records")),
                    ("parties (P)", m.get("parties")),
                    ("this party's index", m.get("self_index")),
                    ("segments sent to co-parties", ", ".join(map(str, self.receiving_segments))),
                    ("filter bits (revealed)", m.get("output_bits")),
                    ("hardening", m.get("hardening")),
                    ("schema digest", m.get("schema_digest")),
                ],
            )
        )
        if self.decision is not None:
            ok = self.decision["allowed"]
            cls = "pass" if ok else "fail"
            reasons = "".join(f"<li>{html.escape(r)}</li>" for r in self.decision["reasons"])
            sections.append(
                f'<h2>Decision: <span class="{cls}">{"ALLOWED" if ok else "DECLINED"}</span></h2>'
                + (f"<ul>{reasons}</ul>" if reasons else "")
            )
        sections.append(self._revealed_html())
        if self.suggestions:
            items = "".join(f"<li>{html.escape(s)}</li>" for s in self.suggestions)
            sections.append(f"<h2>What would pass</h2><ul>{items}</ul>")
        sections.append(
            "<h2>Summary</h2>" + htmlreport.table_html(["measure", "value"], self.summary_rows())
        )
        if self.uniqueness:
            sections.append(self._uniqueness_html())
        sections.append(self._blocking_html())
        if self.segments is not None:
            sections.append(self._segments_html())
        if self.sensitivity:
            sections.append(self._sensitivity_html())
        if self.frequency:
            sections.append(self._frequency_html())
        if self.insider:
            sections.append(self._insider_html())
        if self.cvpl:
            sections.append(self._cvpl_html())
        notes = m.get("notes") or []
        if notes:
            sections.append(
                "<h2>Notes</h2><ul>"
                + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
                + "</ul>"
            )
        secs = m.get("seconds") or {}
        if secs:
            sections.append(
                "<h2>Cost</h2>"
                + htmlreport.table_html(
                    ["measure", "seconds"], [(k, float(v)) for k, v in secs.items()]
                )
            )
        return htmlreport.page_html("PPRL self-audit", sections)

    @property
    def not_run(self) -> dict[str, str]:
        return dict(self.meta.get("not_run") or {})

    def _revealed_html(self) -> str:
        items = "".join(f"<li>{html.escape(s)}</li>" for s in self.meta.get("revealed") or [])
        out = f"<h2>What this run reveals (mode {html.escape(self.mode)})</h2><ul>{items}</ul>"
        if self.not_run:
            skipped = "".join(f"<li>{html.escape(r)}</li>" for r in self.not_run.values())
            out += f"<h3>Measures not run</h3><ul>{skipped}</ul>"
        return out

    def _uniqueness_html(self) -> str:
        u = self.uniqueness
        assert u is not None
        fig, ax = htmlreport.new_figure()
        xs = list(range(1, len(u.climb) + 1))
        ax.plot(xs, [s.alone.value for s in u.climb], marker="o", label="alone (crowd 1)")
        ax.plot(xs, [s.below_k.value for s in u.climb], marker="s", label=f"crowd < {u.k}")
        ax.set_xticks(xs)
        ax.set_xticklabels([s.column for s in u.climb], rotation=30, ha="right")
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("share of records")
        ax.set_title("Uniqueness climb" + (" (greedy order)" if u.greedy else ""))
        ax.legend()
        rows = [(s.column, s.groups, str(s.alone), str(s.below_k)) for s in u.climb]
        return (
            "<h2>Uniqueness over the schema fields</h2>"
            + htmlreport.figure_html(fig, "Share of records singled out as columns are added")
            + htmlreport.table_html(["+ column", "groups", "alone", f"crowd < {u.k}"], rows)
        )

    def _blocking_html(self) -> str:
        b = self.blocking
        parts = ["<h2>Blocking-key digests</h2>"]
        names = self.meta.get("blocking_keys") or []
        rows = [
            (
                names[k.key] if k.key < len(names) else f"key {k.key}",
                k.records_with_value,
                k.blocks,
                k.largest_block,
                round(k.mean_block, 2),
                str(k.alone),
            )
            for k in b.keys
        ]
        parts.append(
            htmlreport.table_html(
                ["key", "records", "blocks", "largest", "mean size", "alone in block"], rows
            )
        )
        if b.keys and any(k.sizes.size for k in b.keys):
            fig, ax = htmlreport.new_figure()
            names = self.meta.get("blocking_keys") or []
            hi = max(int(k.sizes.max()) for k in b.keys if k.sizes.size)
            edges = np.unique(np.round(np.logspace(0, np.log10(hi + 1), 30)).astype(int))
            for k in b.keys:
                if k.sizes.size:
                    label = names[k.key] if k.key < len(names) else f"key {k.key}"
                    ax.hist(k.sizes, bins=edges, alpha=0.6, label=label)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("block size (records)")
            ax.set_ylabel("blocks")
            ax.set_title("Block-size distribution")
            ax.legend()
            parts.append(htmlreport.figure_html(fig, "Block sizes per blocking key"))
        parts.append(
            f"<p>Records alone in at least one block: {html.escape(str(b.alone_in_some_block))}; "
            f"records without any blocking-key value: {html.escape(str(b.no_block))}.</p>"
        )
        return "".join(parts)

    def _segments_html(self) -> str:
        s = self.segments
        assert s is not None
        rows = [
            (f"segment {j}", s.segment_bits, u.groups, str(u.alone), str(u.below_k))
            for j, u in enumerate(s.segments)
        ]
        rows.append(
            ("full filter", s.filter_bits, s.full.groups, str(s.full.alone), str(s.full.below_k))
        )
        return "<h2>Uniqueness of revealed bit patterns</h2>" + htmlreport.table_html(
            ["pattern", "bits", "distinct", "unique", f"crowd < {s.full.k}"], rows
        )

    def _sensitivity_html(self) -> str:
        parts = ["<h2>Bit sensitivity</h2>"]
        if self.bit_sensitivity is not None:
            fig, ax = htmlreport.new_figure(8, 3.5)
            sens = self.bit_sensitivity
            values = sens.sensitivity
            groups = [values[seg.start : seg.stop] for seg in self.sensitivity]
            ax.boxplot(groups, showfliers=True)
            ax.set_xticks(range(1, len(groups) + 1))
            ax.set_xticklabels([f"segment {seg.segment}" for seg in self.sensitivity])
            ax.set_yscale("symlog")
            ax.set_ylabel("min(q-grams, records) per bit")
            ax.set_title("Bit sensitivity per segment (low = identifying)")
            parts.append(htmlreport.figure_html(fig, "Bit sensitivity per segment"))
        rows = [
            (
                f"segment {s.segment}",
                s.qgrams_min,
                s.qgrams_median,
                s.records_min,
                s.records_median,
                s.sensitivity_min,
                str(s.single_qgram_bits),
                str(s.low_sensitivity_bits),
            )
            for s in self.sensitivity
        ]
        parts.append(
            htmlreport.table_html(
                [
                    "segment",
                    "min q-grams",
                    "median q-grams",
                    "min records",
                    "median records",
                    "min sensitivity",
                    "bits with <= 1 q-gram",
                    "bits with sensitivity < k",
                ],
                rows,
            )
        )
        return "".join(parts)

    def _frequency_html(self) -> str:
        rows = [
            (k.replace("_", " "), v.dr_mean, v.dr_max, str(v.dr_mark), str(v.aligned_correctly))
            for k, v in self.frequency.items()
        ]
        return "<h2>Frequency attack (global database = own data)</h2>" + htmlreport.table_html(
            ["encoding", "DR_Mean", "DR_Max", "DR_Mark", "aligned correctly"], rows
        )

    def _insider_html(self) -> str:
        ins = self.insider
        assert ins is not None
        names = list(ins.dictionary_entries)
        segs = list(ins.segments)
        fig, ax = htmlreport.new_figure(8, 4)
        width = 0.8 / max(1, len(names) + 1)
        xs = np.arange(len(segs))
        for i, name in enumerate([*names, "record"]):
            vals = [
                (s.record if name == "record" else s.fields[name]).one_to_one.value for s in segs
            ]
            ax.bar(xs + i * width, vals, width, label=name)
        ax.set_xticks(xs + 0.4 - width / 2)
        ax.set_xticklabels([f"segment {s.segment}" for s in segs])
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("one-to-one re-identification")
        ax.set_title("Insider attack success per field and segment")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        rows = []
        for s in [*segs, *([ins.full] if ins.full else [])]:
            label = "full filter (reference)" if s.segment < 0 else f"segment {s.segment}"
            for name in [*names, "record"]:
                o = s.record if name == "record" else s.fields[name]
                rows.append(
                    (
                        label,
                        name,
                        str(o.one_to_one),
                        str(o.one_to_many),
                        str(o.top1),
                        round(o.mean_consistent, 2),
                    )
                )
        note = (
            f"<p>{ins.targets} of {ins.records} records attacked"
            + (" (uniform random sample)" if ins.sampled else "")
            + f"; one-to-many = 2..{ins.max_candidates} candidates including the true one.</p>"
        )
        return (
            "<h2>Insider segment attack (co-party holding the key)</h2>"
            + note
            + htmlreport.figure_html(fig, "One-to-one re-identification per field and segment")
            + htmlreport.table_html(
                ["segment", "field", "one-to-one", "one-to-many", "top-1", "mean candidates"], rows
            )
        )

    def _cvpl_html(self) -> str:
        assert self.cvpl
        labels = [f"{c.setting}, seg {c.segment}, key {c.blocking_key}" for c in self.cvpl]
        grid = np.array([[r.value for r in c.linkage_rate] for c in self.cvpl])
        fig, ax = htmlreport.new_figure(8, 1.2 + 0.35 * len(labels))
        im = ax.imshow(grid, aspect="auto", vmin=0.0, vmax=1.0, cmap="Reds")
        taus = self.cvpl[0].taus
        ax.set_xticks(range(len(taus)))
        ax.set_xticklabels([f"{t:.2f}" for t in taus])
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xlabel("tau (Dice on segment bits)")
        ax.set_title("CVPL risk surface R(setting / receiving party / blocking key, tau)")
        for (i, j), v in np.ndenumerate(grid):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6)
        fig.colorbar(im, ax=ax, label="CVPL-LR")
        rows = []
        for c in self.cvpl:
            for i, t in enumerate(c.taus):
                prec = c.top1_precision[i] if c.top1_precision else None
                rows.append(
                    (
                        c.setting,
                        c.segment,
                        c.blocking_key,
                        t,
                        str(c.linkage_rate[i]),
                        str(prec or "-"),
                    )
                )
        return (
            "<h2>CVPL on what is revealed</h2>"
            + htmlreport.figure_html(fig, "CVPL-LR per receiving party, blocking key and setting")
            + htmlreport.table_html(
                ["setting", "segment", "blocking key", "tau", "CVPL-LR", "top-1 precision"], rows
            )
        )


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Rate):
        return obj.to_dict()
    return str(obj)
