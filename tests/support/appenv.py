"""Virtual environments for the applications the Kafka tests run (Quix Streams, Faust),
apart from the project's own: their pins conflict with constraints.txt (quixstreams caps
confluent-kafka below 2.13, the project pins 2.16.1; faust-streaming caps click below 8.4,
the project pins 8.5.1), and an application run as a subprocess needs only its own packages.

``app_python(requirements)`` makes ``build/apps/<stem>`` from a committed requirements file
of exact pins (``pip install -r``, from PyPI) on first use, again whenever that file
changes, and gives its interpreter; the reason instead where the venv cannot be made, so
the test can skip saying why. ``AppProcesses`` starts an application's runs, each logging
to a file of its own, and kills those still running at the test's end.
"""

from __future__ import annotations

import fcntl
import hashlib
import pathlib
import subprocess
import sys
from collections.abc import Sequence

#: where the applications' venvs are made, one folder per requirements file
APPS_DIR = pathlib.Path(__file__).resolve().parents[2] / "build" / "apps"


def app_python(requirements: pathlib.Path) -> tuple[pathlib.Path | None, str]:
    """The interpreter of the venv holding ``requirements`` (made if missing or stale),
    or None and the reason it could not be made."""
    venv = APPS_DIR / requirements.stem
    python = venv / "bin" / "python"
    stamp = venv / "requirements.sha256"
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    APPS_DIR.mkdir(parents=True, exist_ok=True)
    # one install at a time: test modules in parallel workers may want the same venv
    with open(APPS_DIR / f".{requirements.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == wanted:
            return python, ""
        steps = (
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
        )
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                return None, f"{' '.join(step[:4])} failed: {done.stderr.strip()[-300:]}"
        stamp.write_text(wanted)
    return python, ""


class AppProcesses:
    """Runs of one application script in its venv: ``start`` launches one with its output
    in ``WORKDIR/<name>.log``; ``stop_all`` kills (SIGKILL) those still running."""

    def __init__(self, python: pathlib.Path, script: pathlib.Path, workdir: pathlib.Path):
        self.python, self.script, self.workdir = python, script, workdir
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        with open(self.workdir / f"{name}.log", "wb") as log:
            run = subprocess.Popen(
                [str(self.python), str(self.script), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        self.started.append(run)
        return run

    def stop_all(self) -> None:
        for run in self.started:
            if run.poll() is None:
                run.kill()
                run.wait()
