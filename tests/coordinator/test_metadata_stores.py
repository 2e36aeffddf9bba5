"""Every MetadataStore keeps one contract: SQLite, PostgreSQL, a real ZooKeeper and a
Kafka coordinator stream on a real broker.
Plus what only ZooKeeper needs: chunked values beyond its 1 MB node limit, and watches."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from coordinator.job_models import JobModelRepository
from coordinator.store.kafka import KafkaMetadataStore
from coordinator.store.metadata import Fence, MetadataStore, Versioned
from coordinator.store.sql import SqlMetadataStore
from coordinator.store.zookeeper import ZkMetadataStore
from grouping.generation import generate_job_model
from grouping.groupers import GroupByPartition
from grouping.model import SSP
from service.database import make_engine, upgrade
from service.local.kafka import LocalKafka
from service.local.zookeeper import ZooKeeperEnsemble


@pytest.fixture
def zk_client(zookeeper: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zookeeper.connect_string, timeout=5.0)
    client.start(15)
    yield client
    client.stop()
    client.close()


def zk_root() -> str:
    return f"/coxswain-test/{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["sqlite", "postgresql", "zookeeper", "kafka"])
def store(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[MetadataStore]:
    if request.param == "kafka":
        broker: LocalKafka = request.getfixturevalue("kafka")
        stream = KafkaMetadataStore(broker.bootstrap, f"t{uuid.uuid4().hex[:8]}", "test",
                                    chunk_bytes=64 * 1024)
        stream.start()
        yield stream
        stream.close()
        return
    if request.param == "zookeeper":
        client: KazooClient = request.getfixturevalue("zk_client")
        yield ZkMetadataStore(client, zk_root(), chunk_bytes=64 * 1024)
        return
    url = (f"sqlite:///{tmp_path}/store.db" if request.param == "sqlite"
           else request.getfixturevalue("postgres").create_database())
    engine = make_engine(url)
    upgrade(engine)
    yield SqlMetadataStore(engine)
    engine.dispose()


def test_put_get_list_delete_with_versions(store: MetadataStore) -> None:
    assert store.get("ns", "a") is None
    assert store.put("ns", "a", b"1") == 1
    assert store.put("ns", "a", b"2") == 2
    found = store.get("ns", "a")
    assert found is not None and (found.value, found.version) == (b"2", 2)
    store.put_many("ns", {"b": b"x", "a": b"3"})
    assert {k: (v.value, v.version) for k, v in store.list("ns").items()} == {
        "a": (b"3", 3), "b": (b"x", 1)}
    assert store.keys("ns") == ["a", "b"]
    assert store.list("other") == {}
    assert store.keys("other") == []
    assert store.delete("ns", "a")
    assert not store.delete("ns", "a")
    store.ping()


def test_keys_that_look_like_paths_are_kept_apart(store: MetadataStore) -> None:
    odd = ["Partition 0_1_2", "SystemStreamPartition [kafka, a/b, 0]", ".", "..", "x%2Fy"]
    for i, key in enumerate(odd):
        store.put("taskLocality", key, str(i).encode())
    assert store.keys("taskLocality") == sorted(odd)
    assert {k: v.value for k, v in store.list("taskLocality").items()} == {
        k: str(i).encode() for i, k in enumerate(odd)}


def test_compare_and_set(store: MetadataStore) -> None:
    assert store.compare_and_set("ns", "k", b"first", None) == 1
    assert store.compare_and_set("ns", "k", b"again", None) is None
    assert store.compare_and_set("ns", "k", b"stale", 7) is None
    assert store.compare_and_set("ns", "k", b"second", 1) == 2
    found = store.get("ns", "k")
    assert found is not None and found.value == b"second"


def test_compare_and_set_many_judges_each_key_on_its_own(store: MetadataStore) -> None:
    for key in ("a", "b", "c", "d"):
        store.put("leases", key, b"0")
    store.put("leases", "b", b"moved on")  # version 2: a write that expected 1 is refused
    store.delete("leases", "d")
    written = store.compare_and_set_many("leases", {
        "a": (b"1", 1), "b": (b"1", 1), "c": (b"1", 1), "d": (b"1", 1)})
    assert written == {"a": 2, "b": None, "c": 2, "d": None}
    assert {k: (v.value, v.version) for k, v in store.list("leases").items()} == {
        "a": (b"1", 2), "b": (b"moved on", 2), "c": (b"1", 2)}
    assert store.compare_and_set_many("leases", {}) == {}
    # many at once (beyond one ZooKeeper transaction's ops), a refusal among them
    many = {f"p{i:04d}": (f"v{i}".encode(), 1) for i in range(1_200)}
    store.put_many("leases", {k: b"0" for k in many})
    store.put("leases", "p0600", b"elsewhere")
    written = store.compare_and_set_many("leases", many)
    assert written == {k: None if k == "p0600" else 2 for k in many}
    assert store.get("leases", "p1199") == Versioned(b"v1199", 2)


def test_compare_and_set_is_refused_once_the_fence_moved(store: MetadataStore) -> None:
    epoch = store.put("leader", "epoch", b"a")
    fence = Fence("leader", "epoch", epoch)
    assert store.compare_and_set("ns", "pointer", b"1", None, fence) == 1
    store.put("leader", "epoch", b"b")  # a new leader was elected
    assert store.compare_and_set("ns", "pointer", b"2", 1, fence) is None
    assert store.compare_and_set("ns", "fresh", b"2", None, fence) is None
    found = store.get("ns", "pointer")
    assert found is not None and (found.value, found.version) == (b"1", 1)
    assert store.get("ns", "fresh") is None


def test_concurrent_compare_and_set_has_one_winner(store: MetadataStore) -> None:
    store.put("ns", "counter", b"0")
    winners: list[int] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        if store.compare_and_set("ns", "counter", str(i).encode(), 1) is not None:
            winners.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    found = store.get("ns", "counter")
    assert found is not None and found.version == 2


def test_job_models_publish_monotonically_and_prune(store: MetadataStore) -> None:
    repo = JobModelRepository(store, keep_last=3)
    procs = {"w1": "a", "w2": "b"}
    ssps = [SSP("kafka", "in", p) for p in range(4)]
    pointer = None
    for version in range(1, 6):
        model = generate_job_model(version, ssps, GroupByPartition(), 1, procs).job_model
        assert repo.publish(model, pointer)
        latest = repo.latest()
        assert latest is not None and latest[0] == version
        pointer = latest[1]
        if version == 2:
            repo.set_active(2)
    stale = generate_job_model(6, ssps, GroupByPartition(), 1, procs).job_model
    assert not repo.publish(stale, 1)  # a pointer read long ago: fenced
    assert repo.latest() == (5, pointer)
    assert repo.load(6) is None
    assert [v for v in range(1, 6) if repo.load(v) is not None] == [2, 3, 4, 5]


def test_a_100k_task_job_model_round_trips(store: MetadataStore) -> None:
    repo = JobModelRepository(store)
    ssps = [SSP("kafka", "events", p) for p in range(12_500)]
    procs = {f"w{i:03d}": f"h{i}" for i in range(100)}
    model = generate_job_model(1, ssps, GroupByPartition(), 8, procs).job_model
    assert repo.publish(model, None)
    loaded = repo.load(1)
    assert loaded == model
    assert sum(len(c.tasks) for c in loaded.containers.values()) == 100_000


# --------------------------------------------------------------------------- ZooKeeper only


def test_values_beyond_the_node_limit_are_chunked_checked_and_cleaned(
    zk_client: KazooClient,
) -> None:
    store = ZkMetadataStore(zk_client, zk_root())  # default 512 KiB chunks
    big = bytes(range(256)) * (3 * 1024 * 1024 // 256 + 7)  # > 3 MiB: beyond 1 MB nodes
    assert store.put("jobModels", "1", big) == 1
    found = store.get("jobModels", "1")
    assert found is not None and found.value == big
    chunk_dir = f"{store.root}/_chunks/jobModels/1"
    first = set(zk_client.get_children(chunk_dir))
    assert len(first) == 7
    bigger = big + b"more"
    assert store.put("jobModels", "1", bigger) == 2
    second = set(zk_client.get_children(chunk_dir))
    assert len(second) == 7 and not first & second  # the old write's chunks are gone
    assert store.list("jobModels")["1"].value == bigger
    # a corrupted chunk is detected, not returned
    victim = sorted(second)[0]
    zk_client.set(f"{chunk_dir}/{victim}", b"garbage")
    with pytest.raises(Exception, match="chunks kept changing"):
        store.get("jobModels", "1")
    assert store.delete("jobModels", "1")
    assert zk_client.exists(chunk_dir) is None


def test_a_refused_compare_and_set_leaves_no_chunks(zk_client: KazooClient) -> None:
    store = ZkMetadataStore(zk_client, zk_root(), chunk_bytes=1024)
    assert store.compare_and_set("jobModels", "7", b"x" * 5000, None) == 1
    before = set(zk_client.get_children(f"{store.root}/_chunks/jobModels/7"))
    assert store.compare_and_set("jobModels", "7", b"y" * 5000, None) is None
    assert set(zk_client.get_children(f"{store.root}/_chunks/jobModels/7")) == before
    found = store.get("jobModels", "7")
    assert found is not None and found.value == b"x" * 5000


def test_compare_and_set_many_cleans_old_chunks_and_writes_big_values_alone(
    zk_client: KazooClient,
) -> None:
    store = ZkMetadataStore(zk_client, zk_root(), chunk_bytes=1024)
    assert store.put("ns", "big", b"x" * 5000) == 1  # chunked
    assert store.put("ns", "small", b"s") == 1
    chunks = f"{store.root}/_chunks/ns"
    assert zk_client.get_children(f"{chunks}/big")
    written = store.compare_and_set_many("ns", {"big": (b"now small", 1),
                                                "small": (b"y" * 3000, 1)})
    assert written == {"big": 2, "small": 2}
    assert store.get("ns", "big") == Versioned(b"now small", 2)
    assert store.get("ns", "small") == Versioned(b"y" * 3000, 2)
    assert zk_client.get_children(f"{chunks}/big") == []  # the old chunks went
    assert len(zk_client.get_children(f"{chunks}/small")) == 3  # the new ones stay


def test_compare_and_set_many_with_refusals_in_every_round(zk_client: KazooClient) -> None:
    """ZooKeeper names one refused op per transaction: past a few rounds the rest go one
    by one, and every key still gets its own verdict."""
    store = ZkMetadataStore(zk_client, zk_root())
    keys = [f"k{i:02d}" for i in range(20)]
    store.put_many("ns", {k: b"0" for k in keys})
    moved = set(keys[1::3])
    for key in moved:
        store.put("ns", key, b"moved")
    written = store.compare_and_set_many("ns", {k: (b"1", 1) for k in keys})
    assert written == {k: None if k in moved else 2 for k in keys}
    assert {k: v.value for k, v in store.list("ns").items()} == {
        k: b"moved" if k in moved else b"1" for k in keys}


def test_watch_fires_on_changes_from_another_client(
    zk_client: KazooClient, zookeeper: ZooKeeperEnsemble
) -> None:
    root = zk_root()
    store = ZkMetadataStore(zk_client, root)
    fired: list[float] = []

    def on_change() -> None:
        fired.append(time.monotonic())

    store.watch("jobModelVersion", "latest", on_change)
    other = KazooClient(hosts=zookeeper.connect_string)
    other.start(15)
    try:
        ZkMetadataStore(other, root).put("jobModelVersion", "latest", b"1")
        written = time.monotonic()
        deadline = written + 5
        while len(fired) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        other.stop()
        other.close()
    assert len(fired) >= 2  # once at once, once for the write
    assert fired[1] - written < 0.1


def test_zookeeper_layout_of_the_readme(zk_client: KazooClient) -> None:
    from coordinator.barrier import Barrier, BarrierRepository, BarrierState
    from coordinator.locality import DesiredConfig

    store = ZkMetadataStore(zk_client, zk_root())
    repo = JobModelRepository(store, keep_last=2)
    ssps = [SSP("kafka", "in", p) for p in range(2)]
    barriers = BarrierRepository(store)
    pointer = None
    for version in (1, 2, 3):
        model = generate_job_model(version, ssps, GroupByPartition(), 1, {"w1": "a"}).job_model
        assert repo.publish(model, pointer)
        pointer = (repo.latest() or (0, 0))[1]
        barriers.save(Barrier(version, BarrierState.PENDING, frozenset({"w1"}), frozenset(),
                              1.0))
    repo.set_active(3)
    DesiredConfig(store).update(elasticityFactor=2)
    barriers.update(3, lambda b: b.ack("w1", 2.0))
    barriers.prune(3)
    r = store.root
    assert zk_client.get(f"{r}/jobModelVersion")[0] == b"3"
    assert zk_client.get(f"{r}/activeJobModelVersion")[0] == b"3"
    assert b"elasticityFactor" in zk_client.get(f"{r}/config")[0]
    assert sorted(zk_client.get_children(f"{r}/jobModels")) == [f"{v:020d}" for v in (2, 3)]
    assert zk_client.get_children(f"{r}/barriers") == [f"{3:020d}"]  # older ones pruned
    assert b'"done"' in zk_client.get(f"{r}/barriers/{3:020d}/state")[0]
    assert barriers.load(3) is not None
