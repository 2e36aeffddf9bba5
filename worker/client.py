"""The worker's side of the REST API: register, heartbeat, follow job models, ack, read
and commit checkpoints. Transient failures (connection errors, 5xx, 503 while the
coordinator fails over) are retried with exponential backoff and full jitter; 4xx answers
are the coordinator's word and are returned or raised as they are."""

from __future__ import annotations

import logging
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from grouping.key_hash import KeyHash

log = logging.getLogger("coxswain.worker.client")


class CoordinatorError(Exception):
    """The coordinator refused a request (4xx); ``code`` is API.md's error code."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail = status, code, detail


class Fenced(CoordinatorError):
    """409 ``fenced``: this processor may not commit these tasks any more."""


class LeaseLost(CoordinatorError):
    """404 ``unknown_processor``: the lease expired; stop processing and register again."""


def _code_of(r: httpx.Response) -> str | None:
    """The error code of an error answer (None when it has no JSON body)."""
    try:
        return str(r.json().get("error"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Registration:
    """What ``POST /processors`` answered."""

    processor_id: str
    lease_ttl_ms: int
    heartbeat_interval_ms: int


class CoordinatorClient:
    """A thread-safe client of a coordinator's replicas (or a load balancer in front).

    ``url`` may list replicas, comma-separated: any replica answers every route (followers
    forward nothing; they read and write the shared store), so a request that finds its
    replica unreachable or unavailable (5xx) goes to the next one. Requests are retried,
    with jittered exponential backoff, for up to ``retry_for_s``: a ZooKeeper or database
    outage shorter than that costs a worker nothing (its lease is kept meanwhile).
    """

    def __init__(self, url: str, token: str | None = None, *, retry_for_s: float = 90.0,
                 base_delay_s: float = 0.1, max_delay_s: float = 3.0,
                 request_timeout_s: float = 15.0,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 verify: ssl.SSLContext | bool = True) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
        if not self.urls:
            raise ValueError("no coordinator URL given")
        # a stopped (SIGSTOP) replica accepts connections and never answers: a short read
        # timeout, lengthened per call by the long poll's wait
        self._timeout_s = request_timeout_s
        self._http = httpx.Client(headers=headers, verify=verify,
                                  timeout=httpx.Timeout(request_timeout_s, connect=5.0))
        self._current = 0
        self._retry_for_s = retry_for_s
        self._base, self._cap = base_delay_s, max_delay_s
        self._sleep, self._clock = sleep, clock
        # the retries' jitter draws from a generator of the client's own: the global one
        # is the app's (and a test's: hypothesis flags draws from it by other threads)
        self._jitter = random.Random()
        self._lease_token: str | None = None  # of the last registration
        #: called when a request succeeds after transport errors (a reconnection, maybe
        #: to another replica): the worker heartbeats at once, so the coordinator sees it
        #: alive although the connection of its long poll closed
        self.reconnected: Callable[[], None] | None = None

    def _lease(self) -> dict[str, str]:
        return {"Coxswain-Lease-Token": self._lease_token} if self._lease_token else {}

    def close(self) -> None:
        """Close connections."""
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        deadline = self._clock() + self._retry_for_s
        attempt = 0
        while True:
            index = self._current
            url = self.urls[index % len(self.urls)]
            try:
                r = self._http.request(method, url + path, **kwargs)
            except httpx.TransportError as e:
                reason = f"{type(e).__name__}"
            else:
                if r.status_code < 500:
                    if attempt and self.reconnected is not None:
                        self.reconnected()
                    return r
                reason = f"HTTP {r.status_code}"
            if len(self.urls) > 1 and self._current == index:
                self._current = index + 1  # the next replica, for every thread
            if self._clock() >= deadline:
                raise ConnectionError(f"{method} {path}: coordinator unavailable for "
                                      f"{self._retry_for_s:.0f}s ({reason})")
            delay = self._jitter.uniform(0, min(self._cap, self._base * 2 ** attempt))
            attempt += 1
            log.warning("%s %s at %s failed (%s); retrying in %.2fs", method, path, url,
                        reason, delay)
            self._sleep(delay)

    @staticmethod
    def _raise(r: httpx.Response) -> None:
        if r.status_code < 400:
            return
        try:
            body = r.json()
            code, detail = str(body.get("error")), str(body.get("detail"))
        except ValueError:
            code, detail = "http_error", r.text
        if r.status_code == 409 and code == "fenced":
            raise Fenced(r.status_code, code, detail)
        if r.status_code == 404 and code == "unknown_processor":
            raise LeaseLost(r.status_code, code, detail)
        raise CoordinatorError(r.status_code, code, detail)

    def register(self, processor_id: str | None, location_id: str) -> Registration:
        """Register (or re-register) this processor."""
        # the hashes this release computes key buckets with: the coordinator refuses a
        # worker that cannot compute the job's (its buckets would not be the job's)
        body: dict[str, Any] = {"locationId": location_id,
                                "keyHashes": [h.value for h in KeyHash]}
        if processor_id:
            body["processorId"] = processor_id
        r = self._call("POST", "/processors", json=body)
        if r.status_code == 422 and "keyHashes" in r.text:
            # a coordinator from before per-job key hashes refuses the field; its jobs
            # are all crc32, which this worker computes (the documented upgrade order:
            # workers first)
            log.info("the coordinator predates per-job key hashes: registering without "
                     "naming ours")
            del body["keyHashes"]
            r = self._call("POST", "/processors", json=body)
        self._raise(r)
        d = r.json()
        self._lease_token = str(d["leaseToken"])  # heartbeats, acks, commits carry it
        return Registration(d["processorId"], int(d["leaseTtlMs"]),
                            int(d["heartbeatIntervalMs"]))

    def heartbeat(self, processor_id: str, task_lags: dict[str, int] | None = None,
                  stats: dict[str, Any] | None = None) -> int | None:
        """Renew the lease; returns the latest job model version (LeaseLost on 404)."""
        body: dict[str, Any] = {}
        if task_lags is not None:
            body["taskLags"] = task_lags
        if stats is not None:
            body["stats"] = stats
        r = self._call("POST", f"/processors/{processor_id}/heartbeat", json=body,
                       headers=self._lease())
        self._raise(r)
        version = r.json().get("jobModelVersion")
        return None if version is None else int(version)

    def leave(self, processor_id: str) -> None:
        """Deregister now (graceful stop)."""
        self._raise(self._call("DELETE", f"/processors/{processor_id}", headers=self._lease()))

    def job_model(self, processor_id: str, since: int | None = None, wait_ms: int = 0,
                  barrier: str | None = None) -> dict[str, Any] | None:
        """The latest job model, or None when nothing newer than ``since`` came within
        ``wait_ms`` (or no model exists yet)."""
        params: dict[str, Any] = {"processorId": processor_id}
        if since is not None:
            params["since"] = since
            params["waitMs"] = wait_ms
        if barrier is not None:
            params["barrier"] = barrier
        # the lease token marks the long poll as this incarnation's: the coordinator takes
        # its connection closing (a killed worker's) as a sign of death
        r = self._call("GET", "/jobmodel", params=params, headers=self._lease(),
                       timeout=httpx.Timeout(self._timeout_s + wait_ms / 1000, connect=5.0))
        if r.status_code == 304:
            return None
        if r.status_code == 404 and since is None and _code_of(r) == "no_job_model":
            return None
        self._raise(r)  # LeaseLost on 404 unknown_processor: this lease is gone
        return dict(r.json())

    def ack(self, processor_id: str, version: int) -> str:
        """Acknowledge ``version``; returns the barrier state."""
        r = self._call("POST", f"/jobmodel/{version}/ack", json={"processorId": processor_id},
                       headers=self._lease())
        self._raise(r)
        return str(r.json()["barrier"])

    def status(self) -> dict[str, Any]:
        """``GET /status``: the job's state, its monitored inputs among it."""
        r = self._call("GET", "/status")
        self._raise(r)
        return dict(r.json())

    def checkpoints(self, task_names: list[str]) -> dict[str, Any]:
        """Resolved start offsets and skip watermarks of ``task_names``."""
        r = self._call("GET", "/checkpoints", params={"taskName": task_names})
        self._raise(r)
        return dict(r.json())

    def state_markers(self) -> tuple[str | None, dict[str, Any]]:
        """The processor that should collect the blob store, and every task's last
        checkpoint id and state checkpoint markers."""
        r = self._call("GET", "/checkpoints/state-markers")
        self._raise(r)
        body = r.json()
        return body.get("collector"), dict(body["tasks"])

    def commit(self, processor_id: str, version: int, checkpoints: dict[str, Any]) -> int:
        """Commit per-bucket offsets; returns how many moved forward (Fenced on 409)."""
        r = self._call("POST", "/checkpoints", json={
            "processorId": processor_id, "jobModelVersion": version,
            "checkpoints": checkpoints}, headers=self._lease())
        self._raise(r)
        return int(r.json()["advanced"])

    def recover(self, processor_id: str, version: int, checkpoints: dict[str, Any]) -> int:
        """Post the checkpoint a fenced processor committed in its transaction but never
        posted (exactly-once output): as a participant of the version that lists it as
        fenced, or as that processor's next incarnation (this client's lease token).
        Returns how many offsets moved forward (Fenced on 409: already done)."""
        r = self._call("POST", "/checkpoints/recovered", json={
            "processorId": processor_id, "jobModelVersion": version,
            "checkpoints": checkpoints}, headers=self._lease())
        self._raise(r)
        return int(r.json()["advanced"])
