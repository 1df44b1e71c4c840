"""Write tests/data/kat_mpc.json: known-answer vectors for mode mpc3 (share layout and one circuit).

    .venv/bin/python scripts/gen_kat_mpc.py            # (re)write the file
    .venv/bin/python scripts/gen_kat_mpc.py --check    # exit 1 if the file differs

An independent reference: nothing from the project is imported (only ``cryptography`` for AES, and the
random stream of scripts/gen_kat_protocol.py).
Everything is re-derived here from the layouts documented in party/mpc/*.py docstrings, by plain
Python integer code. A shared bit vector is three Python ints (x0, x1, x2), compute party (CP) i
holding (x_i, x_{i+1}); a row of ``n`` uint64 words is the int whose bytes are the words
little-endian (word r = bits 64 r .. 64 r + 63).

Vector "shares": the three input shares each data party sends (filters and count terms), for a
fixed random stream ``SHA-256(seed || ctr_be32)``, ctr = 0, 1, ..., seed = "kat-mpc/<party>"
(``Stream`` of scripts/gen_kat_protocol.py).
Vector "circuit": a whole run of the three CPs with fixed PRF keys on those shares: every round
payload each CP sends (hex), and the outcome (matched sets by pseudonym, Dice, linkage ids).
Vector "any": target any on the same records (party.mpc.pairs): the pair test's count terms (offset
at every party), every round payload of the P = 2 circuit over the pairs of each two parties, and
the matched pairs.
The test tests/unit/mpc/test_kat.py runs party.mpc on the same inputs and requires identical bytes.
Regenerate only for a deliberate format change.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import pathlib
import sys
from fractions import Fraction
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def _protocol_generator():  # type: ignore[no-untyped-def]
    """scripts/gen_kat_protocol.py (its deterministic random stream is shared by both vectors)."""
    path = pathlib.Path(__file__).resolve().parent / "gen_kat_protocol.py"
    spec = importlib.util.spec_from_file_location("gen_kat_protocol", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Stream = _protocol_generator().Stream
OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "kat_mpc.json"
P = 3
L_BITS = 20
S_T = 0.5
BATCHES_IN_FLIGHT = 4  # batches whose rounds interleave (party.mpc.flight)
MASK64 = (1 << 64) - 1
KEYS = [bytes(range(16)), bytes(range(16, 32)), bytes(range(32, 48))]
# one common block (digest 7); two records per party, pseudonyms ascending
PSEUDONYMS = [[0x1111, 0x2222], [0x3333, 0x4444], [0x5555, 0x6666]]
RECORD_BITS = [
    [list(range(6)), []],  # party 0: x = 6, and an empty filter (x_0 = 0)
    [list(range(6)), [0, 1, 2, 10, 11, 12]],  # party 1
    [list(range(6)), [0, 15, 16, 17, 18]],  # party 2
]


# ------------------------------------------------------------------ randomness and threshold
def threshold(p: int, l_bits: int, s_t: float) -> tuple[int, int, int]:
    """(N, D, w): simplest N/D in (largest failing, smallest passing reachable P*c/x]."""
    passing, failing = [], [Fraction(0)]
    for x in range(1, p * l_bits + 1):
        for c in range(0, x // p + 1):
            r = Fraction(p * c, x)
            (passing if float(p * c) / float(x) >= s_t else failing).append(r)
    lo, hi = max(failing), min(passing)
    d = 1
    while True:  # smallest denominator with a numerator in (lo, hi]
        n = math.floor(hi * d)
        if Fraction(n, d) > lo:
            break
        d += 1
    w = max((p * d * l_bits).bit_length() + 1, (n * p * l_bits).bit_length() + 2)
    return n, d, w


# ------------------------------------------------------------------ sharing
def share(values: list[int], nbits: int, rnd: Stream) -> list[list[int]]:
    """Three shares of each value: s0, s1 drawn as whole arrays (n * words * 8 bytes each)."""
    words = -(-nbits // 64)
    mask = (1 << nbits) - 1
    draws = []
    for _ in range(2):
        raw = rnd(8 * words * len(values))
        draws.append(
            [
                int.from_bytes(raw[8 * words * i : 8 * words * (i + 1)], "little") & mask
                for i in range(len(values))
            ]
        )
    s0, s1 = draws
    return [s0, s1, [v ^ a ^ b for v, a, b in zip(values, s0, s1, strict=True)]]


def hexrows(values: list[int], nbits: int) -> list[str]:
    words = -(-nbits // 64)
    return [v.to_bytes(8 * words, "little").hex() for v in values]


# ------------------------------------------------------------------ the three compute parties
def in_flight_order(sent: list[list[tuple[int, int, str]]]) -> list[list[str]]:
    """Each CP's payloads in the order it sends them: batches in windows of BATCHES_IN_FLIGHT
    consecutive batch numbers; within a window round r of every batch (in batch order) before
    round r + 1 of any."""
    return [
        [h for _, _, h in sorted(cp, key=lambda t: (t[0] // BATCHES_IN_FLIGHT, t[1], t[0]))]
        for cp in sent
    ]


def keystream(key: bytes, batch: int, number: int, nbytes: int) -> bytes:
    block = batch.to_bytes(4, "big") + number.to_bytes(4, "big") + bytes(8)
    enc = Cipher(algorithms.AES(key), modes.CTR(block)).encryptor()
    return enc.update(bytes(nbytes)) + enc.finalize()


class Sim:
    """The three CPs at once; a shared vector is [x0, x1, x2] of ints of ``bits`` bits each."""

    def __init__(self) -> None:
        self.batch = 0
        self.number = 0
        self.sent: list[list[tuple[int, int, str]]] = [[], [], []]  # (batch, round, hex)

    def and_layer(self, gates: list[tuple[list[int], list[int]]], bits: int) -> list[list[int]]:
        """AND of each (x, y) gate; payload = z_i of all gates concatenated (each bits/8 bytes)."""
        nbytes = bits // 8 * len(gates)
        ks = [keystream(KEYS[i], self.batch, self.number, nbytes) for i in range(3)]
        alpha = [
            [
                int.from_bytes(ks[i][g * bits // 8 : (g + 1) * bits // 8], "little")
                ^ int.from_bytes(ks[(i + 1) % 3][g * bits // 8 : (g + 1) * bits // 8], "little")
                for g in range(len(gates))
            ]
            for i in range(3)
        ]
        out = []
        for g, (x, y) in enumerate(gates):
            z = [
                (x[i] & y[i]) ^ (x[i] & y[(i + 1) % 3]) ^ (x[(i + 1) % 3] & y[i]) ^ alpha[i][g]
                for i in range(3)
            ]
            out.append(z)
        for i in range(3):
            payload = b"".join(z[i].to_bytes(bits // 8, "little") for z in out)
            self.sent[i].append((self.batch, self.number, payload.hex()))
        self.number += 1
        return out

    def open(self, x: list[int], nbytes: int) -> int:
        """Each CP sends its second share x_{i+1}."""
        for i in range(3):
            self.sent[i].append(
                (self.batch, self.number, x[(i + 1) % 3].to_bytes(nbytes, "little").hex())
            )
        self.number += 1
        return x[0] ^ x[1] ^ x[2]

    def compress(self, cols: list[list[list[int]]], width: int, bits: int) -> list[list[int]]:
        """Wallace layers, then a Kogge-Stone adder of the <= 2 rows left, mod 2^width."""
        cols = [list(c) for c in cols[:width]] + [[] for _ in range(width - len(cols))]
        cols = self.wallace(cols, width, bits)
        zero = [0, 0, 0]
        a = [col[0] if len(col) >= 1 else zero for col in cols]
        b = [col[1] if len(col) >= 2 else zero for col in cols]
        p = [[a[k][i] ^ b[k][i] for i in range(3)] for k in range(width)]
        top = width - 1
        if top == 0:
            return p
        g = self.and_layer([(a[k], b[k]) for k in range(top)], bits)
        big_p = [list(p[k]) for k in range(top)]
        d = 1
        while d < top:
            more = 2 * d < top
            gates = [(big_p[k], g[k - d]) for k in range(d, top)]
            if more:
                gates += [(big_p[k], big_p[k - d]) for k in range(d, top)]
            z = self.and_layer(gates, bits)
            n = top - d
            g = g[:d] + [[g[k][i] ^ z[k - d][i] for i in range(3)] for k in range(d, top)]
            if more:
                big_p = big_p[:d] + z[n:]
            d *= 2
        return [p[0]] + [[p[k][i] ^ g[k - 1][i] for i in range(3)] for k in range(1, width)]

    def wallace(self, cols: list[list[list[int]]], width: int, bits: int) -> list[list[list[int]]]:
        while any(len(c) >= 3 for c in cols):
            gates, plan = [], []
            for k, col in enumerate(cols):
                f = len(col) // 3
                if not f:
                    continue
                a, b, c = col[:f], col[f : 2 * f], col[2 * f : 3 * f]
                for r in range(f):
                    gates.append(
                        (
                            [a[r][i] ^ c[r][i] for i in range(3)],
                            [b[r][i] ^ c[r][i] for i in range(3)],
                        )
                    )
                plan.append((k, f, a, b, c, col[3 * f :]))
            z = self.and_layer(gates, bits)
            own = [list(col) for col in cols]
            carries: list[list[list[int]]] = [[] for _ in cols]
            off = 0
            for k, f, a, b, c, rest in plan:
                own[k] = [[a[r][i] ^ b[r][i] ^ c[r][i] for i in range(3)] for r in range(f)] + rest
                if k + 1 < width:
                    carries[k + 1] += [
                        [z[off + r][i] ^ c[r][i] for i in range(3)] for r in range(f)
                    ]
                off += f
            cols = [own[k] + carries[k] for k in range(width)]
        return cols


def word_to_wires(row: int, padded: int) -> list[int]:
    """Row of ``padded`` words (word r = set r) -> 64 lane wires (wire b, lane r = bit b of word r)."""
    return [sum(((row >> (64 * r + b)) & 1) << r for r in range(padded)) for b in range(64)]


def run_circuit(
    sim: Sim,
    shares: list[dict[str, Any]],
    sets: list[tuple[int, ...]],
    n_bits: int,
    w: int,
    k_mult: int,
) -> dict:
    """One batch: ``sets`` are row tuples into the operands ``shares`` (one per column)."""
    p = len(shares)
    words = -(-n_bits // 64)
    n = len(sets)
    padded = -(-n // 64) * 64
    lanes = padded // 64
    cw = n_bits.bit_length()

    # operands: per party, word-major rows m -> int of padded words (set r -> word r)
    def gathered(j: int) -> list[list[int]]:
        out = []
        for m in range(words):
            v = [0, 0, 0]
            for i in range(3):
                f = shares[j]["filters"][i]
                for r, s in enumerate(sets):
                    v[i] |= ((f[s[j]] >> (64 * m)) & MASK64) << (64 * r)
            out.append(v)
        return out

    ops = [gathered(j) for j in range(p)]
    row_bits = 64 * padded
    while len(ops) > 1:
        pairs = len(ops) // 2
        gates = [(ops[2 * q][m], ops[2 * q + 1][m]) for q in range(pairs) for m in range(words)]
        z = sim.and_layer(gates, row_bits)
        nxt = [z[q * words : (q + 1) * words] for q in range(pairs)]
        if len(ops) % 2:
            nxt.append(ops[-1])
        ops = nxt
    # word-level Wallace, then each word row -> 64 lane wires of the same weight
    word_cols = sim.wallace([ops[0]] + [[] for _ in range(cw - 1)], cw, row_bits)
    bit_cols = []
    for col in word_cols:
        wires: list[list[int]] = []
        for row in col:
            per = [word_to_wires(row[i], padded) for i in range(3)]
            wires += [[per[0][b], per[1][b], per[2][b]] for b in range(64)]
        bit_cols.append(wires)
    lane_bits = 64 * lanes
    c = sim.compress(bit_cols, cw, lane_bits)
    # S = K*c + sum of count terms (column order: c bits by ascending set bit of K, then t_j)
    terms = []
    for j in range(p):
        t = [0, 0, 0]
        for i in range(3):
            for r, s in enumerate(sets):
                t[i] |= shares[j]["counts"][i][s[j]] << (w * r)  # packed per set
        terms.append(t)
    k_bits = [e for e in range(k_mult.bit_length()) if k_mult >> e & 1]
    cols = []
    for k in range(w):
        col = [c[k - e] for e in k_bits if 0 <= k - e < cw]
        for t in terms:
            col.append([sum(((t[i] >> (w * r + k)) & 1) << r for r in range(n)) for i in range(3)])
        cols.append(col)
    s_bits = sim.compress(cols, w, lane_bits)
    top = s_bits[w - 1]
    match_wire = [top[0] ^ (2**lane_bits - 1), top[1], top[2]]  # NOT: flip share 0
    hits = sim.open(match_wire, 8 * lanes)
    matched = [r for r in range(n) if hits >> r & 1]

    def value(i: int, r: int) -> int:
        v = sum(((c[b][i] >> r) & 1) << b for b in range(cw))
        return v | sum(((s_bits[b][i] >> r) & 1) << (cw + b) for b in range(w))

    payload = [b"".join(value(i, r).to_bytes(8, "little") for r in matched) for i in range(3)]
    for i in range(3):
        sim.sent[i].append((sim.batch, sim.number, payload[(i + 1) % 3].hex()))
    return {"sets": sets, "matched": matched, "sent": in_flight_order(sim.sent), "value": value}


def build_any() -> dict[str, Any]:
    """Vector "any": target any, the P = 2 circuit per pair of parties (a, b), a < b, one batch each
    (batch numbers 0, 1, 2), on the same records: count terms of the pair test with the offset at
    every party whose x is 0; shares from seeds "kat-mpc-any/<party>"."""
    n_num, d_den, w = threshold(2, L_BITS, S_T)
    k_mult = 2 * d_den
    filters = [[sum(1 << b for b in bits) for bits in party] for party in RECORD_BITS]
    counts = [[len(bits) for bits in party] for party in RECORD_BITS]
    shares = []
    vectors = []
    for j in range(P):
        terms = [(-n_num * x - ((1 << (w - 2)) if x == 0 else 0)) % (1 << w) for x in counts[j]]
        rnd = Stream(f"kat-mpc-any/{j}")
        f_sh = share(filters[j], L_BITS, rnd)
        c_sh = share(terms, w, rnd)
        shares.append({"filters": f_sh, "counts": c_sh})
        vectors.append({"source": j, "seed": f"kat-mpc-any/{j}", "count_terms": terms})
    sim = Sim()
    cw = L_BITS.bit_length()
    matched = []
    for batch, (a, b) in enumerate(itertools.combinations(range(P), 2)):
        sim.batch, sim.number = batch, 0
        sets = list(itertools.product(range(len(PSEUDONYMS[a])), range(len(PSEUDONYMS[b]))))
        res = run_circuit(sim, [shares[a], shares[b]], sets, L_BITS, w, k_mult)
        for r in res["matched"]:
            v = res["value"](0, r) ^ res["value"](1, r) ^ res["value"](2, r)
            c_val, s_val = v & ((1 << cw) - 1), v >> cw
            s_signed = s_val - (1 << w) if s_val >> (w - 1) else s_val
            x_val = (k_mult * c_val - s_signed) // n_num
            ra, rb = res["sets"][r]
            matched.append(
                {
                    "pair": [a, PSEUDONYMS[a][ra], b, PSEUDONYMS[b][rb]],
                    "common": c_val,
                    "total": x_val,
                    "dice": float(2 * c_val) / float(x_val),
                }
            )
    return {
        "parameters": {"numerator": n_num, "denominator": d_den, "width": w},
        "shares": vectors,
        "sent_hex": in_flight_order(sim.sent),
        "matched_pairs": matched,
    }


def build() -> dict[str, Any]:
    n_num, d_den, w = threshold(P, L_BITS, S_T)
    k_mult = P * d_den
    filters = [[sum(1 << b for b in bits) for bits in party] for party in RECORD_BITS]
    counts = [[len(bits) for bits in party] for party in RECORD_BITS]
    shares: dict[int, dict[str, Any]] = {}
    share_vectors = []
    for j in range(P):
        terms = []
        for x in counts[j]:
            offset = (1 << (w - 2)) if j == 0 and x == 0 else 0
            terms.append((-n_num * x - offset) % (1 << w))
        rnd = Stream(f"kat-mpc/{j}")
        f_sh = share(filters[j], L_BITS, rnd)
        c_sh = share(terms, w, rnd)
        shares[j] = {"filters": f_sh, "counts": c_sh}
        share_vectors.append(
            {
                "source": j,
                "seed": f"kat-mpc/{j}",
                "pseudonyms": PSEUDONYMS[j],
                "block_digests": [[7] for _ in PSEUDONYMS[j]],
                "filters_hex": hexrows(filters[j], L_BITS),
                "counts": counts[j],
                "count_terms": terms,
                "targets": [
                    {
                        "target": t,
                        "filters_hex": [
                            hexrows(f_sh[t], L_BITS),
                            hexrows(f_sh[(t + 1) % 3], L_BITS),
                        ],
                        "counts": [c_sh[t], c_sh[(t + 1) % 3]],
                    }
                    for t in range(3)
                ],
            }
        )
    sets = list(itertools.product(*[range(len(PSEUDONYMS[j])) for j in range(P)]))  # one block
    res = run_circuit(Sim(), [shares[j] for j in range(P)], sets, L_BITS, w, k_mult)
    cw = L_BITS.bit_length()
    outcome = []
    for r in res["matched"]:
        v = res["value"](0, r) ^ res["value"](1, r) ^ res["value"](2, r)
        c_val, s_val = v & ((1 << cw) - 1), v >> cw
        s_signed = s_val - (1 << w) if s_val >> (w - 1) else s_val
        x_val = (k_mult * c_val - s_signed) // n_num
        dice = float(P * c_val) / float(x_val) if x_val else 0.0
        outcome.append(
            {
                "pseudonyms": [PSEUDONYMS[j][res["sets"][r][j]] for j in range(P)],
                "common": c_val,
                "total": x_val,
                "dice": dice,
            }
        )
    outcome.sort(key=lambda m: m["pseudonyms"])
    for i, m in enumerate(outcome):
        m["linkage_id"] = i + 1
    return {
        "description": __doc__.splitlines()[0],
        "parameters": {
            "parties": P,
            "filter_bits": L_BITS,
            "match_threshold": S_T,
            "one_to_one": False,
            "numerator": n_num,
            "denominator": d_den,
            "width": w,
        },
        "shares": share_vectors,
        "circuit": {
            "keys_hex": [k.hex() for k in KEYS],
            "candidate_sets": len(res["sets"]),
            "sent_hex": res["sent"],
            "matches": outcome,
        },
        "any": build_any(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = ap.parse_args()
    text = json.dumps(build(), indent=1) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print("kat_mpc.json is up to date" if same else "kat_mpc.json differs")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
