"""Frequency linkage attack disclosure risk (DR_Mean, DR_Max, DR_Mark) on filters and segments.

Source: Vatsalan, Christen, O'Keefe and Verykios, "An evaluation framework for privacy-preserving record
linkage", Journal of Privacy and Confidentiality 6(1), 2014, section on privacy measures. There, each
masked record r that an attacker links to ``n_g(r)`` records of a global database G has probability of
suspicion ``P_s(r) = 1 / n_g(r)``; DR_Max is the largest, DR_Mean the average of P_s over the masked
records, and the marketer risk DR_Mark the share of masked records with ``P_s(r) = 1``.

Our operationalisation (assumptions, stated so they can be checked):

- Worst-case global database: G is the party's own plaintext data (every person the attacker could look
  up is in G, with the values the party holds). A G record is identified by its combination of the schema
  fields' values (the quasi-identifiers).
- The attacker sees the encodings (full filters, or one segment) and nothing else, and links by
  frequency only: an encoding pattern seen ``f`` times can correspond to any plaintext value that occurs
  ``f`` times in G (frequency alignment; identical plaintexts encode identically, so the true value always
  has the same frequency unless different plaintexts collide on the encoding).
- ``n_g(r)`` = number of G records whose plaintext value occurs exactly ``f(r)`` times, where ``f(r)`` is
  the frequency of r's encoding pattern; P_s(r) = 1 / n_g(r), or 0 when no plaintext value has that
  frequency (the attack cannot align that pattern).
- ``aligned_correctly`` is the share of records whose true plaintext value is among their candidates
  (its frequency equals that of their encoding): the attack's suspicion is then right.

So DR_Mark counts records whose encoding occurs once when exactly one plaintext value in G is unique: a
pure frequency attack rarely singles people out when many are unique; the insider attack (insider.py) is
the strong one. This measure answers "how much does frequency alone give away", as in the source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from party.audit.stats import Rate
from party.audit.uniqueness import Codes, crowd_sizes, row_codes


@dataclass(frozen=True)
class FrequencyRisk:
    """Disclosure risk of a frequency linkage attack on one kind of encoding."""

    records: int
    dr_mean: float
    dr_max: float
    dr_mark: Rate  # records with P_s = 1
    aligned_correctly: Rate

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "dr_mean": self.dr_mean,
            "dr_max": self.dr_max,
            "dr_mark": self.dr_mark.to_dict(),
            "aligned_correctly": self.aligned_correctly.to_dict(),
        }


def probability_of_suspicion(plain: Codes, encoded: Codes) -> tuple[np.ndarray, np.ndarray]:
    """P_s per record and whether the record's true value is among its candidates.

    ``plain`` are the codes of each record's plaintext value (its G value), ``encoded`` the codes of its
    encoding pattern; both over the same n records in the same order.
    """
    if plain.codes.shape != encoded.codes.shape:
        raise ValueError("plaintext and encoding codes must cover the same records")
    n = plain.codes.size
    if n == 0:
        return np.zeros(0), np.zeros(0, dtype=bool)
    f_plain = crowd_sizes(plain)  # frequency of each record's plaintext value in G
    f_enc = crowd_sizes(encoded)
    # records in G per plaintext frequency f: f * (number of plaintext values with frequency f)
    records_at_freq = np.bincount(f_plain, minlength=n + 1)
    n_g = records_at_freq[f_enc]
    ps = np.where(n_g > 0, 1.0 / np.maximum(n_g, 1), 0.0)
    return ps, f_plain == f_enc


def frequency_risk(plain: Codes, encoded: Codes) -> FrequencyRisk:
    """DR_Mean, DR_Max, DR_Mark of the frequency attack (see the module docstring)."""
    ps, ok = probability_of_suspicion(plain, encoded)
    n = int(ps.size)
    return FrequencyRisk(
        records=n,
        dr_mean=float(ps.mean()) if n else 0.0,
        dr_max=float(ps.max()) if n else 0.0,
        dr_mark=Rate(int(np.count_nonzero(ps == 1.0)), n),
        aligned_correctly=Rate(int(np.count_nonzero(ok)), n),
    )


def frequency_risk_rows(plain: Codes, rows: np.ndarray) -> FrequencyRisk:
    """frequency_risk with the encodings given as packed bit rows (filters or segments)."""
    return frequency_risk(plain, row_codes(rows))
