"""Stored text never drives the terminal: escape sequences, carriage returns and bells in a
workload spec, a target's notes and error, a script's output kept in the log, a note or a tag
are printed as their escapes (``\\x1b``), and rich markup in them (``[bold]``, ``[link=...]``)
is printed as written, by the terminal renderers and by every command. The controls: plain
text, accents and the renderers' own styles are printed as before."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest
from rich.console import Console
from tests.revisit_data import environment, make_run, target_result

from bakeoff.cli.common import console
from bakeoff.cli.main import main
from bakeoff.report.printable import escape, visible
from bakeoff.report.terminal import history_table, log_view, run_view
from bakeoff.results.summary import RunSummary
from bakeoff.results.values import ErrorInfo, TargetResult
from bakeoff.store import Store
from bakeoff.target.spec import parse_target

TITLE = "\x1b]0;pwned\x07"  # sets the window title, then rings
CLEAR = "\x1b[2J\x1b[H"  # clears the screen
HOSTILE = f"{TITLE}{CLEAR}over\rwritten [bold]loud[/bold] [link=https://evil.example]click[/link]"
SPEC = f"arch:llama?note={HOSTILE}"
RAW = ("\x1b", "\r", "\x07")


def _run(run_id: str = "e5c0000000f1"):
    log = ({"text": f"script said {HOSTILE}", "count": 2, "source": "stdout", "phase": "script"},)
    failed = TargetResult(
        parse_target("cpu+inductor"),
        "error",
        error=ErrorInfo("RuntimeError", f"died {HOSTILE}", "crash", "compile"),
        log=log,
    )
    reference = target_result("cpu", 2.0, notes=(f"noted {HOSTILE}",), log=log)
    return make_run(run_id, "2025-01-01T10:00:00+00:00", environment(), (reference, failed), spec=SPEC)


def _plain(renderable) -> str:
    """What a plain rich console (not a terminal: no styles of its own) prints."""
    out = io.StringIO()
    Console(file=out, width=200).print(renderable)
    return out.getvalue()


def _harmless(text: str) -> None:
    for raw in RAW:
        assert raw not in text, f"{raw!r} reached the terminal"
    assert "\\x1b]0;pwned\\x07" in text and "\\x1b[2J" in text and "over\\rwritten" in text
    assert "[bold]loud[/bold]" in text and "[link=https://evil.example]click[/link]" in text


def test_visible_shows_control_characters_and_keeps_layout_and_text():
    assert visible("a\x1b[31mb\rc\x07d\x7f\x9b\u202e") == "a\\x1b[31mb\\rc\\x07d\\x7f\\x9b\\u202e"
    assert visible("line\n\tindented, déjà vu, 東京") == "line\n\tindented, déjà vu, 東京"
    assert escape("[bold]x\x1b") == "\\[bold]x\\x1b"


@pytest.mark.parametrize("verbose", [False, True])
def test_run_view_shows_a_hostile_spec_notes_and_error(verbose):
    _harmless(_plain(run_view(_run(), where="kb.db", width=200, verbose=verbose)))


def test_log_view_shows_the_script_output_as_written():
    text = _plain(log_view(_run()))
    _harmless(text)
    assert "script said" in text


def test_history_shows_a_hostile_spec():
    row = RunSummary("e5c0000000f1", "2025-01-01T10:00:00", SPEC, "f" * 16, "e" * 16, 2, 1, 1, 0, 1, 0)
    _harmless(_plain(history_table([row])))


def test_the_commands_print_stored_text_as_text(tmp_path, capsys):
    """show (summary, --verbose, --log), history, and a note and a tag, from a knowledge base
    whose run came with hostile text (as an import would bring it)."""
    db = tmp_path / "kb.db"
    run = _run()
    Store.open(db).save_run(run)
    with sqlite3.connect(db) as conn:  # a note and a tag as another bakeoff's export may hold them
        conn.execute(
            "insert into run_notes (run_id, created_at, text, author) values (?, ?, ?, ?)",
            (run.run_id, "2025-01-01T00:00:00", f"note {HOSTILE}", f"mallory{CLEAR}"),
        )
        conn.execute(
            "insert into run_tags (run_id, tag, created_at) values (?, ?, ?)",
            (run.run_id, f"tag{TITLE}", "2025-01-01T00:00:00"),
        )
    for args in (["show", run.run_id], ["show", run.run_id, "-v"], ["show", run.run_id, "--log"]):
        main([*args, "--db", str(db)])
        _harmless(capsys.readouterr().out)
    main(["history", "--db", str(db)])
    listed = capsys.readouterr().out
    assert not [raw for raw in RAW if raw in listed] and "\\x1b]0;pwned" in listed
    main(["show", run.run_id, "--db", str(db)])
    out = capsys.readouterr().out
    assert "note \\x1b]0;pwned" in out and "tag\\x1b]0;pwned" in out  # rich drops the bell there itself
    main(["show", run.run_id, "--format", "json", "--db", str(db)])  # JSON escapes them itself
    assert json.loads(capsys.readouterr().out)["workload"]["spec"] == SPEC


def test_the_command_console_keeps_its_own_styles_and_plain_text(capsys, monkeypatch):
    """The control: on a terminal, the renderers' own colours are still written, and ordinary
    stored text (accents, tabs) is printed unchanged."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    console().print("[bold]ours[/bold] déjà vu\tthen")
    printed = capsys.readouterr().out
    assert "\x1b[1m" in printed and "ours" in printed and "déjà vu" in printed and "\\x" not in printed
    ordinary = make_run("0123456789ab", "2025-01-01T10:00:00+00:00", environment(), (target_result("cpu"),))
    text = _plain(run_view(ordinary))
    assert "arch:llama" in text and "\\x" not in text
