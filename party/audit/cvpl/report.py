"""CVPL outputs: the JSON result file and the self-contained HTML report (risk surface, attribution).

Files written by ``write_outputs(result, out_dir)``: ``cvpl.json`` (``CvplResult.to_dict()``: counts,
rates with Wilson 95% intervals, quantiles, parameters; no record values) and ``cvpl.html`` (summary
and level tables, the risk-surface heat map R(lambda, tau), the progressive lower bounds, the
attribution bar chart and the DCR/NNDR summary).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from party.audit.cvpl.assess import CvplResult
from party.audit.cvpl.errors import CvplError
from party.audit.htmlreport import figure_html, new_figure, page_html, table_html


def json_safe(obj: Any) -> Any:
    """Replace non-finite floats (NaN, inf) by None and numpy scalars by Python ones, recursively."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def _fmt(rate: Any) -> str:
    return "n/a" if rate is None else str(rate)


def heatmap_html(result: CvplResult) -> str:
    surface = result.surface()
    names = [lv.name for lv in result.levels]
    fig, ax = new_figure(9.0, 1.2 + 0.45 * len(names))
    im = ax.imshow(surface, aspect="auto", cmap="magma", vmin=0.0, vmax=1.0, origin="upper")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    step = max(1, len(result.taus) // 10)
    ticks = list(range(0, len(result.taus), step))
    ax.set_xticks(ticks, [f"{result.taus[i]:.2f}" for i in ticks], fontsize=8)
    ax.set_xlabel("threshold tau (cosine)")
    ax.set_title("Risk surface R(lambda, tau) = CVPL-LR")
    fig.colorbar(im, ax=ax, label="linkage rate")
    return figure_html(fig, "Existential linkage rate per blocking level (rows) and threshold")


def bounds_html(result: CvplResult) -> str:
    fig, ax = new_figure(7.0, 3.5)
    x = np.arange(len(result.levels))
    taus = result.taus
    picks = sorted({int(np.argmin(np.abs(taus - t))) for t in (0.8, 0.9, 0.95, result.tau)})
    for i in picks:
        ax.plot(
            x, [lv.bound[i].value for lv in result.levels], marker="o", label=f"tau={taus[i]:.2f}"
        )
    ax.set_xticks(x, [str(i) for i in x])
    ax.set_xlabel("blocking levels processed (progressive)")
    ax.set_ylabel("lower bound of CVPL-LR")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)
    return figure_html(fig, "Anytime lower bounds: monotone as blocking is relaxed")


def attribution_html(result: CvplResult) -> str:
    att = result.attribution
    if att is None or not att.linked:
        return "<p>No linked records at the headline threshold: nothing to attribute.</p>"
    fig, ax = new_figure(7.0, 0.6 + 0.3 * len(att.attributes))
    colors = ["#c0392b" if q else "#2e86c1" for q in att.is_qi]
    y = np.arange(len(att.attributes))
    ax.barh(y, att.share, color=colors)
    ax.set_yticks(y, list(att.attributes), fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="#444", lw=0.8)
    ax.set_xlabel("share of the similarity of linked records (red: quasi-identifier)")
    ax.set_title(f"Attribution: non-QI share {att.non_qi_share:.2f}")
    return figure_html(fig, "Per-attribute contribution to detected linkage risk")


def distances_html(result: CvplResult) -> str:
    dn = result.dcr_nndr
    fig, _ = new_figure(9.0, 3.0)
    fig.clf()
    for pos, key, label in ((1, "dcr_histogram", "DCR"), (2, "nndr_histogram", "NNDR")):
        ax = fig.add_subplot(1, 2, pos)
        edges = np.asarray(dn[key]["edges"])
        ax.bar(edges[:-1], dn[key]["counts"], width=np.diff(edges), align="edge", color="#555")
        ax.set_xlabel(label)
        ax.set_ylabel("records")
    return figure_html(fig, "Distance to closest record and nearest-neighbour distance ratio")


def render_html(result: CvplResult, title: str = "CVPL linkage-risk assessment") -> str:
    fs = result.fs
    summary = [
        ("records (original / released)", f"{result.n_source} / {result.n_target}"),
        ("headline blocking level", result.levels[result.headline_level].name),
        ("threshold tau", f"{result.tau:.4f} ({result.tau_source})"),
        ("CVPL-LR(tau)", _fmt(result.linkage_rate)),
        ("top-1 precision", _fmt(result.top1_precision)),
        ("FS linkage rate", _fmt(fs.linkage_rate) if fs else "not run"),
        ("FS precision", _fmt(fs.precision) if fs else "not run"),
        (
            "non-QI share of risk",
            f"{result.attribution.non_qi_share:.3f}" if result.attribution else "not run",
        ),
        ("PCA components (explained variance)", f"{result.pca_k} ({result.pca_explained:.3f})"),
        ("levels nested", str(result.nested)),
        ("QIs ignored by blocking (suppressed)", ", ".join(result.dropped_from_blocking) or "none"),
    ]
    levels = [
        (
            lv.name,
            lv.blocks,
            lv.largest_block,
            lv.pairs,
            _fmt(lv.structural_recall),
            _fmt(lv.structural_recall_unsplit) if lv.subblocked else "-",
            _fmt(lv.at_tau),
            _fmt(lv.precision_at_tau),
            round(lv.seconds, 3),
        )
        for lv in result.levels
    ]
    dn = result.dcr_nndr
    dcr_rows = [
        (name, *(f"{v:.4f}" for v in (dn[name] or {}).values())) for name in ("dcr", "nndr")
    ]
    sections = [
        "<h2>Summary</h2>",
        table_html(["measure", "value"], summary),
        "<h2>Blocking levels</h2>",
        table_html(
            [
                "level",
                "blocks",
                "largest block",
                "pairs",
                "structural recall",
                "recall before sub-blocking",
                "CVPL-LR(tau)",
                "top-1 precision",
                "seconds",
            ],
            levels,
        ),
        heatmap_html(result),
        bounds_html(result),
        "<h2>Attribution</h2>",
        attribution_html(result),
        "<h2>Distance to closest record and nearest-neighbour distance ratio</h2>",
        table_html(["measure", "q05", "q25", "q50", "q75", "q95"], dcr_rows),
        distances_html(result),
        f"<p>Distinct nearest neighbours (NNDR &le; {dn['nndr_ratio']}): "
        f"{dn['distinct_nearest']['count']} of {dn['distinct_nearest']['total']}.</p>",
    ]
    if result.ablation:
        sections += [
            "<h2>Ablation (headline CVPL-LR with attribute subsets)</h2>",
            table_html(["subset", "CVPL-LR"], [(k, str(v)) for k, v in result.ablation.items()]),
        ]
    return page_html(title, sections)


def write_outputs(result: CvplResult, out_dir: str | Path) -> tuple[Path, Path]:
    """Write cvpl.json and cvpl.html into ``out_dir`` (created if needed)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        json_path = out / "cvpl.json"
        html_path = out / "cvpl.html"
        json_path.write_text(json.dumps(json_safe(result.to_dict()), indent=2, allow_nan=False))
        html_path.write_text(render_html(result), encoding="utf-8")
    except OSError as exc:
        raise CvplError(f"{out}: cannot write results ({exc.strerror})") from None
    return json_path, html_path
