"""Kafka's other everyday tools: a segment dump (kafka-dump-log) and perf tests."""

from __future__ import annotations

import typer


def register(app: typer.Typer, perf_app: typer.Typer) -> None:
    """Add dump-log to ``app`` and produce/consume to ``perf_app``."""
