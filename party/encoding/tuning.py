"""Choosing per-field hash counts k for a target filter fill from a sample of the party's data."""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from party.encoding.normalise import field_qgrams
from party.encoding.schema import LinkageSchema
from party.errors import PprlError


def mean_qgram_counts(
    schema: LinkageSchema, rows: Iterable[Mapping[str, str]], sample: int = 10_000
) -> dict[str, float]:
    """Mean number of distinct q-grams per field over up to ``sample`` rows (missing -> 0)."""
    totals = dict.fromkeys((f.name for f in schema.fields), 0)
    n = 0
    for row in itertools.islice(rows, sample):
        n += 1
        for f in schema.fields:
            value = row.get(f.name) or ""
            if value.strip() in {s.strip() for s in f.missing_sentinels}:
                continue
            salt = row.get(f.salt_field, "") if f.salt_field else None
            totals[f.name] += len(field_qgrams(f, value, salt))
    if n == 0:
        raise PprlError("cannot suggest k: the sample has no rows")
    return {name: t / n for name, t in totals.items()}


def suggest_k_for_counts(
    schema: LinkageSchema, mean_counts: Mapping[str, float], target_fill: float = 0.5
) -> dict[str, int]:
    """k per field keeping the ratios of the schema's k, so the expected fill is ``target_fill``.

    With k_f = c * w_f (w_f = the schema's k of field f) the expected number of insertions is
    c * sum(w_f * Q_f); the fill 1 - exp(-insertions / l) equals the target when
    c = -l ln(1 - target) / sum(w_f * Q_f) (for one field this is encoder.choose_k).
    """
    if not 0 < target_fill < 1:
        raise PprlError(f"target fill must be between 0 and 1, got {target_fill}")
    load = sum(f.k * mean_counts.get(f.name, 0.0) for f in schema.fields)
    if load <= 0:
        raise PprlError("cannot suggest k: the sample has no q-grams in any field")
    c = -schema.filter_bits * math.log(1.0 - target_fill) / load
    return {f.name: max(1, round(c * f.k)) for f in schema.fields}


def suggest_k(
    schema: LinkageSchema,
    source: str | Path | Iterable[Mapping[str, str]],
    *,
    target_fill: float = 0.5,
    sample: int = 10_000,
) -> dict[str, tuple[float, int]]:
    """field -> (mean q-gram count, suggested k) from a CSV path or an iterable of rows."""
    if isinstance(source, str | Path):
        p = Path(source)
        try:
            with p.open(newline="", encoding="utf-8-sig") as fh:
                reader = csv.DictReader(fh)
                missing = [f.name for f in schema.fields if f.name not in (reader.fieldnames or [])]
                if missing:
                    raise PprlError(f"{p}: header lacks column(s) {missing} required by the schema")
                counts = mean_qgram_counts(schema, reader, sample)
        except FileNotFoundError:
            raise PprlError(f"{p}: file not found") from None
        except UnicodeDecodeError:
            raise PprlError(f"{p}: not valid UTF-8") from None
        except csv.Error as exc:
            raise PprlError(f"{p}: malformed CSV ({exc})") from None
    else:
        counts = mean_qgram_counts(schema, source, sample)
    ks = suggest_k_for_counts(schema, counts, target_fill)
    return {name: (counts[name], ks[name]) for name in ks}
