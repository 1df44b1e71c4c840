"""The encodings file: EncodedRecords + schema digest on disk (written atomically, checksummed).

Format (version 1), all integers little-endian::

    magic            8 bytes   b"PPRLENC1"
    header_len       4 bytes   u32
    header           JSON, UTF-8: {"format": 1, "records": n, "filter_bits": l, "words": w,
                               "blocking_keys": B, "ids_bytes": m, "schema_digest": "<sha256 hex>"}
    filters          n * w * 8 bytes: the rows in the bits.py layout (u64 words, row after row)
    block digests    n * B * 8 bytes: u64, row after row
    record ids       m bytes: a JSON array of n strings, UTF-8
    checksum         32 bytes: SHA-256 of everything before it

The file holds the party's own record ids, so it stays with the party. It is written to a temporary
file in the same directory, flushed and fsynced, then renamed over the target, so an existing file
is never left half-written. Any mismatch on reading raises EncodingsFileError naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from party.encoding import bits
from party.encoding.records import EncodedRecords
from party.errors import PprlError

MAGIC = b"PPRLENC1"
FORMAT_VERSION = 1
_LE = np.dtype("<u8")


class EncodingsFileError(PprlError, ValueError):
    """An encodings file is missing, unreadable, truncated or corrupt."""


def save_encodings(path: str | Path, records: EncodedRecords, schema_digest: str) -> None:
    """Write ``records`` and the schema digest to ``path`` atomically (temp file + rename)."""
    p = Path(path)
    ids = json.dumps(list(records.record_ids), ensure_ascii=False).encode("utf-8")
    header = json.dumps(
        {
            "format": FORMAT_VERSION,
            "records": len(records),
            "filter_bits": records.filter_bits,
            "words": bits.words_for(records.filter_bits),
            "blocking_keys": records.blocking_keys,
            "ids_bytes": len(ids),
            "schema_digest": schema_digest,
        },
        sort_keys=True,
    ).encode("utf-8")
    digest = hashlib.sha256()
    directory = p.parent if str(p.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise EncodingsFileError(
            f"{p}: cannot create a file in {directory} ({exc.strerror})"
        ) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            for part in (
                MAGIC,
                len(header).to_bytes(4, "little"),
                header,
                bits.rows_to_bytes(records.filters),
                np.ascontiguousarray(records.block_digests.astype(_LE, copy=False)).tobytes(),
                ids,
            ):
                digest.update(part)
                fh.write(part)
            fh.write(digest.digest())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise EncodingsFileError(f"{p}: cannot write ({exc.strerror})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_encodings(path: str | Path) -> tuple[EncodedRecords, str]:
    """Read an encodings file; returns (records, schema digest)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise EncodingsFileError(f"encodings file {p}: not found") from None
    except OSError as exc:
        raise EncodingsFileError(f"encodings file {p}: cannot read ({exc.strerror})") from None

    def bad(why: str) -> EncodingsFileError:
        return EncodingsFileError(f"encodings file {p}: {why}")

    if len(data) < len(MAGIC) + 4 + 32 or data[: len(MAGIC)] != MAGIC:
        raise bad("not an encodings file (bad magic or too short)")
    body, checksum = data[:-32], data[-32:]
    if hashlib.sha256(body).digest() != checksum:
        raise bad("checksum mismatch (file is truncated or corrupt)")
    hlen = int.from_bytes(body[8:12], "little")
    try:
        header = json.loads(body[12 : 12 + hlen].decode("utf-8"))
        fmt = header["format"]
        n = int(header["records"])
        nbits = int(header["filter_bits"])
        words = int(header["words"])
        nblock = int(header["blocking_keys"])
        ids_bytes = int(header["ids_bytes"])
        schema_digest = str(header["schema_digest"])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise bad("malformed header") from None
    if fmt != FORMAT_VERSION:
        raise bad(f"unsupported format version {fmt!r} (this program reads {FORMAT_VERSION})")
    if n < 0 or nbits <= 0 or nblock < 0 or ids_bytes < 0 or words != bits.words_for(nbits):
        raise bad("inconsistent header")
    off = 12 + hlen
    f_len = n * words * 8
    d_len = n * nblock * 8
    if len(body) != off + f_len + d_len + ids_bytes:
        raise bad("section lengths do not match the file size")
    try:
        filters = (
            bits.rows_from_bytes(body[off : off + f_len], nbits)
            if n
            else np.zeros((0, words), dtype=np.uint64)
        )
    except bits.BitLayoutError as exc:
        raise bad(f"filter section invalid ({exc})") from None
    off += f_len
    digests = np.frombuffer(body[off : off + d_len], dtype=_LE).astype(np.uint64).reshape(n, nblock)
    off += d_len
    try:
        ids = json.loads(body[off : off + ids_bytes].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise bad("record-id section is not valid JSON") from None
    if not isinstance(ids, list) or len(ids) != n or not all(isinstance(i, str) for i in ids):
        raise bad(f"record-id section must be an array of {n} strings")
    return EncodedRecords(tuple(ids), filters, nbits, digests), schema_digest
