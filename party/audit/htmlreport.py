"""Self-contained HTML reports: embedded PNG figures (matplotlib, Agg), tables and a page skeleton."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.fail{color:#b00;font-weight:bold}.pass{color:#070;font-weight:bold}figure{margin:1em 0}
"""


def new_figure(width: float = 7.0, height: float = 4.0) -> tuple[Figure, Any]:
    """A figure and one axes, detached from any GUI backend."""
    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


def figure_html(fig: Figure, caption: str = "") -> str:
    """The figure as an inline base64 PNG <figure>; closes the figure."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">{cap}</figure>'


def table_html(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """An HTML table; cells are escaped, floats shown with 4 significant digits."""

    def cell(v: Any) -> str:
        return html.escape(f"{v:.4g}" if isinstance(v, float) else str(v))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page_html(title: str, sections: Iterable[str]) -> str:
    """A complete HTML document with inline style and the given (already safe) sections."""
    t = html.escape(title)
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{t}</title>'
        f"<style>{_STYLE}</style></head><body><h1>{t}</h1>{''.join(sections)}</body></html>"
    )
