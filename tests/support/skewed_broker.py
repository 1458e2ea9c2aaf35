"""``python skewed_broker.py SKEW_MS [broker arguments]``: a broker whose wall clock runs
``SKEW_MS`` milliseconds off (the chaos tests' clock skew), given to it as its clock,
as production code takes no test hooks."""

from __future__ import annotations

import sys

from sparklog.broker_lite.__main__ import main
from sparklog.clock import now_ms

if __name__ == "__main__":
    skew_ms = int(sys.argv[1])
    sys.exit(main(sys.argv[2:], clock_ms=lambda: now_ms() + skew_ms))
