"""GET /autosize against a real coordinator: honest about thin data, then a
recommendation from the workers' heartbeat stats (a backlog growing on saturated
processors: scale up), exported as Prometheus gauges; bad bounds refused."""

from __future__ import annotations

import re
import time

from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, settle

ARGS = ("--input", "kafka.orders:2", "--debounce-ms", "50", "--lease-ttl-ms", "60000",
        "--autosize-sample-interval-ms", "100", "--autosize-window-ms", "1500")


def test_the_recommendation_follows_the_workers_stats(start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        first = c.get("/autosize").json()
        assert first["decided"] is False and "too little data" in first["reason"]
        assert first["elasticityFactor"] == 1
        w = SimWorker(c, "w1", "host-a")
        w.register()
        settle(c, [w])
        backlog = 0
        deadline = time.monotonic() + 20
        answer = first
        while time.monotonic() < deadline:
            backlog += 2000  # the backlog grows; every batch fills the trigger interval
            assert c.post("/processors/w1/heartbeat", headers=w.lease, json={"stats": {
                "recordsPerSecond": 1000.0, "batchSeconds": 0.8, "triggerSeconds": 0.5,
                "consumerLag": {"Partition 0": backlog // 2,
                                "Partition 1": backlog // 2}}}).status_code == 200
            time.sleep(0.1)
            answer = c.get("/autosize").json()
            if answer["decided"]:
                break
        assert answer["decided"], answer
        assert answer["elasticityFactor"] >= 2 and answer["reason"].startswith("scale up")
        assert answer["figures"]["backlogTrend"] > 0 and answer["currentProcessors"] == 1
        assert c.get("/autosize", params={"maxFactor": 1}).json()["elasticityFactor"] == 1
        metrics = c.get("/metrics").text  # for a deployment's autoscaler (an HPA)
        factor = re.search(r"^coxswain_recommended_elasticity_factor (\S+)$", metrics, re.M)
        processors = re.search(r"^coxswain_recommended_processors (\S+)$", metrics, re.M)
        assert factor and float(factor[1]) >= 2, metrics
        assert processors and float(processors[1]) >= 1
        for bad in ({"minFactor": 3}, {"minFactor": 4, "maxFactor": 2},
                    {"maxFactor": 0}):
            r = c.get("/autosize", params=bad)
            assert r.status_code == 422, (bad, r.text)
