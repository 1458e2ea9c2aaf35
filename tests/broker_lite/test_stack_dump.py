"""SIGUSR1's thread dump (docs/operations.md) while threads start and end.

The dump used to come from ``faulthandler.register``, whose C handler walks other
threads' frames while they run: a thread ending during the walk crashed the broker
(seen once in CI, just after start-up, when the broker's gc-freeze thread ends).
Here a process installs the broker's handler and starts and joins threads without
pause while the test asks for dump after dump, each waited for in its output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from tests.support.brokers import REPO

CHURN = textwrap.dedent(
    """
    import threading
    from sparklog.broker_lite.server import dump_stacks_on_sigusr1

    dump_stacks_on_sigusr1()
    print("ready", flush=True)

    def work():
        sum(range(1000))

    while True:
        threads = [threading.Thread(target=work) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    """
)

DUMPS = 300


def test_dump_after_dump_while_threads_start_and_end_keeps_the_process_alive() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHURN],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        for dump in range(DUMPS):
            os.kill(proc.pid, signal.SIGUSR1)
            for line in proc.stderr:  # each dump shows the main thread's module frame once
                if "in <module>" in line:
                    break
            else:
                raise AssertionError(f"the process ended at dump {dump}: {proc.wait()}")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
