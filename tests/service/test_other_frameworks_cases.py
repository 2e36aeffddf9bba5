"""Cases users of other stream processors hit, against a real coordinator: a worker that
rejoins gets its tasks back (faust#93), and more processors than tasks leaves the extras
idle but healthy, ready to take over (faust#134)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, settle

ARGS = ("--input", "kafka.orders:4", "--debounce-ms", "50", "--lease-ttl-ms", "60000",
        "--barrier-timeout-ms", "60000")


def test_a_worker_that_rejoins_gets_its_tasks_back(start_server: StartServer,
                                                   tmp_path: Path) -> None:
    """faust#93: after a restart a worker got no tasks. Here it gets a balanced share
    at once (stateless), and with state left on its disk, exactly the tasks it had."""
    for stateful in (False, True):
        server = start_server(*ARGS, *(["--stateful"] if stateful else []),
                              data_dir=tmp_path / f"stateful-{stateful}")
        with server.client() as c:
            w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
            w1.register()
            w2.register()
            both = settle(c, [w1, w2])
            while set(both["containers"]) != {"w1", "w2"}:  # w2 after the first version
                both = settle(c, [w1, w2], both["version"])
            mine = sorted(w2.tasks(both))
            assert len(mine) == 2, both["containers"]
            if stateful:
                w1.heartbeat(dict.fromkeys(w1.tasks(both), 0))
                w2.heartbeat(dict.fromkeys(mine, 0))
            assert w2.leave().status_code == 204  # a restart: it leaves ...
            alone = settle(c, [w1], both["version"])
            assert len(w1.tasks(alone)) == 4
            if stateful:
                w1.heartbeat(dict.fromkeys(w1.tasks(alone), 0))
            assert w2.register().status_code in (200, 201)  # ... and comes back
            if stateful:  # its state is still on disk, 0 offsets behind
                assert w2.heartbeat(dict.fromkeys(mine, 0)).status_code == 200
            back = settle(c, [w1, w2], alone["version"])
            assert len(w2.tasks(back)) == 2, back["containers"]
            if stateful:
                assert sorted(w2.tasks(back)) == mine


def test_more_processors_than_tasks_leaves_the_extras_idle_and_healthy(
    start_server: StartServer,
) -> None:
    """faust#134: extra workers crashed or rebalanced forever. Here 6 processors share 4
    tasks: two are idle, heartbeat, acknowledge, and take over when a busy one leaves."""
    server = start_server(*ARGS)
    with server.client() as c:
        workers = [SimWorker(c, f"w{i}", f"host-{i}") for i in range(6)]
        for w in workers:
            assert w.register().status_code == 201
        model = settle(c, workers)
        while len(model["containers"]) < 6:  # registrations inside one debounce or two
            model = settle(c, workers, model["version"])
        counts = {w.processor_id: len(w.tasks(model)) for w in workers}
        assert sorted(counts.values()) == [0, 0, 1, 1, 1, 1], counts
        idle = [w for w in workers if not w.tasks(model)]
        for _ in range(3):  # the extras stay healthy: no rebalance, no lease lost
            for w in workers:
                assert w.heartbeat().status_code == 200
            time.sleep(0.3)
        status = c.get("/status").json()
        assert status["latestVersion"] == model["version"]
        assert status["barrier"] == "done"
        assert {p["processorId"] for p in status["processors"]} == set(counts)
        busy = next(w for w in workers if w.tasks(model))
        taken = set(busy.tasks(model))
        assert busy.leave().status_code == 204
        after = settle(c, [w for w in workers if w is not busy], model["version"])
        assert taken <= {t for w in idle for t in w.tasks(after)}, after["containers"]
