"""A simulated worker speaking the REST API, for tests."""

from __future__ import annotations

from typing import Any, ClassVar

import httpx


class SimWorker:
    """Register, heartbeat, follow job models, ack and commit, as a real worker would."""

    # lease tokens by processor id, shared by every SimWorker of a test run: a test may
    # build a new SimWorker for a processor registered earlier (as after a restart)
    tokens: ClassVar[dict[str, str]] = {}

    def __init__(self, client: httpx.Client, processor_id: str, location_id: str) -> None:
        self.client = client
        self.processor_id = processor_id
        self.location_id = location_id

    @property
    def lease(self) -> dict[str, str]:
        """The header carrying this processor's lease token."""
        return SimWorker.lease_of(self.processor_id)

    @staticmethod
    def lease_of(processor_id: str) -> dict[str, str]:
        """The header carrying the lease token of ``processor_id``'s last registration."""
        token = SimWorker.tokens.get(processor_id)
        return {"Coxswain-Lease-Token": token} if token else {}

    def register(self) -> httpx.Response:
        r = self.client.post("/processors", json={
            "processorId": self.processor_id, "locationId": self.location_id})
        if r.status_code in (200, 201):
            SimWorker.tokens[self.processor_id] = r.json()["leaseToken"]
        return r

    def heartbeat(self, task_lags: dict[str, int] | None = None) -> httpx.Response:
        body: dict[str, Any] = {}
        if task_lags is not None:
            body["taskLags"] = task_lags
        return self.client.post(f"/processors/{self.processor_id}/heartbeat", json=body,
                                headers=self.lease)

    def leave(self) -> httpx.Response:
        return self.client.delete(f"/processors/{self.processor_id}", headers=self.lease)

    def job_model(self, since: int | None = None, wait_ms: int = 0) -> httpx.Response:
        params: dict[str, Any] = {"processorId": self.processor_id}
        if since is not None:
            params["since"] = since
            params["waitMs"] = wait_ms
        return self.client.get("/jobmodel", params=params)

    def tasks(self, model: dict[str, Any]) -> dict[str, Any]:
        container = model["containers"].get(self.processor_id)
        return {} if container is None else {
            name: t for name, t in container["tasks"].items() if t["taskMode"] == "Active"}

    def ack(self, version: int) -> httpx.Response:
        return self.client.post(f"/jobmodel/{version}/ack",
                                json={"processorId": self.processor_id}, headers=self.lease)

    def commit(self, version: int, checkpoints: dict[str, dict[str, Any]]) -> httpx.Response:
        """``checkpoints``: task -> {ssp json key 'p/b' ...} built by the caller."""
        return self.client.post("/checkpoints", json={
            "processorId": self.processor_id, "jobModelVersion": version,
            "checkpoints": checkpoints}, headers=self.lease)


def wait_for_version(client: httpx.Client, since: int, wait_ms: int = 10_000) -> dict[str, Any]:
    r = client.get("/jobmodel", params={"since": since, "waitMs": wait_ms})
    assert r.status_code == 200, (r.status_code, r.text)
    body: dict[str, Any] = r.json()
    return body


def wait_for_members(client: httpx.Client, processor_ids: list[str], since: int = 0
                     ) -> dict[str, Any]:
    """The first version after ``since`` whose containers are exactly ``processor_ids``.
    Registrations sent one after another fall into one debounce window only when the
    machine keeps up; on a loaded one the first version may have only the first of them,
    and the next version (the later join's) has them all: wait for the condition the
    test means, not for a time."""
    model = wait_for_version(client, since)
    while sorted(model["containers"]) != sorted(processor_ids):
        model = wait_for_version(client, model["version"])
    return model


def ack_all(workers: list[SimWorker], version: int) -> str:
    state = ""
    for w in workers:
        r = w.ack(version)
        assert r.status_code == 200, r.text
        state = r.json()["barrier"]
    return state


def offsets_for(task: dict[str, Any], offset: int) -> dict[str, Any]:
    """A task checkpoint moving every SSPKb of ``task`` to ``offset``."""
    return {"inputOffsets": [{"ssp": ssp, "offset": str(offset)}
                             for ssp in task["systemStreamPartitions"]]}


def settle(client: httpx.Client, workers: list[SimWorker], since: int = 0) -> dict[str, Any]:
    """The next job model after ``since``, acknowledged by those of ``workers`` in it."""
    model = wait_for_version(client, since)
    ack_all([w for w in workers if w.processor_id in model["containers"]], model["version"])
    return model


def joined(client: httpx.Client, processor_id: str, location_id: str
           ) -> tuple[SimWorker, dict[str, Any]]:
    """A registered worker and the first job model, acknowledged."""
    worker = SimWorker(client, processor_id, location_id)
    assert worker.register().status_code in (200, 201)
    return worker, settle(client, [worker])
