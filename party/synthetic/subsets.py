"""Synthetic data for target "any": entities present at random subsets of the parties.

`generate_subsets(P, n, single=s, corruption=c, seed)` fills every party with exactly n records.
Entities are drawn one after another: with probability s an entity is at one party only, otherwise
at k parties, k uniform in 2..P; its parties are drawn uniformly among those not yet full (k is
cut to how many still have room). People are drawn as in ``party.synthetic.generator`` (same lists,
same households option). A fraction c of the entities at k >= 2 parties is corrupted: at j of its
k parties, j uniform in 1..k-1 (so at least one copy stays clean), each copy with 1..max_errors
errors. Rows are shuffled per party; deterministic given the seed.
"""

from __future__ import annotations

import numpy as np

from party.synthetic.corrupt import Corruptor
from party.synthetic.generator import (
    COLUMNS,
    GenerationError,
    SyntheticDataset,
    SyntheticTable,
    _people,
)
from party.synthetic.truth import GroundTruth


def _memberships(rng: np.random.Generator, parties: int, n: int, single: float) -> list[list[int]]:
    room = [n] * parties
    out: list[list[int]] = []
    while True:
        open_parties = [p for p in range(parties) if room[p] > 0]
        if not open_parties:
            return out
        k = 1 if rng.random() < single else int(rng.integers(2, parties + 1))
        k = min(k, len(open_parties))
        chosen = sorted(int(v) for v in rng.choice(open_parties, size=k, replace=False))
        for p in chosen:
            room[p] -= 1
        out.append(chosen)


def generate_subsets(
    parties: int,
    records_per_party: int,
    single: float = 0.3,
    corruption: float = 0.4,
    seed: int = 0,
    *,
    max_errors: int = 2,
    households: float = 0.0,
) -> SyntheticDataset:
    """Generate P tables whose entities span random subsets of the parties (module docstring)."""
    problems = []
    if not isinstance(parties, int) or parties < 2:
        problems.append(f"parties must be an integer >= 2, got {parties!r}")
    if not isinstance(records_per_party, int) or records_per_party < 1:
        problems.append(f"records_per_party must be an integer >= 1, got {records_per_party!r}")
    for name, value in (("single", single), ("corruption", corruption), ("households", households)):
        if not 0.0 <= value <= 1.0:
            problems.append(f"{name} must be in [0, 1], got {value!r}")
    if not isinstance(max_errors, int) or max_errors < 1:
        problems.append(f"max_errors must be an integer >= 1, got {max_errors!r}")
    if problems:
        raise GenerationError("invalid generation parameters: " + "; ".join(problems))
    people_ss, member_ss, corrupt_ss, shuffle_ss = np.random.SeedSequence(seed).spawn(4)
    members = _memberships(np.random.default_rng(member_ss), parties, records_per_party, single)
    people = _people(np.random.default_rng(people_ss), len(members), households)
    crng = np.random.default_rng(corrupt_ss)
    plan: list[dict[int, int]] = [{} for _ in range(parties)]  # party -> entity -> errors
    corrupted_entities = 0
    for e, at in enumerate(members):
        if len(at) >= 2 and crng.random() < corruption:
            corrupted_entities += 1
            j = int(crng.integers(1, len(at)))
            for p in crng.choice(at, size=j, replace=False).tolist():
                plan[int(p)][e] = int(crng.integers(1, max_errors + 1))
    corruptor = Corruptor(int(crng.integers(0, 2**63)))
    srng = np.random.default_rng(shuffle_ss)
    tables, flags_all, codes = [], [], []
    for p in range(parties):
        ents = np.array([e for e, at in enumerate(members) if p in at], dtype=np.int64)
        ents = ents[srng.permutation(ents.size)]
        cols: dict[str, list[str]] = {"rec_id": [f"p{p}r{i + 1}" for i in range(ents.size)]}
        for name in COLUMNS[1:]:
            cols[name] = people[name][ents].tolist()
        flags = np.zeros(ents.size, dtype=bool)
        for i, e in enumerate(ents.tolist()):
            if e in plan[p]:
                new = corruptor.corrupt({c: cols[c][i] for c in COLUMNS[1:]}, plan[p][e])
                for c in COLUMNS[1:]:
                    cols[c][i] = new[c]
                flags[i] = True
        tables.append(SyntheticTable(cols))
        flags_all.append(flags)
        codes.append(ents)
    truth = GroundTruth(
        record_ids=tuple(tuple(t.record_ids) for t in tables),
        entity_ids=tuple(codes),
        labels=tuple(f"e{i}" for i in range(len(members))),
    )
    sizes = np.bincount([len(at) for at in members], minlength=parties + 1)
    params: dict[str, object] = {
        "parties": parties,
        "records_per_party": records_per_party,
        "single": single,
        "corruption": corruption,
        "seed": seed,
        "max_errors": max_errors,
        "households": households,
        "entities_by_party_count": sizes.tolist(),
        "corrupted_entities": corrupted_entities,
        "corrupted_records_per_party": [int(f.sum()) for f in flags_all],
    }
    return SyntheticDataset(tables, truth, flags_all, params)
