"""What a process wrote, read within bounds: lines one at a time and cut, the end alone."""

from __future__ import annotations

from pathlib import Path

from bakeoff.logtail import LINE_LIMIT, read_lines, tail_text


def test_a_huge_line_is_cut_and_the_lines_after_it_are_read(tmp_path: Path) -> None:
    path = tmp_path / "stdout.txt"
    path.write_text("first\n" + "x" * (10 * LINE_LIMIT + 7) + "\nafter\n\nno end", encoding="utf-8")
    lines = list(read_lines(path))
    assert lines == ["first", "x" * LINE_LIMIT, "after", "", "no end"]


def test_undecodable_bytes_are_replaced_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "stderr.txt"
    path.write_bytes(b"caf\xe9\nok\n")
    assert list(read_lines(path)) == ["caf\ufffd", "ok"]
    assert tail_text(path, 3) == "ok\n"


def test_the_tail_reads_only_the_end(tmp_path: Path) -> None:
    path = tmp_path / "stderr.txt"
    path.write_text("a" * 1_000_000 + "the error\n", encoding="utf-8")
    assert tail_text(path, 10) == "the error\n"
    assert tail_text(path, 100) == "a" * 90 + "the error\n"
    assert tail_text(tmp_path / "missing.txt", 10) == ""
