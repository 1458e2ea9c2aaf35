"""``python -m sparklog.cli`` runs the ``sparklog`` command."""

from sparklog.cli import main

main()
