"""Lags reported before the first job model count in it (KIP-441's first assignment):
processors that come back to a stateful job after a coordinator's fresh start report
the state they hold, and the first model places actives where that state is."""

from __future__ import annotations

from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, settle

# a long debounce: every registration (and the heartbeat right after it) lands before
# the first generation, which the last registration's debounce starts
ARGS = ("--stateful", "--debounce-ms", "2000", "--lease-ttl-ms", "60000",
        "--acceptable-recovery-lag", "100", "--probing-interval-ms", "600000")


def test_the_most_caught_up_processor_gets_the_active_in_the_first_model(
    start_server: StartServer,
) -> None:
    server = start_server("--input", "kafka.orders:1", "--num-standbys", "1", *ARGS)
    with server.client() as c:
        lags = {"c1": None, "c2": 1000, "c3": 500}
        workers = []
        for pid, lag in lags.items():
            w = SimWorker(c, pid, f"host-{pid}")
            assert w.register().status_code == 201
            r = w.heartbeat(None if lag is None else {"Partition 0": lag})
            assert r.status_code == 200, r.text
            workers.append(w)
        model = settle(c, workers)
        assert model["version"] == 1
        owner = [pid for pid, cm in model["containers"].items()
                 if cm["tasks"].get("Partition 0", {}).get("taskMode") == "Active"]
        assert owner == ["c3"], model["containers"]  # the most caught up
        # and the lags the leader used are the ones reported
        reported = {p["processorId"]: p.get("taskLags") for p in
                    c.get("/status").json()["processors"]}
        assert reported["c2"] == {"Partition 0": 1000}
        assert reported["c3"] == {"Partition 0": 500}


def test_a_processor_caught_up_on_every_task_keeps_them_all_in_the_first_model(
    start_server: StartServer,
) -> None:
    server = start_server("--input", "kafka.orders:2", "--elasticity-factor", "2", *ARGS)
    every = [f"Partition {p}_{b}_2" for p in range(2) for b in range(2)]
    with server.client() as c:
        workers = []
        for pid in ("c1", "c2", "c3"):
            w = SimWorker(c, pid, f"host-{pid}")
            assert w.register().status_code == 201
            if pid == "c1":
                assert w.heartbeat(dict.fromkeys(every, 0)).status_code == 200
            if pid == "c2":  # an invented name is dropped: the bound holds before a model
                assert w.heartbeat({"Partition 9_0_2": 0, every[0]: 5000}).status_code == 200
            workers.append(w)
        model = settle(c, workers)
        assert model["version"] == 1
        assert sorted(workers[0].tasks(model)) == every  # no one else holds any state
        # the balanced targets warm up elsewhere, and the model says which copies those are
        status = c.get("/status").json()
        assert status["probingRebalanceWanted"] is True
        warming = {(w["taskName"], w["processorId"]) for w in status["warmups"]}
        assert warming and {p for _, p in warming} <= {"c2", "c3"}, status["warmups"]
        assert all(w["lag"] is None or w["lag"] == 5000 for w in status["warmups"])
        reported = {p["processorId"]: p.get("taskLags") for p in status["processors"]}
        assert reported["c1"] == dict.fromkeys(every, 0)
        assert reported["c2"] == {every[0]: 5000}
