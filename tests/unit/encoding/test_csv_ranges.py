"""A CSV cut into ranges of whole lines: every byte once, in order; line counts per range; the
last ranges cut again into shrinking pieces."""

from pathlib import Path

import pytest

from party.encoding.csv_ranges import CsvRange, cut_tail, line_counts, split_ranges


@pytest.mark.parametrize("final_newline", [True, False])
def test_ranges_cover_the_lines_and_the_last_ones_shrink(tmp_path: Path, final_newline: bool):
    lines = [f"r{i},{'x' * (i % 37)}" for i in range(5000)]
    text = "id,v\n" + "\n".join(lines) + ("\n" if final_newline else "")
    path = tmp_path / "f.csv"
    path.write_bytes(text.encode())
    split = split_ranges(path, 4096, last_bytes=512)
    assert split is not None
    ranges, _ = split
    assert ranges[0].start == len("id,v\n") and ranges[-1].end == len(text)
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:], strict=False))
    assert all(text[r.end - 1] == "\n" for r in ranges[:-1])  # cut at line ends
    assert max(r.size for r in ranges[-3:]) < 4096 <= ranges[0].size  # the tail is smaller
    counts = line_counts(path, ranges)
    assert counts == [text[r.start : r.end].rstrip("\n").count("\n") + 1 for r in ranges]
    assert sum(counts) == 5000


@pytest.mark.parametrize("final_newline", [True, False])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_tail_cut_again_covers_the_same_lines_in_shrinking_pieces(
    tmp_path: Path, final_newline: bool, count: int
):
    lines = [f"r{i},{'x' * (i % 41)}" for i in range(6000)]
    text = "id,v\n" + "\n".join(lines) + ("\n" if final_newline else "")
    path = tmp_path / "f.csv"
    path.write_bytes(text.encode())
    split = split_ranges(path, 16384)
    assert split is not None
    ranges = split[0]
    cut = cut_tail(path, ranges, count, 1024)
    kept = len(ranges) - count
    assert cut[:kept] == ranges[:kept]  # the others as they were
    pieces = cut[kept:]
    assert pieces[0].start == ranges[kept].start and pieces[-1].end == len(text)
    assert all(a.end == b.start for a, b in zip(cut, cut[1:], strict=False))
    assert all(text[r.end - 1] == "\n" for r in cut[:-1])  # cut at line ends
    assert len(pieces) > count
    sizes = [r.size for r in pieces]
    assert sizes[0] < ranges[kept].size and all(s >= 1024 for s in sizes[:-1])
    assert all(a >= b - 64 for a, b in zip(sizes, sizes[1:-1], strict=False))  # shrinking
    assert sum(line_counts(path, cut) or []) == 6000
    assert cut_tail(path, ranges, 0, 1024) == ranges
    assert cut_tail(tmp_path / "gone.csv", ranges, count, 1024) == ranges


@pytest.mark.parametrize(
    "text",
    ["", "\n", "a", "a\n", "a\nb", "a\r\nb\r\n", "\n\n\n", "x" * 70000 + "\ny\n" + "z" * 3],
)
def test_line_counts_count_each_range_like_its_lines(tmp_path: Path, text: str):
    body = text.encode()
    path = tmp_path / "f.csv"
    path.write_bytes(b"h\n" + body)
    cuts = sorted({2, *(2 + i for i in range(0, len(body), 3) if body[i - 1 : i] == b"\n")})
    ranges = [CsvRange(a, b) for a, b in zip([*cuts], [*cuts[1:], 2 + len(body)], strict=True)]
    ranges = [r for r in ranges if r.size] or [CsvRange(2, 2 + len(body))]
    expected = []
    for r in ranges:
        part = (b"h\n" + body)[r.start : r.end]
        expected.append(part.count(b"\n") + (0 if part.endswith(b"\n") else 1))
    assert line_counts(path, ranges) == expected
