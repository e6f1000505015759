"""``python -m bakeoff`` runs the same CLI as the ``bakeoff`` command."""

from bakeoff.cli.main import main

main()
