"""The node Kafka clients of the listener's tests (kafkajs, @platformatic/kafka), at the
versions tests/kafka/js/package-lock.json pins.

Installed on first use by ``npm ci`` from the committed lock into build/kafkajs
(``SPARKLOG_KAFKAJS_DIR`` names another install); tests skip, saying why, only where
node and npm are missing.
"""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

#: the committed package.json and lock, and the scripts the tests run
SCRIPTS_DIR = pathlib.Path(__file__).resolve().parents[1] / "kafka" / "js"

#: the packages tests/kafka/js/package-lock.json pins, installed there on first use
KAFKAJS_DIR = pathlib.Path(__file__).resolve().parents[2] / "build" / "kafkajs"


def node_env() -> dict[str, str]:
    env = dict(os.environ)
    where = os.environ.get("SPARKLOG_KAFKAJS_DIR") or str(KAFKAJS_DIR)
    extra = str(pathlib.Path(where) / "node_modules")
    env["NODE_PATH"] = os.pathsep.join(p for p in (extra, env.get("NODE_PATH")) if p)
    return env


def install_kafkajs(package: str = "kafkajs") -> str | None:
    """Install the pinned node clients (npm ci from the committed lock) unless node resolves
    ``package`` (an install made before the lock pinned it is redone); the reason if it
    cannot be had."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node/npm are not installed"
    resolve = ["node", "-e", f"require.resolve({json.dumps(package)})"]
    if subprocess.run(resolve, env=node_env(), capture_output=True).returncode == 0:
        return None
    KAFKAJS_DIR.mkdir(parents=True, exist_ok=True)
    # one install at a time: the test modules that use it may run in parallel workers
    with open(KAFKAJS_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if subprocess.run(resolve, env=node_env(), capture_output=True).returncode == 0:
            return None  # another worker installed it meanwhile
        for name in ("package.json", "package-lock.json"):
            shutil.copy(SCRIPTS_DIR / name, KAFKAJS_DIR / name)
        done = subprocess.run(
            ["npm", "ci", "--silent", "--no-audit", "--no-fund"],
            cwd=KAFKAJS_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
    if done.returncode != 0:
        return f"npm ci of {package} failed: {done.stderr.strip()[-300:]}"
    return None


def run_script(name: str, *args: str, timeout_s: float = 180) -> dict[str, Any]:
    """Run tests/kafka/js/``name`` with node; the JSON object of its last output line."""
    done = subprocess.run(
        ["node", str(SCRIPTS_DIR / name), *args],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer
