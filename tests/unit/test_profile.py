from __future__ import annotations

import json
import re

import pytest

from bakeoff.errors import SpecError
from bakeoff.workload.profile import MAX_REQUESTS, InputProfile, Request, parse_profile


def test_list_of_lengths_in_order():
    profile = parse_profile("seq=16,17,32,16")
    assert profile.requests == (Request(1, 16), Request(1, 17), Request(1, 32), Request(1, 16))
    assert profile.shapes == [Request(1, 16), Request(1, 17), Request(1, 32)]


def test_batches_one_per_length_or_one_for_all():
    assert parse_profile("seq=8,9&batch=2,4").requests == (Request(2, 8), Request(4, 9))
    assert parse_profile("seq=8,9&batch=3").requests == (Request(3, 8), Request(3, 9))
    with pytest.raises(SpecError, match="batch= has 3 values for 2 lengths"):
        parse_profile("seq=8,9&batch=1,2,3")


@pytest.mark.parametrize("kind", ["uniform", "lognormal"])
def test_distributions_are_bounded_and_reproducible(kind):
    text = f"seq={kind}(8,512)&n=200&batch=1,2,4&seed=7"
    first, second = parse_profile(text), parse_profile(text)
    assert first == second and len(first.requests) == 200
    assert all(8 <= r.seq <= 512 and r.batch in (1, 2, 4) for r in first.requests)
    assert parse_profile(text.replace("seed=7", "seed=8")) != first


def test_lognormal_concentrates_on_short_requests():
    lengths = sorted(r.seq for r in parse_profile("seq=lognormal(8,512)&n=1000").requests)
    median = lengths[500]
    assert 40 < median < 100  # the geometric mean of the bounds is 64


def test_recorded_requests_from_csv_and_jsonl(tmp_path):
    csv_file = tmp_path / "requests.csv"
    csv_file.write_text("length,batch\n12,1\n40,2\n12,1\n")
    assert parse_profile(str(csv_file)).requests == (Request(1, 12), Request(2, 40), Request(1, 12))
    jsonl = tmp_path / "requests.jsonl"
    jsonl.write_text("\n".join(json.dumps(row) for row in ({"seq": 5}, {"length": 7, "batch": 3})))
    assert parse_profile(str(jsonl)).requests == (Request(1, 5), Request(3, 7))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("seq=", "malformed profile"),
        ("len=8", "needs seq="),
        ("seq=8,x", "not a list of integers"),
        ("seq=uniform(9,8)", "bad bounds"),
        ("seq=8,9&n=4", "n= applies to distributions"),
        ("seq=8&seed=-1", "not a non-negative integer"),
        ("missing.csv", "does not exist"),
    ],
)
def test_bad_profiles(text, message):
    with pytest.raises(SpecError, match=message):
        parse_profile(text)


def test_bad_rows_name_the_row(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("length\n10\nabc\n")
    with pytest.raises(SpecError, match="row 2 has no integer length"):
        parse_profile(str(bad))


def test_round_trip():
    profile = parse_profile("seq=uniform(8,64)&n=5")
    assert InputProfile.from_dict(profile.to_dict()) == profile


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[12, 1]\n", "row 1 is not an object"),
        ('{"length": 12.7}\n', "row 1 has no integer length"),
        ('{"length": true}\n', "row 1 has no integer length"),
        ('{"length": 12, "batch": 0}\n', "row 1 has batch 0: sizes must be at least 1"),
    ],
)
def test_bad_jsonl_rows(tmp_path, content, message):
    path = tmp_path / "requests.jsonl"
    path.write_text(content)
    with pytest.raises(SpecError, match=message):
        parse_profile(str(path))


def test_csv_with_bom_and_binary_files(tmp_path):
    bom = tmp_path / "excel.csv"
    bom.write_text("\ufefflength\n12\n", encoding="utf-8")
    assert parse_profile(str(bom)).requests == (Request(1, 12),)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xc1\xff\x00\x01")
    with pytest.raises(SpecError, match="cannot read profile"):
        parse_profile(str(binary))


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "seq=99999999999999999999",
            "seq='99999999999999999999' has length 99,999,999,999,999,999,999, above the cap of 1,000,000 "
            "(use sizes up to 1,000,000)",
        ),
        ("seq=0,4", "seq='0,4' has length 0: sizes must be at least 1 (use positive sizes)"),
        ("seq=uniform(8,128)&n=5,6", "n='5,6' must be one whole number of requests (e.g. n=50)"),
        (
            "seq=uniform(8,128)&n=500000",
            "n=500000 asks for 500,000 requests, above the cap of 100,000 (use at most 100,000)",
        ),
        ("seq=uniform(8,128)&n=0", "n=0 draws no requests (e.g. n=50)"),
        ("seq=uniform(8,1e400)", "the bounds in seq='uniform(8,1e400)' must be whole numbers (e.g. uniform(8,128))"),
        (
            "seq=lognormal(8,2000000)",
            "seq='lognormal(8,2000000)' has upper bound 2,000,000, above the cap of 1,000,000 "
            "(use sizes up to 1,000,000)",
        ),
        (
            "seq=normal(8,128)&n=5",
            "unknown distribution in seq='normal(8,128)' (use uniform(lo,hi) or lognormal(lo,hi))",
        ),
    ],
)
def test_profile_bounds_and_unknown_distributions_say_exactly_what_is_wrong(text, line):
    with pytest.raises(SpecError, match=re.escape(line.partition(" (")[0])) as info:
        parse_profile(text)
    assert info.value.one_line() == line


@pytest.mark.parametrize(
    ("rows", "line"),
    [
        ("length\n10\n-5\n", "row 2 has length -5: sizes must be at least 1 (use positive sizes)"),
        (
            "length\n10\n1000000000\n",
            "row 2 has length 1,000,000,000, above the cap of 1,000,000 (use sizes up to 1,000,000)",
        ),
        (
            "length,batch\n10,2000000\n",
            "row 1 has batch 2,000,000, above the cap of 1,000,000 (use sizes up to 1,000,000)",
        ),
    ],
)
def test_files_get_the_same_size_checks_as_the_command_line(tmp_path, rows, line):
    path = tmp_path / "requests.csv"
    path.write_text(rows)
    with pytest.raises(SpecError, match=re.escape(line.partition(" (")[0])) as info:
        parse_profile(str(path))
    assert info.value.one_line() == f"{path} {line}"


def test_files_get_the_same_request_cap_as_the_command_line(tmp_path):
    path = tmp_path / "requests.csv"
    path.write_text("length\n" + "4\n" * (MAX_REQUESTS + 1))
    with pytest.raises(SpecError, match=re.escape(f"has {MAX_REQUESTS + 1:,} requests, above the cap")):
        parse_profile(str(path))
    path.write_text("length\n" + "4\n" * MAX_REQUESTS)  # the clean control: exactly the cap
    assert len(parse_profile(str(path)).requests) == MAX_REQUESTS
