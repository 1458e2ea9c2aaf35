"""``python -m sparklog`` runs the ``sparklog`` command (as ``python -m sparklog.cli``)."""

from sparklog.cli import main

main()
