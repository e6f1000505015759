"""The README and docs/: the command reference is current and complete, every relative link and
anchor resolves, and the README stays short with the two set-up commands a CI script runs.

The checkers are plain functions over text, each shown catching a seeded fault on a small
synthetic page beside its run over the real files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import click

from bakeoff.cli.reference import REGENERATE, reference_markdown

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference.md"

#: The lines a CI script runs as they are written in the README's quick start.
SETUP_COMMANDS = (
    "./bootstrap.sh && .venv/bin/bakeoff demo",
    "./bootstrap.sh && .venv/bin/python -m pytest",
)
README_MAX_LINES = 260

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)[^)]*\)")
_CODE_SPAN = re.compile(r"`[^`]*`")


def _prose(text: str) -> Iterable[str]:
    """The lines of ``text`` outside fenced code blocks."""
    fence = ""
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
        elif opened:
            fence = opened.group(1)
        else:
            yield line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation except ``-`` and ``_`` dropped,
    spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of every heading of a markdown page (a repeated one gets ``-1``, ``-2`` ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose(text):
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[str]:
    """The targets of the markdown links in ``text``, outside code blocks and code spans."""
    return [target for line in _prose(text) for target in _LINK.findall(_CODE_SPAN.sub("", line))]


def broken_links(pages: Iterable[Path], root: Path) -> list[str]:
    """``page: target`` for every relative link whose file does not exist, or whose ``#anchor``
    is no heading of the page it names."""
    broken = []
    for page in pages:
        for target in links(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto: ...
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            ok = dest.exists() and (
                not anchor or (dest.suffix == ".md" and anchor in anchors(dest.read_text(encoding="utf-8")))
            )
            if not ok:
                broken.append(f"{page.relative_to(root)}: {target}")
    return broken


def cli_names() -> dict[str, list[str]]:
    """Every command of the CLI by its whole name (``bakeoff db status``), with its option flags."""
    from bakeoff.cli.main import cli

    found: dict[str, list[str]] = {}

    def walk(command: click.Command, name: str) -> None:
        options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
        found[name] = [flag for option in options for flag in (*option.opts, *option.secondary_opts)]
        if isinstance(command, click.Group):
            for sub_name, sub in command.commands.items():
                if not sub.hidden:
                    walk(sub, f"{name} {sub_name}")

    walk(cli, "bakeoff")
    return found


def missing_from_reference(reference: str) -> list[str]:
    """Each command without its ``## bakeoff ...`` section, and each option flag not named (as
    code) in its command's section."""
    sections: dict[str, str] = {}
    for part in re.split(r"^## ", reference, flags=re.MULTILINE)[1:]:
        title, _, body = part.partition("\n")
        sections[title.strip()] = body
    missing = []
    for command, flags in cli_names().items():
        if command not in sections:
            missing.append(command)
            continue
        missing += [f"{command} {flag}" for flag in flags if f"`{flag}`" not in sections[command]]
    return missing


def doc_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_the_reference_is_generated_from_the_current_cli():
    assert REFERENCE.read_text(encoding="utf-8") == reference_markdown(), (
        f"docs/reference.md is out of date: regenerate it with `{REGENERATE}`"
    )


def test_the_reference_names_every_command_and_option():
    reference = REFERENCE.read_text(encoding="utf-8")
    missing = missing_from_reference(reference)
    assert not missing, f"docs/reference.md lacks {', '.join(missing)}: regenerate it with `{REGENERATE}`"
    assert "`--help`" in reference


def test_the_reference_check_catches_a_missing_flag_and_command():
    reference = reference_markdown()
    assert missing_from_reference(reference) == []  # control
    renamed = reference.replace("`--strict-placement`", "`--strict-placment`")
    assert missing_from_reference(renamed) == ["bakeoff trial --strict-placement"]
    dropped = reference.replace("\n## bakeoff db status\n", "\n## bakeoff db state\n")
    assert missing_from_reference(dropped) == ["bakeoff db status"]


def test_every_relative_link_and_anchor_resolves():
    broken = broken_links(doc_pages(), ROOT)
    assert not broken, "links to no file or no heading:\n" + "\n".join(broken)


def test_the_link_check_catches_a_missing_file_and_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## What it does, exactly?\n\n## Twice\n\n## Twice\n")
    (tmp_path / "page.md").write_text(
        "# Page\n\n## Does it train? `--check training`\n\n"
        "[fine](other.md) [fine](other.md#what-it-does-exactly) [fine](other.md#twice-1)\n"
        "[fine](#does-it-train---check-training) [web](https://example.com/x.md) `[code](gone.md)`\n"
        "[gone](gone.md) [no anchor](other.md#what-it-does) [no anchor](#page-1)\n"
        "```\n[fenced](gone.md)\n## Not a heading\n```\n[not a heading](#not-a-heading)\n"
    )
    assert broken_links([tmp_path / "page.md"], tmp_path) == [
        "page.md: gone.md",
        "page.md: other.md#what-it-does",
        "page.md: #page-1",
        "page.md: #not-a-heading",
    ]


def test_the_readme_is_short_and_keeps_the_setup_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move detail into docs/"
    for command in SETUP_COMMANDS:
        assert command in lines, f"README.md lost the set-up command {command!r} (a CI script runs it)"
