"""``python -m broker_lite [--config PATH] [--root URL] [--listen HOST:PORT] [--id N]``."""

# A process's entry point, not part of the broker's core (the docstring above is --help's):
# it hands the broker the mirroring application's hook (broker key ``mirror_links``; the
# Flight mirror link actions), which the rest of the broker package never imports
# (DESIGN.md §1; tests/packaging/test_layers.py).

from __future__ import annotations

import argparse
import sys

from sparklog.broker_lite.server import serve
from sparklog.clock import Clock, now_ms
from sparklog.errors import SparklogError
from sparklog.mirror.admin import RootLinks


def main(argv: list[str] | None = None, *, clock_ms: Clock = now_ms) -> int:
    """Parse the command line and serve; ``clock_ms`` is the broker's wall clock."""
    parser = argparse.ArgumentParser(prog="python -m broker_lite", description=__doc__)
    parser.add_argument("--config", help="broker TOML file (conf/broker.toml documents keys)")
    parser.add_argument("--root", help="storage root URL (overrides the config)")
    parser.add_argument("--listen", help="HOST:PORT to listen on (port 0 = any free port)")
    parser.add_argument("--id", type=int, dest="broker_id", help="broker id")
    parser.add_argument("--kafka-listen", help='Kafka protocol HOST:PORT ("" disables)')
    args = parser.parse_args(argv)
    try:
        serve(
            args.config,
            args.root,
            args.listen,
            args.broker_id,
            args.kafka_listen,
            clock_ms=clock_ms,
            mirror=RootLinks,
        )
    except SparklogError as exc:
        print(f"broker_lite: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
