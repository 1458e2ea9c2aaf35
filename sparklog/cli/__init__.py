"""The ``sparklog`` command: topics, produce, consume, groups, broker, demo."""

from __future__ import annotations


def main() -> None:
    """Run the command line (imported lazily so ``--help`` and metadata commands start fast)."""
    from sparklog.cli.app import main as run

    run()


__all__ = ["main"]
