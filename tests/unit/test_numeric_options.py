"""Every numeric option of every command refuses nan, infinities and values out of its bounds in
one line naming the option, with exit code 2, before anything is opened or stored; a value
within its bounds passes. The options are read from the click app itself, so a new command or
option is covered as soon as it exists. Prices and capture names, numbers and names inside a
text option, are refused the same way."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from tests.conftest import cli_in_process

from bakeoff.cli.main import cli

NUMERIC = (click.types.IntParamType, click.types.FloatParamType)


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command of the app, with the words that name it (``("db", "status")``)."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _positionals(command: click.Command) -> list[str]:
    """A valid-looking value for each required argument (a script's path for ``exec``)."""
    return [
        "x.py" if isinstance(p.type, click.Path) else "x"
        for p in command.params
        if isinstance(p, click.Argument) and p.required
    ]


def _numeric_options() -> list[tuple[tuple[str, ...], click.Command, click.Option]]:
    return [
        (words, command, param)
        for words, command in _commands(cli)
        for param in command.params
        if isinstance(param, click.Option)
        and (isinstance(param.type, NUMERIC) or getattr(param.type, "bounds", None) is not None)
    ]


def _out_of_range(bounds: object) -> list[str]:
    """Values just outside ``bounds``: below the lowest, and above the highest where there is one."""
    low, high, kind = bounds.low, bounds.high, bounds.kind  # type: ignore[attr-defined]
    below = low if bounds.low_open else (low - 1 if kind is int else low - 0.5)  # type: ignore[attr-defined]
    values = [below]
    if math.isfinite(high):
        values.append(high if bounds.high_open else (high + 1 if kind is int else high * 2))  # type: ignore[attr-defined]
    return [str(int(v)) if kind is int else repr(float(v)) for v in values]


def _cases() -> list[pytest.param]:
    cases = []
    for words, command, param in _numeric_options():
        flag = param.opts[0]
        bounds = getattr(param.type, "bounds", None)
        values = ["nan", "inf", "-inf", *(_out_of_range(bounds) if bounds is not None else [])]
        for value in values:
            cases.append(pytest.param(words, command, flag, value, id=f"{' '.join(words)} {flag} {value}"))
    return cases


_run = cli_in_process


def _db_args(command: click.Command, db: Path) -> list[str]:
    return ["--db", str(db)] if any(p.name == "db" for p in command.params) else []


def test_the_app_has_numeric_options_and_each_declares_its_bounds():
    found = _numeric_options()
    assert len(found) >= 15
    undeclared = [f"{' '.join(w)} {p.opts[0]}" for w, _, p in found if getattr(p.type, "bounds", None) is None]
    assert not undeclared, f"numeric options with no bounds (give them cli.common.Number): {undeclared}"


@pytest.mark.parametrize(("words", "command", "flag", "value"), _cases())
def test_bad_number_is_one_line_exit_2_and_nothing_stored(words, command, flag, value, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "kb.db"
    args = [*words, f"{flag}={value}", *_db_args(command, db), *_positionals(command)]
    code, out, err = _run(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2, (args, err)
    assert len(lines) == 1 and lines[0].startswith("bakeoff: error: "), (args, err)
    assert flag in lines[0], (args, err)
    assert "Traceback" not in err and out == ""
    assert list(tmp_path.iterdir()) == [], "something was written"


@pytest.mark.parametrize(
    ("words", "command", "flag"),
    [pytest.param(w, c, p.opts[0], id=f"{' '.join(w)} {p.opts[0]}") for w, c, p in _numeric_options()],
)
def test_a_value_within_the_bounds_passes(words, command, flag, tmp_path):
    param = next(p for p in command.params if p.opts and p.opts[0] == flag)
    bounds = param.type.bounds
    value = str(int(bounds.example)) if bounds.kind is int else repr(float(bounds.example))
    assert bounds.contains(bounds.kind(value))
    ctx = command.make_context(
        words[-1], [f"{flag}={value}", *_db_args(command, tmp_path / "kb.db"), *_positionals(command)]
    )
    assert ctx.params[param.name] == bounds.kind(value)
    assert list(tmp_path.iterdir()) == []


def _price_commands() -> list[pytest.param]:
    return [
        pytest.param(words, command, id=" ".join(words))
        for words, command in _commands(cli)
        if any(isinstance(p, click.Option) and "--price" in p.opts for p in command.params)
    ]


@pytest.mark.parametrize(("words", "command"), _price_commands())
@pytest.mark.parametrize(
    ("price", "line"),
    [
        ("cpu=-0.34/h", "price 'cpu=-0.34/h' must be a positive amount, written without a sign"),
        ("cpu=$-0.34/h", "price 'cpu=$-0.34/h' must be a positive amount, written without a sign"),
        ("cpu=1e307/h", "price 'cpu=1e307/h' is more than 1e+12 an hour"),
        ("cpu=1e307/s", "price 'cpu=1e307/s' is more than 1e+12 an hour"),
        ("cpu=nan/h", "price 'cpu=nan/h' must be a positive amount"),
    ],
)
def test_bad_price_is_one_line_exit_2_and_nothing_stored(words, command, price, line, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [*words, "--price", price, *_db_args(command, tmp_path / "kb.db"), *_positionals(command)]
    code, _, err = _run(capsys, *args)
    assert code == 2, err
    assert err.strip().splitlines() == [f"bakeoff: error: {line} (e.g. --price cpu=0.34/h)"]
    assert list(tmp_path.iterdir()) == []


def test_good_prices_still_read():
    from bakeoff.analysis.cost import parse_prices

    read = parse_prices(["cpu=0.34/h@4cores", "neuron=1e12/h", "emu=0.5/min"])
    assert [p.per_hour for p in read] == [0.34, 1e12, 30.0]


@pytest.mark.parametrize("name", ["a b:c", "infer", "infer:", ":post", "in-fer:post", "infer:post()"])
def test_malformed_capture_name_is_refused_before_the_script_runs(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, "exec", "--capture", name, "--db", str(tmp_path / "kb.db"), "x.py")
    assert code == 2
    assert err.strip().splitlines() == [
        f"bakeoff: error: --capture {name!r} is not MODULE:FUNCTION (e.g. --capture infer:postprocess)"
    ]
    assert list(tmp_path.iterdir()) == []


def _spec_options() -> list[pytest.param]:
    """Every numeric option a scenario or a check declares, with how its spec is parsed."""
    from bakeoff.checks.registry import parse_check, registered_checks
    from bakeoff.scenarios.registry import parse_scenario, registered_scenarios

    found = []
    parsers = (("scenario", parse_scenario, registered_scenarios), ("check", parse_check, registered_checks))
    for kind, parse, registered in parsers:
        for each in registered():
            for key, option in each.options.items():
                if option.kind in (int, float):
                    found.append(pytest.param(parse, each.name, key, option, id=f"{kind} {each.name}?{key}"))
    return found


@pytest.mark.parametrize(("parse", "name", "key", "option"), _spec_options())
def test_numeric_spec_options_refuse_nan_infinities_and_numbers_past_their_maximum(parse, name, key, option):
    from bakeoff.errors import SpecError

    too_big = [str(int(option.most) + 1)] if option.most is not None else []
    for value in ["nan", "inf", "-inf", *too_big]:
        with pytest.raises(SpecError) as said:
            parse(f"{name}?{key}={value}")
        assert key in said.value.one_line() and "\n" not in said.value.one_line()
    low = option.minimum if option.minimum is not None else 0
    good = option.default if option.default is not None else max(low, 1)
    assert parse(f"{name}?{key}={good}").options[key] == good
