"""Request bodies and recorded traces read from JSONL files, and the files refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.errors import SpecError
from bakeoff.serve.schedule import from_trace
from bakeoff.serve.traffic import read_traffic


def test_bodies_are_read_in_order_and_cycled(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n[1, 2]\n')
    traffic = read_traffic(path)
    assert traffic.bodies == ({"prompt": "a"}, {"prompt": "b"}, [1, 2]) and traffic.at is None
    assert traffic.take(5) == [{"prompt": "a"}, {"prompt": "b"}, [1, 2], {"prompt": "a"}, {"prompt": "b"}]


def test_a_recorded_trace_keeps_its_send_times(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"at": 12.5, "body": {"x": 1}}\n{"at": 12.0, "body": {"x": 0}}\n{"at": 14, "body": {"x": 2}}\n')
    traffic = read_traffic(path)
    assert traffic.at == (12.5, 12.0, 14.0) and traffic.bodies[0] == {"x": 1}
    # each line keeps its own time: the first line's body goes 0.5 s after the second line's
    assert from_trace(traffic.at) == [0.5, 0.0, 2.0]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": 1}\n{"a": \n', "line 2 of .* is not JSON"),
        ("\n  \n", "holds no request"),
        ('{"at": 1, "body": {}}\n{"a": 1}\n', "line 2 of .* has no send time, and other lines have one"),
        ('{"at": "soon", "body": {}}\n', "line 1 of .*: 'at' must be a number of seconds, got 'soon'"),
        ('{"at": true, "body": {}}\n', "'at' must be a number of seconds, got True"),
    ],
)
def test_a_malformed_file_is_refused_naming_the_line(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(SpecError, match=said):
        read_traffic(path)


def test_a_missing_or_binary_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read the traffic file"):
        read_traffic(tmp_path / "absent.jsonl")
    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 10)
    with pytest.raises(SpecError, match="cannot read the traffic file"):
        read_traffic(binary)
