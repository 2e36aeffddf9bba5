"""Why the worker's query ended, and whether to start it again (pure).

A long-running worker meets failures that are not its app's: Spark's Python worker not
connecting back in time on a starved host, a Python worker process killed or crashed, a
py4j or broker connection reset. Those end the query exactly as a bug in the app does,
and used to end the worker with it, its lease and tasks handed over. Now a query whose
failure shows no frame of the app's own files is started again in the same process, its
tasks from their checkpoints as after a handover, after a growing pause and at most
``max_restarts`` times within ``window_s``; one whose traceback runs through the app's
code fails the worker at once, as before (a restart would only fail the same way, later).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FRAME = re.compile(r'File "([^"]+)", line \d+')

#: what a failure of Spark, py4j or the source's infrastructure says, for the log's one
#: line about it (the classification itself is by the app's frames, not these)
KNOWN_CAUSES = (
    "failed to connect back",
    "Python worker exited unexpectedly",
    "Connection reset",
    "Connection refused",
    "Broken pipe",
    "KafkaException",
    "KafkaError",
    "TimeoutException",
    "Answer from Java side is empty",
)


@dataclass(frozen=True, slots=True)
class QueryFailure:
    """A dead query's failure: ``in_app`` when its traceback runs through the app's code."""

    in_app: bool
    summary: str  # one line for the logs and the worker's stats
    text: str


def app_file(module_name: str, is_package: bool = False) -> str:
    """The path a traceback's frames of module ``module_name`` end with, wherever its
    copy runs (the driver's checkout, or the folder Spark ships it to on executors):
    ``examples/first_job.py`` for ``examples.first_job``."""
    path = module_name.replace(".", "/")
    return f"{path}/__init__.py" if is_package else f"{path}.py"


def classify(text: str, app_files: tuple[str, ...]) -> QueryFailure:
    """The failure ``text`` (the query's exception, Python tracebacks included) of a
    worker running the app whose source files end with ``app_files``
    (:func:`app_file`)."""
    frames = _FRAME.findall(text)
    in_app = any(path == f or path.endswith("/" + f)
                 for path in frames for f in app_files if f)
    return QueryFailure(in_app, summary(text), text)


def summary(text: str, limit: int = 200) -> str:
    """The line of ``text`` naming the first of :data:`KNOWN_CAUSES` it has, else its
    first non-empty line."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("at ")]  # (JVM frames)
    for cause in KNOWN_CAUSES:  # (the most telling first)
        for line in lines:
            at = line.find(cause)
            if at >= 0:  # from the message the cause is in ("SparkException: <it>")
                start = line.rfind(": ", 0, at)
                return line[start + 2 if start >= 0 else 0:][:limit]
    return (lines[0] if lines else "no exception recorded")[:limit]


def python_traceback(text: str) -> str:
    """The last Python traceback in ``text`` (the app's, when the app failed), up to its
    exception's line; ``text`` itself when it has none."""
    start = text.rfind("Traceback (most recent call last):")
    if start < 0:
        return text
    lines = text[start:].splitlines()
    kept = [lines[0]]
    for line in lines[1:]:
        kept.append(line)
        if line and not line.startswith((" ", "\t")):  # the exception's own line
            break
    return "\n".join(kept)


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """At most ``max_restarts`` restarts within ``window_s``, the n-th after
    ``first_delay_s * 2 ** (n - 1)`` (at most ``max_delay_s``)."""

    max_restarts: int = 5
    window_s: float = 600.0
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"query restarts must be 0 or more: {self.max_restarts}")
        if not self.window_s > 0 or not self.first_delay_s >= 0:
            raise ValueError("a restart window must be positive and a delay not negative")


@dataclass(slots=True)
class Restarts:
    """The restarts so far (their times), under a :class:`RestartPolicy`."""

    policy: RestartPolicy
    times: list[float] = field(default_factory=list)
    total: int = 0

    def next_delay(self, now: float) -> float | None:
        """The pause before the next restart, or None when the bound is spent (the
        restarts within the window are ``max_restarts`` already). Counts it."""
        self.times = [t for t in self.times if now - t < self.policy.window_s]
        if len(self.times) >= self.policy.max_restarts:
            return None
        self.times.append(now)
        self.total += 1
        delay: float = self.policy.first_delay_s * 2.0 ** (len(self.times) - 1)
        return min(self.policy.max_delay_s, delay)


__all__ = ["KNOWN_CAUSES", "QueryFailure", "RestartPolicy", "Restarts", "app_file",
           "classify", "python_traceback", "summary"]
