"""The connector's jars without Maven: from a Maven repository's layout, checked by SHA-1.

The repository here is the local Maven repository ``deploy/setup.sh`` filled (the same
layout as Maven Central, served as ``file://``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyspark
import pytest

from common.paths import cache_dir
from worker.jvm.jars import CONNECTOR, WANTED, connector_jars, dependencies, fetch_from_repository

M2 = cache_dir() / "m2"
VERSION = pyspark.__version__


def _connector_pom() -> bytes:
    group, artifact = CONNECTOR
    return (M2 / group.replace(".", "/") / artifact / VERSION
            / f"{artifact}-{VERSION}.pom").read_bytes()


def _repository(tmp: Path) -> Path:
    """A copy of the files the fetch needs, in a Maven repository's layout."""
    repo = tmp / "repo"
    for path in M2.rglob("*"):
        if path.is_file() and any(path.name.startswith(a + "-") for a in WANTED) \
                and path.suffix in (".jar", ".pom", ".sha1"):
            target = repo / path.relative_to(M2)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    return repo


def test_the_published_pom_names_the_three_dependencies() -> None:
    found = {artifact: version for _, artifact, version in dependencies(_connector_pom())}
    assert set(found) == set(WANTED) - {CONNECTOR[1]}
    assert found["spark-token-provider-kafka-0-10_2.13"] == VERSION


def test_fetched_jars_are_the_ones_maven_copies(tmp_path: Path) -> None:
    folder = tmp_path / "jars"
    folder.mkdir()
    fetch_from_repository(VERSION, folder, _repository(tmp_path).as_uri())
    fetched = sorted(p.name for p in folder.iterdir())
    by_maven = cache_dir() / "spark-kafka" / VERSION
    assert fetched == sorted(p.name for p in by_maven.glob("*.jar"))
    for name in fetched:
        assert (folder / name).read_bytes() == (by_maven / name).read_bytes()
        assert (folder / name).stat().st_mode & 0o044 == 0o044  # readable by a non-root user


def test_a_corrupt_jar_is_refused_and_nothing_half_written_stays(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    clients = next(repo.rglob("kafka-clients-*.jar"))
    clients.write_bytes(clients.read_bytes()[:-1] + b"!")
    folder = tmp_path / "jars"
    folder.mkdir()
    with pytest.raises(RuntimeError, match="SHA-1 mismatch"):
        fetch_from_repository(VERSION, folder, repo.as_uri())
    assert not any(p.name.startswith("kafka-clients") or p.suffix == ".part"
                   for p in folder.iterdir())


def test_without_maven_connector_jars_fetch_from_the_configured_repository(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repository(tmp_path)
    monkeypatch.setenv("COXSWAIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COXSWAIN_MAVEN_REPOSITORY", repo.as_uri())
    monkeypatch.setenv("PATH", "/nonexistent")  # no mvn
    jars = connector_jars(VERSION)
    assert [p.parent for p in jars] == [tmp_path / "cache" / "spark-kafka" / VERSION] * 4
    assert connector_jars(VERSION) == jars  # cached: no second fetch
