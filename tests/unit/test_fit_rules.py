"""``bakeoff fit``'s input and rules without a model: the grid's progressions, sizes, the edge of
a row of points, and the one line a user gets for bad input."""

from __future__ import annotations

import re

import pytest
from tests.conftest import FIXTURES, cli_in_process

from bakeoff.errors import SpecError
from bakeoff.fit.run import _edges
from bakeoff.scenarios.fit import FitPoint
from bakeoff.settings.fit import parse_memory
from bakeoff.settings.grid import parse_grid


@pytest.mark.parametrize(
    ("text", "batches", "seqs"),
    [
        ("batch=1,2,4,...,64&seq=128,...,4096", (1, 2, 4, 8, 16, 32, 64), (128, 256, 512, 1024, 2048, 4096)),
        ("batch=1,...,8", (1, 2, 4, 8), ()),
        ("batch=8,16,24,...,64", (8, 16, 24, 32, 40, 48, 56, 64), ()),
        ("batch=3,6,...,48", (3, 6, 12, 24, 48), ()),
        ("batch=2,5,...,11", (2, 5, 8, 11), ()),
        ("seq=16&batch=1,3", (1, 3), (16,)),
    ],
)
def test_a_grid_continues_the_progression_its_values_start(text, batches, seqs):
    grid = parse_grid(text)
    assert (grid.batches, grid.seqs) == (batches, seqs)
    assert parse_grid(grid.text) == grid


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("seq=16", "gives no batch sizes"),
        ("batch=0,1", "must be at least 1"),
        ("batch=1,two", "is not a whole number"),
        ("batch=1,...,6", "does not reach 6"),
        ("batch=...,8", "'...' goes once, between the start and the last value"),
        ("batch=1,2,5,...,20", "share no step or ratio"),
        ("batch=4,2", "rising"),
        ("batch=1&batch=2", "gives batch twice"),
        ("width=4", "is not batch=... or seq=..."),
        ("batch=1,2,3,...,100&seq=1,2,3,...,100", "has 10000 points (at most 4096)"),
        ("batch=1,2,3,...,5000", "has more than 4096 values"),
    ],
)
def test_a_malformed_grid_is_one_line(text, said):
    with pytest.raises(SpecError) as raised:
        parse_grid(text)
    assert said in raised.value.one_line()


def test_a_fits_requirement_names_one_point():
    from bakeoff.settings.fit import parse_fits

    assert parse_fits("fits batch=32&seq=2048") == (32, 2048) and parse_fits("fits batch=4") == (4, None)


def test_sizes_read_in_their_units():
    assert parse_memory("16GiB") == 16 * 1024**3 and parse_memory("500MB") == 500 * 1000**2
    assert parse_memory("2e9") == 2 * 10**9
    for bad in ("16 apples", "100KB", "1e400", "1e30GiB"):
        with pytest.raises(SpecError):
            parse_memory(bad)


def _point(batch: int, fits: bool, expected: int = 100) -> FitPoint:
    return FitPoint(batch, 64, expected, expected, fits, {"activations": 70, "parameters": 30})


def test_the_edge_is_the_last_batch_that_fits_with_every_smaller_one():
    edges = _edges([_point(1, True), _point(2, True), _point(4, False), _point(8, True)], 1000)
    assert [(e.batch, e.beyond, e.dominates) for e in edges] == [(2, 4, "activations")]
    assert edges[0].margin == pytest.approx(0.9)
    (none,) = _edges([_point(1, False)], 1000)
    assert none.batch is None and none.beyond == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--grid", "batch=0"], "must be at least 1"),
        (["--memory", "lots"], "is not a size"),
        (["--on", "cpu,cpu?dtype=bf16"], "takes one target, got 2"),
        (["--on", "tpu9"], "unknown"),
        (["--require", "fits batch=1,2"], "names more than one point"),
        (["--require", "p90<=5ms"], "is not 'fits batch=B&seq=S'"),
        (["--optimizer", "sgd"], "--optimizer sets a training step's optimiser"),
        (["--memory", "1e400"], "is not a device's size"),
        (["--on", "cpu+inductor"], "bakeoff fit runs the step eagerly: cpu+inductor names a compile backend"),
        (["--on", "cpu:3"], "cpu:3 cannot run here"),
        (["--db", "/nonexistent/dir/kb.db"], "directory /nonexistent/dir does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, said):
    code, out, err = cli_in_process(capsys, "fit", "arch:llama", "--db", str(tmp_path / "kb.db"), *args)
    assert code == 2 and out == "" and said in err and err.count("\n") == 1, err
    assert not (tmp_path / "kb.db").exists()


def test_a_database_that_cannot_be_written_is_refused_before_any_work(capsys):
    # /proc/self is a directory no user may create files in, root included
    code, _out, err = cli_in_process(capsys, "fit", "arch:llama", "--db", "/proc/self/kb.db")
    said = r"bakeoff: error: directory /proc/\d+ cannot be written \(choose another --db path\)\n"
    assert code == 2 and re.fullmatch(said, err), err


def test_a_mixed_precision_target_is_predicted_under_its_autocast():
    from bakeoff.fit.predict import predict_points

    net = f"py:{FIXTURES / 'fit_models.py'}:net"
    (plain,) = predict_points(net, [(8, 64)])
    (amp,) = predict_points(net, [(8, 64)], amp="bfloat16")
    assert amp.parts["activations"] < plain.parts["activations"]  # bfloat16 activations under autocast


def test_a_stored_map_is_judged_again_and_one_that_cannot_be_a_map_is_not_drawn():
    from dataclasses import replace

    from bakeoff.scenarios.base import ScenarioResult
    from bakeoff.scenarios.fit import FitEdge, FitRequirement, FitResult, fit_of

    over = FitPoint(2, None, 3 * 2**30, 3 * 2**30, False)  # predicted over the capacity, never run
    missed = FitRequirement("fits batch=2", "not measured", 3 * 2**30, False, "predicted")
    whole = FitResult("arch:gpt2", "cpu", False, "adamw", "batch=1,2", 2**30, "--memory", "none", "none",
                      points=(FitPoint(1, None, 10, 10, True), over), requirements=(missed,))  # fmt: skip
    assert fit_of(ScenarioResult("fit", "ok", facts=whole.to_dict())) == whole
    # a crafted file's "met, measured" on a point that was never run is judged again from the point
    forged = replace(whole, requirements=(FitRequirement("fits batch=2", "met", 10, True),))
    (judged,) = fit_of(ScenarioResult("fit", "ok", facts=forged.to_dict())).requirements
    assert (judged.verdict, judged.measured, judged.how) == ("not measured", False, "predicted")
    for broken in (
        {"capacity": 0},
        {"points": "x"},
        {"points": [{**over.to_dict(), "batch": -7}]},
        {"points": [{**over.to_dict(), "measured": -7}]},
        {"edges": [FitEdge(None, 1, margin=float("nan")).to_dict()]},
        {"requirements": [FitRequirement("fits batch=9", "met", 10, True).to_dict()]},  # no such point
    ):
        assert fit_of(ScenarioResult("fit", "ok", facts={**whole.to_dict(), **broken})) is None, broken
    assert fit_of(ScenarioResult("service", "ok", facts=whole.to_dict())) is None


def test_a_required_point_is_met_or_not_only_when_measured_and_figures_rounded_alike_show_their_bytes():
    from bakeoff.scenarios.fit import FitPoint, judge_point, requirement_words

    mib = 2**20
    over = FitPoint(16, 64, 34 * mib, 34 * mib, False)  # predicted over the capacity, never run
    judged = judge_point("fits batch=16&seq=64", over, 20 * mib)
    assert (judged.verdict, judged.how) == ("not measured", "predicted")
    assert requirement_words(judged, 20 * mib) == "34.0 MiB predicted, of 20.0 MiB: never run on the target"
    ran = judge_point("fits batch=16&seq=64", FitPoint(16, 64, 34 * mib, 34 * mib, False, measured=30 * mib), 20 * mib)
    assert (ran.verdict, ran.measured) == ("not met", True)  # the control: measured over it
    edge = 4_850_944  # one byte over a capacity that prints the same
    tight = judge_point("fits batch=64", FitPoint(64, None, edge, edge, False, measured=edge), edge - 1)
    assert tight.verdict == "not met"
    assert requirement_words(tight, edge - 1) == "4,850,944 B measured on the target, of 4,850,943 B"
    fits = judge_point("fits batch=64", FitPoint(64, None, edge, edge, True, measured=edge), edge)
    assert (fits.verdict, requirement_words(fits, edge)) == ("met", "4.6 MiB measured on the target, of 4.6 MiB")
