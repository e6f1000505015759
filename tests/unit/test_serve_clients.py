"""Several client processes sharing one schedule: what the parent makes of each one's answer."""

from __future__ import annotations

import pytest


def test_a_client_process_that_died_or_garbled_its_answer_leaves_its_requests_as_client_errors() -> None:
    from bakeoff.serve.load import _read_share

    share = [(4, 0.1), (9, 0.3), (12, 0.5)]
    for answer in ("", "not json", '{"requests": [[0, 0.1, 0.1, 0.2, 200, null, "e30=", null, 0]], "wall_s": 1}'):
        sent, _ = _read_share(answer, share)
        assert sorted(r.index for r in sent) == [4, 9, 12]
        lost = [r for r in sent if r.error == "client"]
        assert len(lost) == (2 if answer.startswith("{") else 3) and all(r.done is None for r in lost)
    (kept,) = [r for r in _read_share(answer, share)[0] if r.error is None]
    assert (kept.index, kept.body, kept.latency_s) == (4, b"{}", pytest.approx(0.1))
