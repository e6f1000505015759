"""How :class:`~bakeoff.distributed.ranks.RankGroup` names a hang, with two real CPU ranks (gloo)
forked from one rank server: a rank stopped inside its all_reduce is a hang in that all_reduce;
ranks stopped after their last collective (a process group's teardown that never ends) are a hang
in the teardown, not "before the first collective" as they once read; the clean controls, each
rank making its all_reduce and leaving, and one rank building for seconds while the other waits
for it in the group's set-up, are no hang at a four-second hang timeout (a loaded machine
makes one rank seconds late)."""

from __future__ import annotations

import pytest
from tests.fixtures.rank_jobs import OneAllReduce

from bakeoff.distributed.ranks import RANK_PRELOAD, TEARDOWN, RankGroup, rank_server

pytestmark = [pytest.mark.isolated]


@pytest.fixture(scope="module")
def server():
    with rank_server((*RANK_PRELOAD, "tests.fixtures.rank_jobs")) as shared:
        yield shared


def _run(server, timeout_s: float = 60.0, **job):
    group = RankGroup(2, RANK_PRELOAD, server)
    jobs = [OneAllReduce(rank, 2, group.rendezvous, **job) for rank in range(2)]
    return group.run(jobs, timeout_s, 4.0)


def test_ranks_that_make_their_collective_and_leave_are_no_hang(server):
    ended = _run(server)
    assert ended.hang is None and not ended.timed_out, (ended.hang, ended.timed_out)
    assert [o.value for o in ended.outcomes] == [{"sum": 8.0}] * 2


def test_a_rank_building_longer_than_the_hang_timeout_while_its_peer_waits_in_the_set_up_is_no_hang(server):
    # rank 0 waits in init_process_group #0 for 9 s, more than twice the hang timeout
    ended = _run(server, build_rank=1, build_s=9.0)
    assert ended.hang is None and not ended.timed_out, (ended.hang, ended.timed_out)
    assert [o.value for o in ended.outcomes] == [{"sum": 8.0}] * 2


def test_a_build_past_the_timeout_is_a_timeout_naming_the_rank_still_building(server):
    ended = _run(server, timeout_s=3.0, build_rank=1, build_s=15.0)
    assert ended.hang is None
    assert ended.timed_out == "while building: rank 1 had not reached the process group", ended.timed_out


def test_a_rank_stopped_inside_its_all_reduce_is_a_hang_naming_it(server):
    ended = _run(server, stall_rank=1, stall_s=12.0)
    assert ended.hang is not None, ended.outcomes
    assert (ended.hang.collective, ended.hang.seq, ended.hang.waiting) == ("all_reduce", 1, (0, 1))


def test_ranks_stopped_after_their_last_collective_are_a_hang_in_the_teardown(server):
    ended = _run(server, linger_s=12.0)
    assert ended.hang is not None, ended.outcomes
    hang = ended.hang
    assert (hang.collective, hang.seq, hang.waiting, hang.missing) == (TEARDOWN, 1, (0, 1), ())
    assert hang.where == {"0": "finished (made 1 collectives)", "1": "finished (made 1 collectives)"}


def test_a_rank_killed_inside_a_collective_is_named_and_not_its_peer_that_then_fails(server):
    # rank 1 dies by SIGKILL; rank 0, waiting for it in the all_reduce, then fails or is stopped:
    # whichever is heard first, the world names rank 1 and its signal
    ended = _run(server, die_rank=1, die_after_s=1.0)
    world = ended.stopped(2, "gloo", 1.0)
    assert world is not None and world.verdict == "error", world
    assert world.reason.startswith("rank 1 (last entered all_reduce #1): "), world.reason
    assert "killed by SIGKILL" in world.reason, world.reason
