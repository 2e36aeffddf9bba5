"""How the driver tells its executors that a batch is cut (``worker.cuts``): where the
signal is set, and how an executor looks for it before each piece of a task's rows.

Two channels, one contract: a ``where`` string the executors get in the batch's cut
plan, and ``is_cut(where, batch_id)`` in the executor.

* a folder (``local[N]``: the executors' Python workers run on the driver's host): a file
  named for the batch; looking is one ``stat``;
* HTTP on the driver (a cluster: executors on other hosts, which reach the driver
  anyway): ``GET /cuts/<batch id>`` answers 200 once the batch is cut, 404 before; one
  request per piece (a quarter second of work), a few milliseconds.

Missing a signal is always safe: a task that never sees it processes its rows whole and
reports nothing, so the batch commits it whole, as a batch that was not cut (the
handover then waits for that task). So an executor that cannot reach the driver's
server, or a request that fails or times out, reads "not cut".

Missing a *report* is not: a task that stopped early and whose report never arrives
would be committed whole, past the records it left. Reports travel in a Spark
accumulator, whose updates the driver applies once per successful task; but Spark's
scheduler logs and drops an update it fails to apply, and the batch commits without it.
On a folder, each report is also written as a file beside the signal (written before
the task ends: a failed write fails the task, loudly), and the driver takes the lowest
offset either channel names, logging an error when they differ.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

#: (task, topic, partition) -> the offset of the first record the task left
Left = dict[tuple[str, str, int], int]

log = logging.getLogger("coxswain.worker")

#: an executor's longest wait for the driver's answer (then: not cut, for this piece)
HTTP_TIMEOUT_S = 0.5


class CutSignals(Protocol):
    """The driver's side: set and clear a batch's signal."""

    @property
    def where(self) -> str:
        """What executors look at (a folder, or the driver's URL)."""

    def cut(self, batch_id: int) -> None:
        """Batch ``batch_id`` is cut (``OSError`` if the signal could not be set)."""

    def clear(self, batch_id: int) -> None:
        """Batch ``batch_id`` is over: its signal goes (and its reports)."""

    def reports(self, batch_id: int) -> Left | None:
        """The reports executors left beside the signal of batch ``batch_id`` (None: this
        channel carries none; the accumulator alone does)."""

    def close(self) -> None:
        """Nothing is signalled any more."""


def signal_path(folder: str | Path, batch_id: int) -> Path:
    """The file whose presence cuts batch ``batch_id``."""
    return Path(folder) / f"cut-{batch_id}"


def report_path(folder: str | Path, batch_id: int, task: str) -> Path:
    """The file holding ``task``'s report for batch ``batch_id``."""
    digest = hashlib.sha1(task.encode(), usedforsecurity=False).hexdigest()[:16]
    return Path(folder) / f"left-{batch_id}-{digest}.json"


def write_report(where: str, batch_id: int, task: str,
                 left: dict[tuple[str, int], int]) -> None:
    """In an executor: ``task`` of batch ``batch_id`` left its records from these offsets
    (per topic, partition) on, in a file beside the signal (a folder channel only; the
    write is atomic, and failing it fails the Spark task)."""
    if where.startswith("http://"):
        return
    path = report_path(where, batch_id, task)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"task": task, "left": [[t, p, o] for (t, p), o in
                                                      sorted(left.items())]}))
    os.replace(tmp, path)


def forget_reports(where: str, batch_id: int, tasks: Iterable[str]) -> None:
    """In an executor, as a Spark task attempt starts: remove what an earlier, failed
    attempt reported for ``tasks`` (the accumulator keeps the successful attempt's
    reports only; the files must too, or a task the retry ran whole would be committed
    to where the failed attempt stopped)."""
    if where.startswith("http://"):
        return
    for task in tasks:
        report_path(where, batch_id, task).unlink(missing_ok=True)


def read_reports(folder: str | Path, batch_id: int) -> Left:
    """The reports written for batch ``batch_id`` (:func:`write_report`)."""
    out: Left = {}
    for path in Path(folder).glob(f"left-{batch_id}-*.json"):
        found = json.loads(path.read_text())
        for topic, partition, offset in found["left"]:
            key = (str(found["task"]), str(topic), int(partition))
            out[key] = min(out.get(key, int(offset)), int(offset))
    return out


def is_cut(where: str, batch_id: int) -> bool:
    """In an executor: whether the driver cut batch ``batch_id``."""
    if not where.startswith("http://"):
        return os.path.exists(signal_path(where, batch_id))
    try:
        with urllib.request.urlopen(f"{where}/cuts/{batch_id}",
                                    timeout=HTTP_TIMEOUT_S) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError, ValueError):  # 404 included: not cut
        return False


def unreachable(where: str) -> str:
    """In an executor: why the driver's signals at ``where`` cannot be read ("" when
    they can: any HTTP answer will do)."""
    if not where.startswith("http://"):
        return "" if os.path.isdir(where) else f"no folder {where} here"
    try:
        with urllib.request.urlopen(f"{where}/cuts/none",
                                    timeout=HTTP_TIMEOUT_S * 4):
            return ""
    except urllib.error.HTTPError:
        return ""
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"{type(e).__name__}: {e}"


class FolderSignals:
    """Signals as files in ``folder`` (executors sharing the driver's disk)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._folder = folder

    @property
    def where(self) -> str:
        return str(self._folder)

    def cut(self, batch_id: int) -> None:
        signal_path(self._folder, batch_id).touch()

    def clear(self, batch_id: int) -> None:
        signal_path(self._folder, batch_id).unlink(missing_ok=True)
        for path in self._folder.glob(f"left-{batch_id}-*.json"):
            path.unlink(missing_ok=True)

    def reports(self, batch_id: int) -> Left | None:
        return read_reports(self._folder, batch_id)

    def close(self) -> None:
        for pattern in ("cut-*", "left-*"):
            for path in self._folder.glob(pattern):
                path.unlink(missing_ok=True)


class HttpSignals:
    """Signals served by the driver: ``GET /cuts/<batch id>`` on ``host`` (the address
    executors reach the driver at, ``spark.driver.host``), on ``port`` (0: any free)."""

    def __init__(self, host: str, port: int = 0) -> None:
        self._cut: set[int] = set()
        self._lock = threading.Lock()
        self._closed = False
        signals = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                prefix, _, batch = self.path.rpartition("/")
                cut = prefix == "/cuts" and batch.isdigit() and signals.is_set(int(batch))
                self.send_response(200 if cut else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass  # a request per piece: not worth a log line each

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="cut-signals", daemon=True)
        self._thread.start()
        address = self._server.server_address
        self._where = f"http://{_url_host(host)}:{address[1]}"
        log.info("cut signals served at %s", self._where)

    @property
    def where(self) -> str:
        return self._where

    def is_set(self, batch_id: int) -> bool:
        with self._lock:
            return batch_id in self._cut

    def cut(self, batch_id: int) -> None:
        with self._lock:
            self._cut.add(batch_id)

    def clear(self, batch_id: int) -> None:
        with self._lock:
            self._cut.discard(batch_id)

    def reports(self, batch_id: int) -> Left | None:
        return None  # executors on other hosts: the accumulator alone

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
