"""A CSV cut into byte ranges of whole rows, so that worker processes parse their own rows.

``split_ranges`` cuts the lines after the header into ranges of about ``block_bytes`` that end at
a line end, by seeking (the parent reads a line per range, not the file). Cutting at line ends is
only exact when every line is one row. ``read_range`` runs in a worker and checks that for its
range while parsing it with the same pyarrow options as ``Encoder.encode_csv`` (needed columns as
bytes): a range with a double quote (a quoted value may hold a newline), an empty line (skipped
but counted in row numbers; pyarrow drops it without a trace) or a lone carriage return (its rows
differ from its lines) raises ``NotSplittable``, and the caller reads the file the exact way,
through one process's reader (``Encoder.encode_csv``). A worker does not know its first row
number until the rows before its range are counted: a parse error it finds names rows from 1;
the caller locates it again with the true first row (``read_range`` in the caller).
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from party.encoding.encoder import CsvLayout, EncodeDataError, _Batch, locate_csv_problem

_LF = 0x0A


@dataclass(frozen=True)
class CsvRange:
    """Bytes ``[start, end)`` of the file: whole lines."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class NotSplittable(Exception):
    """A range's lines are not all rows (a quote, an empty line, a lone carriage return)."""


def split_ranges(
    path: str | Path,
    block_bytes: int,
    first_bytes: int | None = None,
    last_bytes: int | None = None,
) -> tuple[list[CsvRange], int] | None:
    """The file's lines after the header as ranges of about ``block_bytes`` (found by seeking,
    not reading), and an estimate of its rows (from the first 64 KiB); None if the header is
    not one plain line (or the file cannot be read: the exact reader reports it).
    ``first_bytes``: the first ranges are this small, each pair of ranges twice the size of
    the pair before, up to ``block_bytes``. ``last_bytes``: in the last three blocks' worth
    of the file each range is a third of what is left, down to ``last_bytes`` (so that lanes
    taking ranges as they become free end at nearly the same moment)."""
    size_of = block_bytes if first_bytes is None else min(block_bytes, first_bytes)
    ranges: list[CsvRange] = []
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            header = fh.readline()
            if not header.endswith(b"\n") or b'"' in header:
                return None
            sample = fh.read(1 << 16)
            per_byte = sample.count(b"\n") / max(1, len(sample))
            start = len(header)
            while start < size:
                if last_bytes is not None and size - start < 3 * block_bytes:
                    size_of = _shrinking(size - start, last_bytes)
                ranges.append(_lines_from(fh, start, size_of, size))
                start = ranges[-1].end
                if len(ranges) % 2 == 0:
                    size_of = min(block_bytes, 2 * size_of)
    except OSError:
        return None
    return ranges, math.ceil(per_byte * (size - len(header)) * 1.02) + 1


def cut_tail(path: str | Path, ranges: list[CsvRange], count: int, least: int) -> list[CsvRange]:
    """``ranges`` with the bytes of their last ``count`` cut again at line ends into pieces of
    a third of what is left each, down to ``least`` bytes (so that lanes taking pieces as they
    become free end at nearly the same moment); ``ranges`` as they are if the file cannot be
    read."""
    if not 0 < count <= len(ranges):
        return ranges
    out, start, size = ranges[:-count], ranges[-count].start, ranges[-1].end
    try:
        with open(path, "rb") as fh:
            while start < size:
                out.append(_lines_from(fh, start, _shrinking(size - start, least), size))
                start = out[-1].end
    except OSError:
        return ranges
    return out


def _lines_from(fh: io.BufferedReader, start: int, size_of: int, size: int) -> CsvRange:
    """The whole lines from ``start`` to the first line end at or after ``start + size_of`` (or
    the file's end, ``size``), found by seeking."""
    fh.seek(min(size, start + size_of))
    return CsvRange(start, min(size, fh.tell() + len(fh.readline())))


def _shrinking(left: int, least: int) -> int:
    """A tail range's size: a third of the ``left`` bytes, down to ``least``."""
    return max(least, left // 3)


def line_counts(path: str | Path, ranges: list[CsvRange]) -> list[int] | None:
    """The lines of each range (a last line without a line end counted), read in one pass
    over the file; equal to each range's rows whenever ``read_range`` accepts it, so the
    caller knows every range's first row before any is parsed. None if unreadable."""
    counts: list[int] = []
    buf = bytearray(max((r.size for r in ranges), default=0))
    data = np.frombuffer(buf, dtype=np.uint8)
    try:
        with open(path, "rb", buffering=0) as fh:
            for r in ranges:
                fh.seek(r.start)
                got = fh.readinto(memoryview(buf)[: r.size])
                if got != r.size:
                    return None
                # numpy's compare and count: a third of ``bytearray.count``'s CPU (no memchr)
                ends = int(np.count_nonzero(data[:got] == _LF))
                counts.append(ends + (0 if got and buf[got - 1] == _LF else 1))
    except OSError:
        return None
    return counts


def _lines(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def read_range(
    path: str | Path, part: CsvRange, layout: CsvLayout, source: str, first_row: int
) -> _Batch:
    """Parse one range (in the calling process) into a batch numbered from ``first_row``,
    its columns still arrow arrays (``_Batch.materialise`` decodes them). Raises
    ``NotSplittable`` if its lines are not all rows (module docstring)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(part.start)
            data = fh.read(part.size)
    except OSError as exc:
        raise EncodeDataError(f"{source}: cannot read ({exc.strerror})") from None
    if b'"' in data:
        raise NotSplittable
    block = max(len(data) + 1, 1 << 16)  # the whole range in one pyarrow block
    try:
        table = pcsv.read_csv(
            pa.BufferReader(data), **layout.arrow_options(block, skip_header=False)
        )
    except pa.ArrowException:
        text = io.StringIO(data.decode("utf-8", "surrogateescape"), newline="")
        problem = locate_csv_problem(text, source, layout.width, first_row)
        if problem is None or data.count(b"\r") != data.count(b"\r\n"):
            raise NotSplittable from None  # the exact path tells what is wrong, and where
        raise problem from None
    batches = table.combine_chunks().to_batches()
    n = batches[0].num_rows if batches else 0
    if n != _lines(data):  # empty lines (dropped by pyarrow) or lone carriage returns
        raise NotSplittable
    rb = batches[0] if batches else None
    return _Batch(n, first_row, {}, arrow=rb, arrow_names=layout.needed, plain=layout.plain)
