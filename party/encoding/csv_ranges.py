"""A CSV cut into byte ranges of whole rows, so that worker processes parse their own rows.

``split_ranges`` reads the file once (in blocks, in C: ``bytes.find``/``count``) and cuts the
rows after the header into ranges of about ``block_bytes`` that end at a line end, each with the
number of its first row. That is only exact when every line is one row: so a file that contains
a double quote (a quoted field may hold a newline or a comma), a carriage return other than in a
CRLF line end, or an empty line (skipped but counted in row numbers; pyarrow would drop it without a trace) is not split
(``None``): the caller reads it the exact way, in one process (``Encoder.encode_csv``).

``read_range`` runs in a worker: it parses one range with the same pyarrow options as
``Encoder.encode_csv`` (needed columns as bytes) into a ``_Batch`` numbered from the range's
first row; a row with a wrong number of columns is an error naming the file and row, found by the
csv module on that range only.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv

from party.encoding.encoder import CsvLayout, EncodeDataError, _Batch, locate_csv_problem

_NOT_SPLITTABLE = (b'"', b"\n\n", b"\n\r\n")


def _splittable(chunk: bytes) -> bool:
    """No quote, no empty line, and every carriage return ends a line (CRLF)."""
    if chunk.startswith((b"\n", b"\r\n")) or any(m in chunk for m in _NOT_SPLITTABLE):
        return False
    return b"\r" not in chunk or chunk.count(b"\r") == chunk.count(b"\r\n")


@dataclass(frozen=True)
class CsvRange:
    """Bytes ``[start, end)`` of the file: whole rows, the first of them row ``first_row``."""

    start: int
    end: int
    first_row: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(path: str | Path, block_bytes: int) -> list[CsvRange] | None:
    """The file's rows after the header as ranges of about ``block_bytes`` (module docstring),
    or None if its lines are not all rows (or it cannot be read: the exact reader reports it)."""
    ranges: list[CsvRange] = []
    try:
        with open(path, "rb") as fh:
            header = fh.readline()
            if not header.endswith(b"\n") or not _splittable(header):
                return None
            start, row = len(header), 1
            while chunk := fh.read(block_bytes):
                if not chunk.endswith(b"\n"):
                    chunk += fh.readline()  # up to the end of the row (or of the file)
                if not _splittable(chunk):
                    return None
                ranges.append(CsvRange(start, start + len(chunk), row))
                start += len(chunk)
                row += chunk.count(b"\n")
    except OSError:
        return None
    return ranges


def read_range(path: str | Path, part: CsvRange, layout: CsvLayout, source: str) -> _Batch:
    """Parse one range (in the calling process) into a batch whose columns are still arrow
    arrays (``_Batch.materialise`` decodes them)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(part.start)
            data = fh.read(part.size)
    except OSError as exc:
        raise EncodeDataError(f"{source}: cannot read ({exc.strerror})") from None
    block = max(len(data) + 1, 1 << 16)  # the whole range in one pyarrow block
    try:
        table = pcsv.read_csv(
            pa.BufferReader(data), **layout.arrow_options(block, skip_header=False)
        )
    except pa.ArrowException:
        text = io.StringIO(data.decode("utf-8", "surrogateescape"), newline="")
        problem = locate_csv_problem(text, source, layout.width, part.first_row)
        raise problem or EncodeDataError(
            f"{source}, rows from {part.first_row}: malformed CSV (rejected by the CSV parser)"
        ) from None
    batch = table.combine_chunks().to_batches()
    rb = batch[0] if batch else None
    n = 0 if rb is None else rb.num_rows
    return _Batch(n, part.first_row, {}, arrow=rb, arrow_names=layout.needed, plain=layout.plain)
