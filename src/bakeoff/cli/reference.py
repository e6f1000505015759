"""The command reference, ``docs/reference.md``, written from the click command tree.

Each command's usage, the first paragraph of its help, its options (every flag name, the value
it takes, its default, its help) and its examples are read from the commands themselves, so the
reference cannot drift from the CLI: ``tests/unit/test_docs.py`` compares the file with
:func:`reference_markdown`. Regenerate it with :data:`REGENERATE`.

Only public click API is used (no formatter, no terminal width), so the text is the same on
every machine.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Iterator

import click

__all__ = ["REGENERATE", "commands", "reference_markdown"]

#: The command that rewrites the file, named wherever the file is found out of date.
REGENERATE = "python -m bakeoff.cli.reference > docs/reference.md"

#: A default the help text states itself (where the option's own default is a placeholder).
_DEFAULT_IN_HELP = re.compile(r"\s*\[default: ([^\]]+)\](\.?)\s*$")
#: Text outside backtick spans that markdown would read as emphasis, HTML or a table cell's end
#: (an underscore inside a word, as in RUN_ID, is no emphasis).
_MARKUP = re.compile(r"([\\*|]|<(?=[A-Za-z/]))")


def commands(root: click.Command | None = None) -> Iterator[tuple[str, click.Command, click.Context]]:
    """Yield ``(name, command, context)`` for ``root`` (default: the ``bakeoff`` group) and every
    command under it, depth first, subcommands sorted by name and named by their whole path
    (``bakeoff db status``). Hidden commands are left out, as ``--help`` leaves them out."""
    if root is None:
        from bakeoff.cli.main import cli

        root = cli
    yield from _walk(root, click.Context(root, info_name="bakeoff", **root.context_settings))


def _walk(command: click.Command, ctx: click.Context) -> Iterator[tuple[str, click.Command, click.Context]]:
    yield ctx.command_path, command, ctx
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            sub = command.commands[name]
            if not sub.hidden:
                yield from _walk(sub, click.Context(sub, info_name=name, parent=ctx, **sub.context_settings))


def reference_markdown() -> str:
    """The whole reference as markdown: an index of the commands, then one section each."""
    found = list(commands())
    root_ctx = found[0][2]
    lines = [
        "# Command reference",
        "",
        f"Generated from the commands themselves by `{REGENERATE}`; do not edit it by hand.",
        "The guide explains the options in context: start at [Commands](commands.md).",
        "",
        f"Every command takes {', '.join(f'`{name}`' for name in root_ctx.help_option_names)}: its help, "
        "ending with an example.",
        "",
    ]
    lines += [f"- [`{name}`](#{_slug(name)}): {_summary(command)}" for name, command, _ in found]
    for name, command, ctx in found:
        lines += ["", f"## {name}", "", _summary(command), "", "```", " ".join(_usage(command, ctx)), "```"]
        options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
        if options:
            lines += ["", "| option | value | default | description |", "| --- | --- | --- | --- |"]
            lines += [_row(option) for option in options]
        if isinstance(command, click.Group) and ctx.parent is not None:
            subs = [f"{name} {sub}" for sub in sorted(command.commands) if not command.commands[sub].hidden]
            lines += ["", "Commands: " + ", ".join(f"[`{sub}`](#{_slug(sub)})" for sub in subs) + "."]
        examples = _examples(command.epilog or "")
        if examples:
            lines += ["", "```", *examples, "```"]
    return "\n".join(lines) + "\n"


def _summary(command: click.Command) -> str:
    """The first paragraph of the command's help, on one line."""
    text = inspect.cleandoc((command.help or "").split("\f")[0])
    return _markdown(" ".join(text.split("\n\n")[0].split()))


def _usage(command: click.Command, ctx: click.Context) -> list[str]:
    return [ctx.command_path, *command.collect_usage_pieces(ctx)]


def _row(option: click.Option) -> str:
    names = ", ".join(f"`{name}`" for name in [*option.opts, *option.secondary_opts])
    help_text = " ".join(inspect.cleandoc(option.help or "").split())
    stated = _DEFAULT_IN_HELP.search(help_text)
    help_text = _DEFAULT_IN_HELP.sub(r"\2", help_text)
    if option.is_flag:
        value, default = "flag", "off"
    else:
        value = option.metavar or _type_name(option.type)
        default = stated.group(1) if stated else _default(option)
    envvars = [option.envvar] if isinstance(option.envvar, str) else list(option.envvar or ())
    defaults = [_markdown(default)] if default else []
    defaults += [f"env `{name}`" for name in envvars]
    cells = [names, _markdown(value), "; ".join(defaults), _markdown(help_text)]
    return "| " + " | ".join(cell or "-" for cell in cells) + " |"


def _type_name(kind: click.ParamType) -> str:
    if isinstance(kind, click.Choice):
        return "|".join(str(choice) for choice in kind.choices)
    return kind.name.upper()


def _default(option: click.Option) -> str:
    """The default as a user types it, or empty where the option has none to show."""
    if isinstance(option.show_default, str):
        return option.show_default
    value = option.default
    if isinstance(value, (list, tuple)):
        return ",".join(str(each) for each in value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    return ""


def _examples(epilog: str) -> list[str]:
    """The command lines of an ``Example:``/``Examples:`` epilog, continuation lines indented."""
    found = []
    for line in epilog.replace("\b", "").splitlines():
        header = re.match(r"\s*Examples?:\s*", line)
        if header and line[header.end() :].strip():
            found.append(line[header.end() :])
        elif line.strip() and not header:
            found.append(line.rstrip())
    return textwrap.dedent("\n".join(found)).splitlines()


def _markdown(text: str) -> str:
    """``text`` safe in a table cell: markup escaped outside backtick spans, ``|`` everywhere."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part.replace("|", "\\|") if part.startswith("`") else _MARKUP.sub(r"\\\1", part) for part in parts)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading of plain words."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


if __name__ == "__main__":
    print(reference_markdown(), end="")
