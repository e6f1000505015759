"""The parts of ``bakeoff exec --nproc`` that decide what a run of N ranks says: the group that
runs them as one job (the first failure stops the others; a timeout names who was still
running), torchrun's environment, where a hung rank was, and the merge of the ranks' results
into one run (each rank's captures under its own name, the first failure as the error)."""

from __future__ import annotations

import time
from pathlib import Path

from bakeoff.launch.command import Ran
from bakeoff.launch.group import GroupEnd, run_group, start_command
from bakeoff.results.values import ErrorInfo
from bakeoff.runner.script_ranks import hang_site, merged, torchrun_env


def _start(tmp_path: Path, code: str):
    """A shell command as a member (starts in milliseconds, also on a loaded machine)."""
    with open(tmp_path / f"{abs(hash(code))}.txt", "wb") as out:  # the child keeps its own copy
        return start_command(["sh", "-c", code], {}, tmp_path, out, out)


def test_the_first_member_that_fails_stops_the_others_after_the_linger(tmp_path):
    members = [_start(tmp_path, "sleep 60"), _start(tmp_path, "sleep 0.3; exit 3"), _start(tmp_path, "true")]
    began = time.monotonic()
    end = run_group(members, timeout_s=60, grace_s=0.5, linger_s=0.5)
    assert time.monotonic() - began < 20  # not the sleeper's minute
    assert end.failed_first == 1 and end.stopped == (0,)
    assert [r.code for r in end.ran][1:] == [3, 0]
    assert end.ran[0].code is not None and end.ran[0].code < 0  # stopped by a signal, not timed out
    assert end.ended_s[2] is not None and end.ended_s[0] is None


def test_a_group_past_its_timeout_says_who_was_still_running_and_asks_them_first(tmp_path):
    members = [_start(tmp_path, "sleep 60"), _start(tmp_path, "true")]
    asked = []
    end = run_group(members, timeout_s=1.5, grace_s=0.2, on_timeout=asked.append)
    assert asked == [[0]]
    assert end.failed_first is None and end.stopped == ()
    assert end.ran[0].timed_out and end.ran[1].code == 0


def test_torchruns_environment_for_each_rank():
    env = torchrun_env(1, 4, 29500, {}, "abc")
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"
    }  # fmt: skip
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["OMP_NUM_THREADS"]) == ("127.0.0.1", "29500", "1")
    assert torchrun_env(0, 2, 1, {"OMP_NUM_THREADS": "3"}, "x")["OMP_NUM_THREADS"] == "3"  # the user's kept


_STACKS = """Thread 0x00007f1 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007f0 (most recent call first):
  File "/venv/torch/distributed/distributed_c10d.py", line 2810 in all_reduce
  File "/venv/torch/distributed/c10d_logger.py", line 81 in wrapper
  File "/tmp/run/work/train.py", line 27 in main
  File "/tmp/run/work/train.py", line 40 in <module>
"""


def test_a_hung_ranks_place_is_the_scripts_innermost_line_and_the_call_it_waits_in():
    assert hang_site(_STACKS, Path("/tmp/run/work")) == "train.py:27, in all_reduce"
    relative = _STACKS.replace("/tmp/run/work/train.py", "train.py")  # the script run by a relative path
    assert hang_site(relative, Path("/tmp/run/work")) == "train.py:27, in all_reduce"
    assert hang_site(_STACKS, Path("/elsewhere")) is None  # no thread in the script: nothing claimed
    # a rank waiting in init_process_group, called through the remap's wrapper of it: the wrapper is bakeoff's
    import bakeoff.script.remap_dist as remap_dist

    setting_up = f"""Current thread 0x00007f0 (most recent call first):
  File "/venv/torch/distributed/distributed_c10d.py", line 1710 in init_process_group
  File "/venv/torch/distributed/c10d_logger.py", line 95 in wrapper
  File "{remap_dist.__file__}", line 53 in wrapped
  File "/tmp/run/work/train.py", line 2 in <module>
"""
    assert hang_site(setting_up, Path("/tmp/run/work")) == "train.py:2, in init_process_group"


def _results(*walls: float) -> list[dict]:
    return [
        {"wall_s": w, "devices": {"emu": 2}, "ledger": [{"api": "torch.device", "count": 2, "site": "t.py:3",
                                                        "reason": "cuda -> emu"}],
         "captures_missing": ["m:f"], "capture_times": {"loss": [0.1, 0.2]}, "inputs_read": [f"d{i}.txt"]}
        for i, w in enumerate(walls)
    ]  # fmt: skip


def test_the_ranks_merge_into_one_run_each_rank_under_its_own_name():
    end = GroupEnd((Ran(0), Ran(0)), None, (), (1.0, 1.2))
    result, captured, error = merged(end, _results(1.0, 1.5), [{"loss": [1]}, {"loss": [2]}], [None, None], 60)
    assert error is None
    assert captured == {"rank0/loss": [1], "rank1/loss": [2]}
    assert result["wall_s"] == 1.5  # the slowest rank
    assert result["devices"] == {"emu": 4} and result["ledger"][0]["count"] == 4
    assert result["inputs_read"] == ["d0.txt", "d1.txt"] and result["captures_missing"] == ["m:f"]
    assert list(result["capture_times"]) == ["rank0/loss"]  # the spans are rank 0's
    assert [r["exit"] for r in result["ranks"]] == [0, 0]


def test_the_first_rank_to_fail_is_the_runs_error_and_the_ranks_stopped_after_it_are_named():
    end = GroupEnd((Ran(-15), Ran(1), Ran(-15)), 1, (0, 2), (None, 0.5, None))
    errors = [ErrorInfo("Killed", "died of SIGTERM", "crash"), ErrorInfo("ValueError", "bad shard"), None]
    _, _, error = merged(end, _results(1.0, 1.0, 1.0), [{}, {}, {}], errors, 60)
    assert error.type == "ValueError" and error.category == "exception"
    assert error.message == "rank 1 of 3: bad shard; rank 0, 2 stopped after it"


def test_the_rank_whose_script_ended_first_is_the_cause_not_the_peer_the_group_saw_first():
    # rank 1 raised; rank 0's gloo then saw the connection close, and its supervisor ended first
    end = GroupEnd((Ran(1), Ran(1)), 0, (), (0.5, 0.6))
    errors = [ErrorInfo("RuntimeError", "Connection closed by peer"), ErrorInfo("RuntimeError", "rank one exploded")]
    _, _, error = merged(end, _results(1.0, 1.0), [{}, {}], errors, 60, ended={0: 100.2, 1: 100.1})
    assert error.message == "rank 1 of 2: rank one exploded; then rank 0 failed too"
    # the control: without the scripts' end times the group's order stands
    _, _, error = merged(end, _results(1.0, 1.0), [{}, {}], errors, 60)
    assert error.message.startswith("rank 0 of 2: Connection closed by peer")


def test_a_rank_that_exited_cleanly_before_the_failure_is_named_beside_it():
    """Rank 1 called os._exit(0) at its first step; rank 0's gloo then saw the connection reset,
    and the error named rank 0 alone."""
    end = GroupEnd((Ran(1), Ran(0)), 0, (), (0.6, 0.5))
    errors = [ErrorInfo("RuntimeError", "Connection reset by peer"), None]
    _, _, error = merged(end, _results(1.0, 1.0), [{}, {}], errors, 60, ended={0: 100.2, 1: 100.1})
    assert error.message == (
        "rank 1 ended without an error while its peers ran (a collective it never joined?); then rank 0 of 2: "
        "Connection reset by peer"
    )
    # the control: a rank that ended cleanly after the failure is no part of it
    _, _, error = merged(end, _results(1.0, 1.0), [{}, {}], errors, 60, ended={0: 100.1, 1: 100.2})
    assert error.message == "rank 0 of 2: Connection reset by peer"


def test_a_timeout_names_each_rank_still_running_with_its_place_and_those_that_ended():
    end = GroupEnd((Ran(None), Ran(0)), None, (), (None, 2.0))
    timeout = ErrorInfo("Timeout", "no end", "timeout")
    _, _, error = merged(end, _results(1.0, 1.0), [{}, {}], [timeout, None], 8, {0: "t.py:9, in barrier"})
    assert error.category == "timeout"
    assert error.message == (
        "no end within 8 s: still running rank 0 at t.py:9, in barrier; rank 1 had ended "
        "(a collective the others never joined?)"
    )


def test_the_placement_shown_is_the_worst_ranks_and_a_note_says_whose():
    from types import SimpleNamespace

    from bakeoff.runner.script_ranks import worst_placement

    def audit(verdict: str, compiled: str = "") -> dict:
        return {"placement": SimpleNamespace(verdict=verdict), "compilation": compiled or None, "error": None}

    chosen, note = worst_placement([audit("on_device", "rank 0's"), audit("left_on_host"), audit("fallbacks")])
    assert chosen["placement"].verdict == "left_on_host" and chosen["compilation"] == "rank 0's"
    each = "rank 0 on_device, rank 1 left_on_host, rank 2 fallbacks"
    assert note == f"placement is rank 1's, the worst of 3 ranks ({each})"
    # the control: every rank on the device is rank 0's audit, without a note
    chosen, note = worst_placement([audit("on_device", "rank 0's"), audit("on_device")])
    assert chosen["placement"].verdict == "on_device" and chosen["compilation"] == "rank 0's" and note == ""
    assert worst_placement([None, None]) == (None, "")  # a killed job left no audit


def test_nodes_parse_and_refuse_with_one_line_each():
    import pytest

    from bakeoff.errors import SpecError
    from bakeoff.runner.script_ranks import job_port
    from bakeoff.settings.nodes import Nodes

    assert Nodes.parse("1/2@10.0.0.1:29500") == Nodes(1, 2, "10.0.0.1", 29500)
    assert Nodes.parse("0/4@[fe80::1]:29500").host == "fe80::1"
    assert str(Nodes.parse("0/4@[fe80::1]:29500")) == "0/4@[fe80::1]:29500"
    assert str(Nodes.parse(" 0/1@node-a.cluster:80 ")) == "0/1@node-a.cluster:80"
    for bad, said in (
        ("2/2@h:1", "the node rank must be below the number of nodes"),
        ("0/0@h:1", "the node rank must be below the number of nodes"),
        ("0/2@h:70000", "the port must be 1 to 65535"),
        ("0/2@h", "is not NODE_RANK/NNODES@HOST:PORT"),
        ("0/2@h;rm -rf /:1", "is not NODE_RANK/NNODES@HOST:PORT"),
        ("-1/2@h:1", "is not NODE_RANK/NNODES@HOST:PORT"),
    ):
        with pytest.raises(SpecError, match=said):
            Nodes.parse(bad)
    assert job_port(Nodes(0, 2, "h", 29500), 3) == 29503
    with pytest.raises(SpecError, match="job 40 of this run would need port 65575"):
        job_port(Nodes(0, 2, "h", 65535), 40)


def test_torchruns_environment_for_a_rank_of_a_job_across_machines():
    from bakeoff.settings.nodes import Nodes

    env = torchrun_env(1, 4, 29503, {}, "abc", Nodes(2, 3, "10.0.0.1", 29500))
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "ROLE_RANK")} == {
        "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "12", "LOCAL_WORLD_SIZE": "4", "ROLE_RANK": "9"
    }  # fmt: skip
    assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"], env["ROLE_WORLD_SIZE"]) == ("2", "3", "12")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "29503")


def test_a_machines_ranks_merge_under_their_global_ranks():
    from bakeoff.settings.nodes import Nodes

    nodes = Nodes(1, 2, "h", 1)
    end = GroupEnd((Ran(0), Ran(0)), None, (), (1.0, 1.2))
    result, captured, error = merged(
        end, _results(1.0, 1.5), [{"loss": [1]}, {"loss": [2]}], [None] * 2, 60, nodes=nodes
    )
    assert error is None and captured == {"rank2/loss": [1], "rank3/loss": [2]}
    assert [r["rank"] for r in result["ranks"]] == [2, 3] and list(result["capture_times"]) == ["rank2/loss"]
    end = GroupEnd((Ran(0), Ran(1)), 1, (), (0.5, 0.6))
    errors = [None, ErrorInfo("ValueError", "bad shard")]
    _, _, error = merged(end, _results(1.0, 1.0), [{}, {}], errors, 60, nodes=nodes)
    assert error.message == "rank 3 of 4: bad shard"
    end = GroupEnd((Ran(None), Ran(None)), None, (), (None, None))
    timeout = ErrorInfo("Timeout", "no end", "timeout")
    _, _, error = merged(
        end, _results(1.0, 1.0), [{}, {}], [timeout, timeout], 8, {1: "t.py:9, in barrier"}, nodes=nodes
    )
    assert error.message == (
        "no end within 8 s: still running rank 2 (where: unknown); rank 3 at t.py:9, in barrier "
        "(this machine's ranks only: 2 of 4; another machine's may not have come)"
    )


def test_gloo_is_given_an_interface_only_where_its_own_choice_would_fail(monkeypatch):
    from bakeoff.runner import script_ranks
    from bakeoff.runner.script_ranks import gloo_interface

    assert gloo_interface("127.0.0.1", {}) is None  # a job on the loopback: gloo's loopback is right
    assert gloo_interface("10.0.0.1", {"GLOO_SOCKET_IFNAME": "eth1"}) is None  # the user's own is kept
    # a hostname that resolves to an address other machines may reach: gloo's own choice stands
    monkeypatch.setattr(script_ranks.socket, "getaddrinfo", lambda *a, **k: [(2, 2, 17, "", ("10.0.0.5", 0))])
    assert gloo_interface("10.0.0.1", {}) is None


def test_a_run_across_machines_says_it_ran_this_machines_ranks_only():
    from types import SimpleNamespace

    from bakeoff.report.figures import settings_line

    exec_settings = {"nproc": 1, "nodes": "0/2@127.0.0.1:29500", "seed": 0, "timeout_s": 8.0}
    line = settings_line(SimpleNamespace(settings={"exec": exec_settings}))
    assert "each as this machine's 1 of 2 ranks (node 0 of 2, meeting at 127.0.0.1:29500;" in line, line
    assert "of its own" not in line  # a process of its own is one machine's single run, not a rank's
    alone = settings_line(SimpleNamespace(settings={"exec": {**exec_settings, "nodes": ""}}))
    assert "each in a process and a copy of the working directory of its own" in alone, alone
