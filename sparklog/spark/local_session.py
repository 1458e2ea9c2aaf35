"""The local Spark that sparklog's own commands start (``connect delta-sink``, ``demo``).

Three things a person running those commands should not have to know about Spark:

* Spark's own log (log4j lines, Java stack traces, the Python workers' warnings)
  goes to a file the command names, not to the terminal: the JVM inherits stderr
  when it is launched, so fd 2 points at the file just for the launch.
* The driver binds to loopback (``127.0.0.1``), not to whatever address the host
  name resolves to, unless the user says otherwise with ``SPARK_LOCAL_IP`` (Spark's
  own variable, which then names the address) or by running under ``spark-submit``
  (whose JVM, already started, keeps its settings).
* Spark's Python-worker start-up timeout (a worker must connect back within 10 s,
  hard-coded in Spark; docs/spark.md) becomes one line saying what happened and
  what to do, with :func:`worker_timeout_line`; any other failure of Spark's
  becomes the head of its message (:func:`first_lines`), its whole text and
  traceback appended to the log (:func:`log_failure`), not a Java stack on the
  terminal.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Iterator
from typing import Any

LOOPBACK = "127.0.0.1"

#: Spark's messages when a Python worker did not connect back in time
#: (``PythonWorkerFactory`` in Spark 4.0 to 4.3: the error, and its cause's text).
WORKER_TIMEOUT_MARKERS = (
    "Python worker failed to connect back",
    "waiting for the Python worker to connect back",
)


def launches_jvm() -> bool:
    """True when building a session here starts a JVM (no spark-submit, no live context)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit started the JVM already
        return False
    from pyspark import SparkContext

    return SparkContext._active_spark_context is None


def driver_address(env: dict[str, str] | None = None) -> str:
    """The address a local driver binds to: ``SPARK_LOCAL_IP`` if set, else loopback."""
    source = os.environ if env is None else env
    return source.get("SPARK_LOCAL_IP") or LOOPBACK


def local_conf(env: dict[str, str] | None = None) -> dict[str, str]:
    """The driver settings of a session started here: bound to :func:`driver_address`."""
    address = driver_address(env)
    return {"spark.driver.bindAddress": address, "spark.driver.host": address}


@contextlib.contextmanager
def stderr_to(log_path: str) -> Iterator[None]:
    """Point fd 2 at ``log_path`` (appending) while the block runs, then restore it."""
    sys.stderr.flush()
    saved = os.dup(2)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)


def start_session(builder: Any, log_path: str) -> Any:
    """``builder.getOrCreate()``; a JVM started here logs to ``log_path`` and binds locally.

    Under spark-submit (or with a session already running) the builder's session is
    returned as Spark made it: its JVM and its settings are the user's.
    """
    if not launches_jvm():
        return builder.getOrCreate()
    address = driver_address()
    for key, value in local_conf().items():
        builder = builder.config(key, value)
    saved = os.environ.get("SPARK_LOCAL_IP")
    os.environ["SPARK_LOCAL_IP"] = address  # the JVM's own address lookups, not the host's
    try:
        with stderr_to(log_path):
            return builder.getOrCreate()
    finally:
        if saved is None:
            os.environ.pop("SPARK_LOCAL_IP", None)
        else:
            os.environ["SPARK_LOCAL_IP"] = saved


def is_worker_timeout(exc: BaseException | str) -> bool:
    """True when ``exc`` (or its text) is Spark's Python-worker connect-back timeout."""
    text = exc if isinstance(exc, str) else _text(exc)
    return any(marker in text for marker in WORKER_TIMEOUT_MARKERS)


def log_size(log_path: str) -> int:
    """How much ``log_path`` holds now (0: not there yet): where this run's lines start."""
    try:
        return os.path.getsize(log_path)
    except OSError:
        return 0


def timed_out(exc: BaseException, log_path: str, since: int = 0) -> bool:
    """Whether ``exc`` comes from the Python-worker timeout, by its text or by Spark's log.

    When the worker that looks data sources up is the one too slow, Spark logs the
    timeout (WARN, "Skipping the lookup of Python Data Sources") and goes on without
    them, so the error raised is "Failed to find the data source: sparklog"; the
    timeout is then only in the log, after ``since`` (this run's part of it).
    """
    if is_worker_timeout(exc):
        return True
    try:
        with open(log_path, "rb") as log:
            log.seek(since)
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return False
    return is_worker_timeout(text)


def worker_timeout_line(log_path: str | None = None) -> str:
    """One line for the Python-worker timeout: what happened and what to do."""
    where = f"; Spark's log: {log_path}" if log_path else ""
    return (
        "a Spark Python worker did not start within Spark's fixed 10 s (the machine is "
        "too busy): run it again when the load is lower, or give it more CPU "
        f"(docs/spark.md, 'Python worker start-up'){where}"
    )


def _text(exc: BaseException) -> str:
    """``exc``'s message and its causes' (a Py4J error's text holds the Java chain)."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(str(current))
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def first_lines(exc: BaseException) -> str:
    """The head of an error's message: its type and first three non-blank lines, up to a
    JVM stack frame (a Spark error's message holds the Java stack and the query plan)."""
    lines: list[str] = []
    for line in str(exc).strip().splitlines():
        if line.lstrip().startswith("at ") or len(lines) == 3:
            break
        if line.strip():
            lines.append(line.strip())
    text = " ".join(lines)
    return f"{type(exc).__name__}: {text[:500]}"


def failure_line(exc: BaseException) -> str:
    """One line for a failure of Spark's: the Python error a foreachBatch function or a
    Python worker raised, where Spark's message wraps one (a failed streaming query says
    ``[STREAM_FAILED] ... Traceback ...``: the line that matters is that traceback's
    last), else :func:`first_lines`."""
    marker = "Traceback (most recent call last):"
    text = str(exc)
    if marker not in text:
        return first_lines(exc)
    lines = text[text.rindex(marker) + len(marker) :].splitlines()
    for index, line in enumerate(lines):
        if not line.strip() or line[0].isspace() or ": " not in line + " ":
            continue  # a frame, its source line, or a blank
        kind, _, message = line.partition(":")
        message = message.strip()
        if not message:  # Spark's errors put their text on the next line
            message = next((rest.strip() for rest in lines[index + 1 :] if rest.strip()), "")
        return f"{kind.rsplit('.', 1)[-1]}: {message[:500]}"
    return first_lines(exc)


def log_failure(log_path: str, exc: BaseException) -> None:
    """Appends ``exc``'s whole traceback (its Java stack and query plan included) to the
    log at ``log_path``, so the one line a command prints loses nothing."""
    with contextlib.suppress(OSError), open(log_path, "a", encoding="utf-8") as log:
        log.write("sparklog: the command failed with:\n")
        log.write("".join(traceback.format_exception(exc)))
