"""Notes and tags on runs, from the command line as a user types them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.kb.runs import recorded_baseline, recorded_run, variant

from bakeoff.errors import SpecError, StoreError
from bakeoff.store import Store
from bakeoff.store.annotations import Note

RUN = recorded_run(0).run_id


def bakeoff(*args: str, cwd: Path, user: str | None = "ana") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "BAKEOFF_DB")}
    if user:
        env["USER"] = user
    return subprocess.run(
        [sys.executable, "-m", "bakeoff", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    store = Store.open(tmp_path / "bakeoff.db")
    store.save_baseline(recorded_baseline(), recorded_run(0).environment)
    store.save_run(recorded_run(0))
    store.save_run(variant("abc000000001", created_at="2027-01-01T00:00:00+00:00"))
    return tmp_path


def test_note_tag_show_and_history(kb: Path) -> None:
    noted = bakeoff("note", RUN[:5], "OOM at [bold]batch 8[/bold] <b>x</b>", cwd=kb)
    assert (noted.returncode, noted.stdout.strip()) == (0, f"noted on run {RUN} (note 1)")
    assert bakeoff("tag", RUN[:5], "driver-560", cwd=kb).stdout.strip() == "tags: driver-560"
    assert bakeoff("tag", RUN, "torch-2.13", cwd=kb).stdout.strip() == "tags: driver-560, torch-2.13"

    shown = bakeoff("show", RUN[:5], cwd=kb).stdout.splitlines()
    assert shown[-2] == "tags: driver-560, torch-2.13"
    assert shown[-1].startswith("note 20") and shown[-1].endswith(" UTC ana: OOM at [bold]batch 8[/bold] <b>x</b>")

    doc = json.loads(bakeoff("show", RUN[:5], "--format", "json", cwd=kb).stdout)
    assert doc["run_id"] == RUN and doc["tags"] == ["driver-560", "torch-2.13"]
    [note] = doc["notes"]
    assert (note["id"], note["run_id"], note["text"], note["author"]) == (
        1,
        RUN,
        "OOM at [bold]batch 8[/bold] <b>x</b>",
        "ana",
    )
    assert Note.from_dict(note).to_dict() == note

    tagged = json.loads(bakeoff("history", "--tag", "driver-560", "--format", "json", cwd=kb).stdout)
    assert [r["run_id"] for r in tagged] == [RUN]
    assert len(json.loads(bakeoff("history", "--format", "json", cwd=kb).stdout)) == 2
    untag = bakeoff("tag", RUN, "driver-560", "--remove", cwd=kb)
    assert untag.stdout.strip() == "tags: torch-2.13"
    assert bakeoff("history", "--tag", "driver-560", cwd=kb).stdout.strip() == "no runs tagged driver-560"


def test_author_is_user_or_nobody(kb: Path) -> None:
    bakeoff("note", RUN, "from ana", cwd=kb)
    bakeoff("note", RUN, "from nobody", cwd=kb, user=None)
    bakeoff("note", RUN, "signed", "--author", "bo", cwd=kb)
    notes = Store.open(kb / "bakeoff.db").notes(RUN)
    assert [(n.text, n.author) for n in notes] == [("from ana", "ana"), ("from nobody", None), ("signed", "bo")]
    assert all(n.created_at.endswith("+00:00") for n in notes)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["note", "zzz", "text"], "bakeoff: error: no run 'zzz' in {db} (run `bakeoff history` to list run ids)"),
        (
            ["note", RUN, "   "],
            'bakeoff: error: a note needs some text (e.g. bakeoff note 3f2a "OOM at batch 8 on driver 560")',
        ),
        (
            ["tag", RUN, "two words"],
            "bakeoff: error: invalid tag 'two words' (use up to 64 letters, digits and ._:/+=@- starting with a "
            "letter or digit, e.g. driver-560 or torch-2.13)",
        ),
        (["tag", RUN, "never-set", "--remove"], f"bakeoff: error: run {RUN} has no tag 'never-set' (its tags: none)"),
        (["tag", "", "x"], "bakeoff: error: an empty run id (run `bakeoff history` to list run ids)"),
    ],
)
def test_mistakes_are_one_line(kb: Path, args: list[str], line: str) -> None:
    done = bakeoff(*args, cwd=kb)
    assert (done.returncode, done.stdout, done.stderr.strip()) == (2, "", line.format(db=kb / "bakeoff.db"))


def test_notes_and_tags_need_an_existing_database(tmp_path: Path) -> None:
    done = bakeoff("note", "abc", "text", "--db", "typo.db", cwd=tmp_path)
    assert done.stderr.strip() == (
        f"bakeoff: error: no database at {tmp_path / 'typo.db'} (check --db / BAKEOFF_DB, or run a trial first)"
    )
    assert not (tmp_path / "typo.db").exists()


def test_store_api(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "kb.db")
    store.save_run(variant("r1"))
    store.save_run(variant("r2", created_at="2000-01-01T00:00:00+00:00"))
    for run_id in ("r1", "r2"):
        store.add_tag(run_id, "shared")
    assert store.run_ids_with_tag("shared") == ["r2", "r1"]  # oldest run first
    assert store.run_ids_with_tag("other") == []
    assert store.tags("r1") == ["shared"]
    assert store.notes("r1") == []
    with pytest.raises(SpecError, match="invalid tag"):
        store.add_tag("r1", "x" * 65)
    with pytest.raises(StoreError, match="no run"):
        store.add_note("missing", "text")


def test_keyword_api_from_the_package(kb: Path) -> None:
    import bakeoff

    db = kb / "bakeoff.db"
    note = bakeoff.note(RUN[:4], "seen from Python", db=db, author="cy")
    assert bakeoff.tag(RUN[:4], "py", db=db) == ["py"]
    found = bakeoff.notes_and_tags(RUN[:4], db=db)
    assert found == {"run_id": RUN, "notes": [note], "tags": ["py"]}
    assert [s.run_id for s in bakeoff.history(db=db, tag="py")] == [RUN]
    exported = bakeoff.export_runs(kb / "x.jsonl", db=db, tag="py")
    assert exported.runs == 1
    assert bakeoff.import_runs(kb / "x.jsonl", db=kb / "copy.db").runs == 1
    assert bakeoff.db_status(db=kb / "copy.db")["runs"] == 1
    assert bakeoff.db_upgrade(db=kb / "copy.db")["applied"] == []


def test_every_sharing_command_ends_its_help_with_an_example_without_importing_torch() -> None:
    code = """
import sys
from click.testing import CliRunner
from bakeoff.cli.main import cli
for args in (["db"], ["db", "status"], ["db", "upgrade"], ["export"], ["import"], ["note"], ["tag"]):
    out = CliRunner().invoke(cli, [*args, "--help"]).output
    last = out.strip().splitlines()[-1].strip()
    print(" ".join(args), "|", "Example" in out, "|", last)
print("torch imported:", "torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert lines[-1] == "torch imported: False"
    for line in lines[:-1]:
        command, has_example, last = line.split(" | ")
        assert has_example == "True", command
        assert last.startswith(("Example: bakeoff ", "bakeoff ")), (command, last)
