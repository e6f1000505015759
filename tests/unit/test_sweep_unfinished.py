"""A new sweep of the workloads and targets of one that stopped says so, and how to finish that one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.cli.sweep import _say_unfinished
from bakeoff.settings import sweep_keywords
from bakeoff.store.db import Store
from bakeoff.sweep.population import resolve_population
from bakeoff.sweep.run import create_sweep
from bakeoff.target.spec import parse_target


def test_a_new_sweep_names_the_unfinished_one_of_its_workloads_and_targets(tmp_path: Path, capsys) -> None:
    population = tmp_path / "pop.txt"
    population.write_text("arch:llama\narch:gpt2\n")
    db = tmp_path / "kb.db"
    store = Store.open(db)
    stopped = create_sweep(store, resolve_population(str(population)), [parse_target("cpu")], sweep_keywords())
    _say_unfinished(str(population), ("cpu",), str(db), f" --db {db}")
    said = " ".join(capsys.readouterr().err.split())
    assert said == (
        f"· sweep {stopped.id} of these workloads on these targets stopped at 0 of 2 cells: bakeoff sweep --resume "
        f"{stopped.id} --db {db} finishes it; this starts a new one"
    )
    # the controls: other targets, other workloads, no database: nothing said
    _say_unfinished(str(population), ("cpu+inductor",), str(db), "")
    population.write_text("arch:llama\n")
    _say_unfinished(str(population), ("cpu",), str(db), "")
    _say_unfinished(str(population), ("cpu",), str(tmp_path / "none.db"), "")
    assert capsys.readouterr().err == "" and not (tmp_path / "none.db").exists()


def test_an_interrupt_python_dropped_is_raised_again_at_the_next_callback() -> None:
    from bakeoff.cli.sweep import _Bar

    bar = _Bar()
    bar.status("starting the Ray cluster")  # the control: no interrupt, nothing raised
    with pytest.raises(KeyboardInterrupt):
        bar.on_ctrl_c(2, None)  # Ctrl-C, raised where Python may drop it (inside a __del__)
    with pytest.raises(KeyboardInterrupt):
        bar.status("building arch:llama")  # raised again: the sweep stops at its next step
    with pytest.raises(KeyboardInterrupt):
        bar.cell(None)
