"""The ``bakeoff`` command group, on its own so that every command module can register on it.

The command modules (:mod:`bakeoff.cli.main`, :mod:`bakeoff.cli.listings`,
:mod:`bakeoff.cli.revisit`, :mod:`bakeoff.cli.kb`, :mod:`bakeoff.cli.script`,
:mod:`bakeoff.cli.sweep`) import this group; the entry point :func:`bakeoff.cli.main.main` imports the command modules.
Nothing here imports them back.
"""

from __future__ import annotations

import click

__all__ = ["cli"]


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Example: bakeoff trial arch:llama --on cpu,cpu+inductor",
)
@click.version_option(package_name="bakeoff")
def cli() -> None:
    """Can this PyTorch application move to another accelerator backend, and what does it cost?

    bakeoff runs a workload on several targets (device + execution mode + dtype), checks each
    against a preserved baseline, times it against the eager CPU reference, and keeps every
    run in a knowledge base.
    """
