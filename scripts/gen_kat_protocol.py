"""Write tests/data/kat_protocol.json: known-answer vectors for every artefact of the pprl.v1 protocol.

    .venv/bin/python scripts/gen_kat_protocol.py            # (re)write the file
    .venv/bin/python scripts/gen_kat_protocol.py --check    # exit 1 if the file differs

Everything is computed here by short reference code written from docs/protocol.md and
docs/encoding.md, importing nothing from the project: filters and blocking digests by the plain
encoder below (only what SCHEMA uses: NFKC + casefold + punctuation removal + whitespace collapse,
bigrams, hmac-sha256-random, HKDF keys, soundex from jellyfish and year blocking), and the protocol
steps (common blocks, pseudonym assignment, segments, candidate enumeration with segment filtering
and c_i, ring sums with masks, Dice, classification, per-party results) by plain-Python integer
code, where a filter is a Python int whose bit p is filter bit p. The test ``tests/conformance/test_kat_protocol.py`` runs
the production encoder, the PartyEngine (every kernel), the wire encoder, the parameters digest and
the key confirmation on the same inputs and requires identical output, so the file pins behaviour.

Randomness. A party's random draws (pseudonyms, the initiator's masks) come from a deterministic
test stream: ``SHA-256(seed || ctr_be32)`` for ctr = 0, 1, ... concatenated, where seed is
``"<vector>/<party>"`` in UTF-8. Pseudonyms are the first 8*n bytes read as little-endian uint64,
the i-th going to the i-th record in a common block in table order; the initiator's c masks are the
next 8*m bytes and its x masks the 8*m after those (m = its surviving sets). Production nodes draw
the same quantities from the OS CSPRNG; only their values differ.

Regenerate only for a deliberate format change (which also bumps the parameters version).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac as std_hmac
import itertools
import json
import pathlib
import re
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import jellyfish
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

ROOT = pathlib.Path(__file__).resolve().parents[1]
KAT_PATH = ROOT / "tests" / "data" / "kat_protocol.json"
MASK64 = 2**64 - 1
SECRET = bytes(range(100, 132))
RUN_ID = "0123456789abcdef0123456789abcdef"

SCHEMA: dict[str, Any] = {
    "version": 1,
    "l": 195,  # P = 3 -> 65-bit segments: every segment straddles a word boundary
    "hashing": {"scheme": "hmac-sha256-random", "k": 4},
    "features": [
        {"identifier": "given_name", "comparison": {"type": "ngram", "n": 2}},
        {"identifier": "surname", "comparison": {"type": "ngram", "n": 2}},
        {
            "identifier": "dob",
            "comparison": {"type": "ngram", "n": 2, "padding": False},
            "strategy": {"bitsPerToken": 3},
        },
    ],
    "blocking": [
        {"name": "soundex_surname", "parts": [{"field": "surname", "function": "soundex"}]},
        {"name": "yob", "parts": [{"field": "dob", "function": "year"}]},
    ],
}

PARTIES = ("party-a", "party-b", "party-c")
RECORDS: dict[str, list[dict[str, str]]] = {
    "party-a": [
        {"rec_id": "a1", "given_name": "Margaret", "surname": "Thompson", "dob": "1961-04-12"},
        {"rec_id": "a2", "given_name": "Rajesh", "surname": "Patel", "dob": "1985-11-30"},
        {"rec_id": "a3", "given_name": "Thomas", "surname": "Thomsen", "dob": "1961-09-02"},
        {"rec_id": "a4", "given_name": "Ann", "surname": "Lee", "dob": ""},
    ],
    "party-b": [
        {"rec_id": "b1", "given_name": "Rajesh", "surname": "Patil", "dob": "1985-11-30"},
        {"rec_id": "b2", "given_name": "Margaret", "surname": "Thompson", "dob": "1961-04-12"},
        {"rec_id": "b3", "given_name": "Maria", "surname": "Tomson", "dob": "1955-05-05"},
    ],
    "party-c": [
        {"rec_id": "c1", "given_name": "Margret", "surname": "Thompson", "dob": "1961-04-12"},
        {"rec_id": "c2", "given_name": "Rajesh", "surname": "Patel", "dob": "1985-11-03"},
        {"rec_id": "c3", "given_name": "Tom", "surname": "Thomsen", "dob": "1961-02-09"},
        {"rec_id": "c4", "given_name": "Margaret", "surname": "Thompson", "dob": "1961-04-21"},
    ],
}

# Exact duplicates (a5 = a1, b4 = b2) make candidate sets with equal Dice: the one-to-one rule must
# break those ties by the sets' pseudonym tuples, smaller first.
RECORDS_TIES: dict[str, list[dict[str, str]]] = {
    "party-a": [*RECORDS["party-a"], {**RECORDS["party-a"][0], "rec_id": "a5"}],
    "party-b": [*RECORDS["party-b"], {**RECORDS["party-b"][1], "rec_id": "b4"}],
    "party-c": RECORDS["party-c"],
}

VECTORS: list[dict[str, Any]] = [
    {"name": "no-filter", "match_threshold": 0.75, "segment_threshold": 0.0, "one_to_one": False},
    {"name": "filter-1to1", "match_threshold": 0.75, "segment_threshold": 0.65, "one_to_one": True},
    {
        "name": "sub-blocks",
        "match_threshold": 0.75,
        "segment_threshold": 0.0,
        "one_to_one": False,
        "max_block_size": 1,
    },
    {
        "name": "ties-1to1",
        "match_threshold": 0.75,
        "segment_threshold": 0.0,
        "one_to_one": True,
        "records": RECORDS_TIES,
    },
]


# -- primitives written from the specification -----------------------------------------------


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def key_confirmation(secret: bytes, run_id: str, digest: str) -> bytes:
    info = b"pprl.v1 key confirmation"
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"pprl.v1", info=info).derive(secret)
    return std_hmac.new(
        key, info + b"|" + run_id.encode() + b"|" + digest.encode(), "sha256"
    ).digest()


class Stream:
    """The deterministic test stream; successive calls return successive bytes."""

    def __init__(self, seed: str):
        self.seed = seed.encode("utf-8")
        self.buf = b""
        self.ctr = 0

    def __call__(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.buf += hashlib.sha256(self.seed + self.ctr.to_bytes(4, "big")).digest()
            self.ctr += 1
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def u64s(data: bytes) -> list[int]:
    return [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8)]


def words(bits: int) -> int:
    return (bits + 63) // 64


def hex_row(value: int, bits: int) -> str:
    """bits.row_to_hex: the packed row's little-endian bytes."""
    return value.to_bytes(8 * words(bits), "little").hex()


def packed_u64(values: Sequence[int]) -> str:
    return b"".join(v.to_bytes(8, "little") for v in values).hex()


def packed_i32(values: Sequence[int]) -> str:
    return b"".join(v.to_bytes(4, "little", signed=True) for v in values).hex()


def popcount(x: int) -> int:
    return bin(x).count("1")


def sub_blocks(block: list[list[int]], cap: int | None) -> list[list[list[int]]]:
    """Capped sub-blocking: party j's members (ordered by pseudonym) cut into k_j = ceil(n_j / C)
    chunks (rank r -> chunk r * k_j // n_j); sub-block s takes chunk s mod k_j of every party."""
    if cap is None or all(len(m) <= cap for m in block):
        return [block]
    ks = [max(1, -(-len(m) // cap)) for m in block]
    chunks = [
        [[r for rank, r in enumerate(m) if rank * k // len(m) == c] for c in range(k)]
        for m, k in zip(block, ks, strict=True)
    ]
    return [[chunks[j][s % ks[j]] for j in range(len(block))] for s in range(max(ks))]


def keep_partial(k: int, c: int, s: int, threshold: float) -> bool:
    """Segment filter: keep a k-record partial set iff k*c >= s_m*s (IEEE double)."""
    return float(k * c) >= threshold * float(s)


# -- the encoder, for SCHEMA only (docs/encoding.md) ---------------------------------------------


def hkdf_key(purpose: str, name: str) -> bytes:
    """HKDF-SHA256(secret, salt "pprl-linkage/v1", info "pprl/v1/<purpose>/<name>"), 32 bytes."""
    info = f"pprl/v1/{purpose}/{name}".encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"pprl-linkage/v1", info=info).derive(
        SECRET
    )


def normalised(value: str) -> str:
    """Default normalisation: NFKC, casefold, drop Unicode P*/S* characters, collapse whitespace."""
    s = unicodedata.normalize("NFKC", value).casefold()
    s = "".join(ch for ch in s if unicodedata.category(ch)[0] not in "PS")
    return " ".join(s.split())


def bigrams(value: str, padding: bool) -> list[str]:
    """Distinct 2-grams in order of first occurrence; padding adds one "_" at each end."""
    s = normalised(value)
    if not s:
        return []
    if padding:
        s = "_" + s + "_"
    grams = [s] if len(s) <= 2 else [s[i : i + 2] for i in range(len(s) - 1)]
    return list(dict.fromkeys(grams))


def random_positions(key: bytes, gram: str, nbits: int, k: int) -> list[int]:
    """hmac-sha256-random: big-endian 32-bit words of HMAC(key, ctr_be32 || gram), rejection below
    the largest multiple of nbits, reduced mod nbits, until k positions."""
    limit = 2**32 - 2**32 % nbits
    out: list[int] = []
    ctr = 0
    while len(out) < k:
        block = std_hmac.new(key, ctr.to_bytes(4, "big") + gram.encode("utf-8"), "sha256").digest()
        words = [int.from_bytes(block[i : i + 4], "big") for i in range(0, 32, 4)]
        out.extend(w % nbits for w in words if w < limit)
        ctr += 1
    return out[:k]


def encode_filter(row: Mapping[str, str]) -> int:
    """The record's CLK as an int (bit p = filter bit p); k from bitsPerToken, else hashing.k."""
    assert SCHEMA["hashing"]["scheme"] == "hmac-sha256-random" and "hardening" not in SCHEMA
    nbits = SCHEMA["l"]
    value = 0
    for feature in SCHEMA["features"]:
        name = feature["identifier"]
        assert feature["comparison"] == {"type": "ngram", "n": 2, **feature["comparison"]}
        k = feature.get("strategy", {}).get("bitsPerToken", SCHEMA["hashing"]["k"])
        key = hkdf_key("field/hmac-sha256-random", name)
        for gram in bigrams(row[name], feature["comparison"].get("padding", True)):
            for pos in random_positions(key, gram, nbits, k):
                value |= 1 << pos
    return value


def cbc_mac_digest(key: bytes, parts: Sequence[str]) -> int:
    """C_0 = 0, C_i = AES-256_key(C_{i-1} xor SHA-256(UTF-8 part_i)[0:16]); bytes 0-7 of C_m,
    little-endian, 0 -> 1 (hashing.py, scheme sha256-aes256-cbcmac/1)."""
    c = bytes(16)
    for part in parts:
        x = hashlib.sha256(part.encode("utf-8")).digest()[:16]
        enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
        c = enc.update(bytes(a ^ b for a, b in zip(c, x, strict=True))) + enc.finalize()
    return int.from_bytes(c[:8], "little") or 1


def blocking_digests(row: Mapping[str, str]) -> list[int]:
    """Per blocking key: CBC-MAC with AES-256 (key HKDF "blocking-prf"/name) over the blocks
    SHA-256(part)[0:16], first 8 bytes little-endian, 0 -> 1; 0 when a part is empty. soundex: of the normalised value's
    letters; year: the first stand-alone 4-digit run of the raw value."""
    out = []
    for spec in SCHEMA["blocking"]:
        parts = []
        for part in spec["parts"]:
            raw = row[part["field"]]
            if part["function"] == "soundex":
                letters = "".join(re.findall(r"[^\W\d_]+", normalised(raw)))
                parts.append(jellyfish.soundex(letters) if letters else "")
            else:
                assert part["function"] == "year"
                m = re.search(r"(?<!\d)(\d{4})(?!\d)", raw.strip())
                parts.append(m.group(1) if m else "")
        if not all(parts):
            out.append(0)
            continue
        out.append(cbc_mac_digest(hkdf_key("blocking-prf", spec["name"]), parts))
    return out


# -- one vector --------------------------------------------------------------------------------


def build_vector(spec: Mapping[str, Any]) -> dict[str, Any]:
    name = spec["name"]
    records = spec.get("records", RECORDS)
    l_bits = SCHEMA["l"]
    p = len(PARTIES)
    seg = l_bits // p
    params_obj = {
        "version": 1,
        "parties": list(PARTIES),
        "schema": SCHEMA,
        "match_threshold": spec["match_threshold"],
        "segment_threshold": spec["segment_threshold"],
        "one_to_one": spec["one_to_one"],
        "max_block_size": spec.get("max_block_size"),
        # A parameters file without "target" means "any" (docs/protocol.md); these vectors are
        # target all, whose canonical object leaves "target" out.
        "target": "all",
    }
    canonical = canonical_json({k: v for k, v in params_obj.items() if k != "target"})
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    # Encoding (the plain encoder above): filters as ints, popcounts, digests.
    filters: list[list[int]] = []
    digests: list[list[list[int]]] = []
    for party in PARTIES:
        fs, ds = [], []
        for row in records[party]:
            fs.append(encode_filter(row))
            ds.append(blocking_digests(row))
        filters.append(fs)
        digests.append(ds)
    distinct = [sorted({d for row in ds for d in row if d}) for ds in digests]
    common = sorted(set.intersection(*(set(d) for d in distinct)))
    cset = set(common)

    # Pseudonyms: records in a common block, in table order, from each party's stream.
    streams = [Stream(f"{name}/{party}") for party in PARTIES]
    shared: list[list[int]] = []  # table rows in common blocks, sorted by pseudonym
    pseud_of: list[dict[int, int]] = []  # table row -> pseudonym
    out_digests: list[dict[int, list[int]]] = []
    for i in range(p):
        rows = [r for r, ds in enumerate(digests[i]) if any(d in cset for d in ds)]
        values = u64s(streams[i](8 * len(rows)))
        assert len(set(values)) == len(values) and 0 not in values
        pseud_of.append(dict(zip(rows, values, strict=True)))
        shared.append(sorted(rows, key=lambda r, i=i: pseud_of[i][r]))
        out_digests.append({r: [d if d in cset else 0 for d in digests[i][r]] for r in rows})

    def segment(i: int, r: int, j: int) -> int:
        return (filters[i][r] >> (j * seg)) & ((1 << seg) - 1)

    shares = []
    for i, j in itertools.product(range(p), repeat=2):
        if i == j:
            continue
        rows = shared[i]
        ps = [pseud_of[i][r] for r in rows]
        ds = [out_digests[i][r] for r in rows]
        # on the wire: each digest's index in the sorted common blocks, -1 for 0 (not common)
        at = [[common.index(d) if d else -1 for d in row] for row in ds]
        ss = [segment(i, r, j) for r in rows]
        shares.append(
            {
                "source": i,
                "target": j,
                "segment_bits": seg,
                "pseudonyms": [str(v) for v in ps],
                "block_positions": at,
                "segments_hex": [hex_row(s, seg) for s in ss],
                "payload_hex": {
                    "pseudonyms": packed_u64(ps),
                    "block_positions": packed_i32([x for row in at for x in row]),
                    "segments": "".join(hex_row(s, seg) for s in ss),
                },
            }
        )

    # Candidate sets: one record per party in a common block, de-duplicated across blocks.
    members = [
        {b: [r for r in shared[i] if b in out_digests[i][r]] for b in common} for i in range(p)
    ]
    cap = spec.get("max_block_size")
    sets: set[tuple[int, ...]] = set()
    uncapped: set[tuple[int, ...]] = set()
    enumerated = 0  # with multiplicity: a set found in two (sub-)blocks is enumerated twice
    for b in common:
        block = [members[i][b] for i in range(p)]  # each ordered by pseudonym
        uncapped.update(itertools.product(*block))
        for sub in sub_blocks(block, cap):
            size = 1
            for rows in sub:
                size *= len(rows)
            enumerated += size
            sets.update(itertools.product(*sub))
    enumeration = sorted(sets)

    def key(combo: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(pseud_of[i][r] for i, r in enumerate(combo))

    comparison = []
    survivors: list[set[tuple[int, ...]]] = []
    c_of: list[dict[tuple[int, ...], int]] = []
    for i in range(p):
        kept: set[tuple[int, ...]] = set()
        cs: dict[tuple[int, ...], int] = {}
        for combo in enumeration:
            acc = segment(0, combo[0], i)
            s = popcount(acc)
            ok = True
            for j in range(1, p):
                sj = segment(j, combo[j], i)
                acc &= sj
                s += popcount(sj)
                if not keep_partial(j + 1, popcount(acc), s, spec["segment_threshold"]):
                    ok = False
                    break
            cs[combo] = popcount(acc) if ok else -1
            if ok:
                kept.add(combo)
        survivors.append(kept)
        c_of.append(cs)
        listed = sorted(kept, key=key)
        comparison.append(
            {
                "party": i,
                "candidate_sets_enumerated": enumerated,
                "candidate_sets": len(enumeration),
                "survivors": [[str(v) for v in key(c)] for c in listed],
                "c": [cs[c] for c in listed],
            }
        )

    # Ring: hop h is sent by party h; it keeps the sets party h kept too and adds c_h, x_h.
    x = [[popcount(f) for f in fs] for fs in filters]
    current = sorted(survivors[0], key=key)
    m0 = len(current)
    masks_c = u64s(streams[0](8 * m0))
    masks_x = u64s(streams[0](8 * m0))
    mask_of = {c: (masks_c[k], masks_x[k]) for k, c in enumerate(current)}
    acc_c = {c: (mask_of[c][0] + c_of[0][c]) & MASK64 for c in current}
    acc_x = {c: (mask_of[c][1] + x[0][c[0]]) & MASK64 for c in current}
    hops = []

    def hop_record(h: int) -> dict[str, Any]:
        return {
            "hop": h,
            "candidates": [[str(v) for v in key(c)] for c in current],
            "c_masked": [str(acc_c[c]) for c in current],
            "x_masked": [str(acc_x[c]) for c in current],
        }

    hops.append(hop_record(0))
    for h in range(1, p):
        current = [c for c in current if c in survivors[h]]
        for c in current:
            acc_c[c] = (acc_c[c] + c_of[h][c]) & MASK64
            acc_x[c] = (acc_x[c] + x[h][c[h]]) & MASK64
        hops.append(hop_record(h))
    sum_c = [(acc_c[c] - mask_of[c][0]) & MASK64 for c in current]
    sum_x = [(acc_x[c] - mask_of[c][1]) & MASK64 for c in current]
    sims = [float(p * sc) / float(sx) if sx else 0.0 for sc, sx in zip(sum_c, sum_x, strict=True)]

    # Classification: threshold, optional greedy one-to-one, linkage ids in candidate order.
    above = [k for k, s in enumerate(sims) if s >= spec["match_threshold"]]
    chosen = above
    if spec["one_to_one"]:
        used: list[set[int]] = [set() for _ in range(p)]
        picked = []
        for k in sorted(above, key=lambda k: (-sims[k], key(current[k]))):
            if any(current[k][j] in used[j] for j in range(p)):
                continue
            for j in range(p):
                used[j].add(current[k][j])
            picked.append(k)
        chosen = sorted(picked)
    results = []
    for j in range(p):
        results.append(
            {
                "party": j,
                "linkage_ids": [str(n + 1) for n in range(len(chosen))],
                "similarities": [sims[k] for k in chosen],
                "pseudonyms": [str(key(current[k])[j]) for k in chosen],
                "rows": [
                    {
                        "linkage_id": f"L{n + 1:08d}",
                        "similarity": sims[k],
                        "record_id": records[PARTIES[j]][current[k][j]]["rec_id"],
                    }
                    for n, k in enumerate(chosen)
                ],
            }
        )
    oracle = []  # full-filter Dice of every candidate set of the uncapped blocks
    for combo in sorted(uncapped):
        full_and = filters[0][combo[0]]
        for j in range(1, p):
            full_and &= filters[j][combo[j]]
        total = sum(x[j][combo[j]] for j in range(p))
        oracle.append(
            {
                "records": list(combo),
                "dice": float(p * popcount(full_and)) / float(total) if total else 0.0,
            }
        )

    return {
        "name": name,
        "parameters": params_obj,
        "parameters_canonical_json": canonical,
        "parameters_digest": digest,
        "run_id": RUN_ID,
        "key_confirmation_hex": key_confirmation(SECRET, RUN_ID, digest).hex(),
        "filter_bits": l_bits,
        "segment_bits": seg,
        "parties": [
            {
                "name": PARTIES[i],
                "records": records[PARTIES[i]],
                "filters_hex": [hex_row(f, l_bits) for f in filters[i]],
                "popcounts": x[i],
                "block_digests": [[str(d) for d in row] for row in digests[i]],
                "distinct_block_digests": [str(d) for d in distinct[i]],
                "record_pseudonyms": [
                    str(pseud_of[i].get(r, 0)) for r in range(len(records[PARTIES[i]]))
                ],
            }
            for i in range(p)
        ],
        "common_blocks": [str(d) for d in common],
        "shares": shares,
        "comparison": comparison,
        "ring": {
            "masks_c": [str(v) for v in masks_c],
            "masks_x": [str(v) for v in masks_x],
            "hops": hops,
            "final_candidates": [[str(v) for v in key(c)] for c in current],
            "sum_c": sum_c,
            "sum_x": sum_x,
            "dice": sims,
            "payload_hex_hop0": {
                "candidates": packed_u64([v for c in hops[0]["candidates"] for v in map(int, c)]),
                "c_masked": packed_u64([int(v) for v in hops[0]["c_masked"]]),
                "x_masked": packed_u64([int(v) for v in hops[0]["x_masked"]]),
            },
        },
        "classification": {
            "sets_summed": len(current),
            "above_threshold": len(above),
            "matches": len(chosen),
            "candidates": [[str(v) for v in key(current[k])] for k in chosen],
            "similarities": [sims[k] for k in chosen],
            "linkage_ids": [str(n + 1) for n in range(len(chosen))],
        },
        "results": results,
        "oracle": oracle,
    }


def build() -> dict[str, Any]:
    return {
        "about": (
            "Known-answer vectors of the pprl.v1 protocol (docs/protocol.md), written by "
            "scripts/gen_kat_protocol.py from reference code and checked against the implementation "
            "by tests/conformance/test_kat_protocol.py. uint64 values are decimal strings; bit rows "
            "are bits.row_to_hex (little-endian bytes of the packed words); payload_hex fields are "
            "the exact bytes of the corresponding protobuf bytes fields. Random draws come from the "
            "deterministic stream described in the generator's docstring; record indices are "
            "positions in each party's records list."
        ),
        "secret_hex": SECRET.hex(),
        "vectors": [build_vector(v) for v in VECTORS],
    }


def render(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file")
    ap.add_argument("--out", type=pathlib.Path, default=KAT_PATH)
    args = ap.parse_args(argv)
    text = render(build())
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'DIFFERS from the reference computation'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
