"""The Spark Kafka connector's jars for the installed PySpark, from a local cache.

The connector and the three jars it needs that PySpark does not ship (its token provider,
kafka-clients, commons-pool2) are fetched once into ``{cache}/spark-kafka/{pyspark
version}/``: with Maven and ``deploy/local/spark/pom.xml`` from a checkout (``deploy/setup.sh``
does it ahead of time), or, where there is no Maven (an installed worker, the container
image's build), straight from a Maven repository: the connector's published POM names the
exact versions of the other three, and every jar is checked against its published SHA-1.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pyspark

from common.paths import cache_dir

POM = Path(__file__).resolve().parents[2] / "deploy" / "local" / "spark" / "pom.xml"
CONNECTOR = ("org.apache.spark", "spark-sql-kafka-0-10_2.13")
WANTED = ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13",
          "kafka-clients", "commons-pool2")
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def connector_jars(version: str = pyspark.__version__) -> list[Path]:
    """Absolute paths of the connector's jars, fetched on first use."""
    folder = cache_dir() / "spark-kafka" / version
    jars = sorted(folder.glob("*.jar"))
    if len(jars) == len(WANTED):
        return jars
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("mvn") is not None and POM.exists():
        _fetch_with_maven(version, folder)
    else:
        fetch_from_repository(version, folder,
                              os.environ.get("COXSWAIN_MAVEN_REPOSITORY", MAVEN_CENTRAL))
    return sorted(folder.glob("*.jar"))


def _fetch_with_maven(version: str, folder: Path) -> None:
    result = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(POM), f"-Dspark.version={version}",
         f"-Dmaven.repo.local={cache_dir() / 'm2'}", "dependency:copy-dependencies",
         f"-DoutputDirectory={folder}", "-DincludeScope=runtime",
         f"-DincludeArtifactIds={','.join(WANTED)}"],
        capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"fetching the Spark Kafka connector {version} failed (is it on "
                           f"Maven Central?):\n{result.stdout}{result.stderr}")


def fetch_from_repository(version: str, folder: Path, repository: str) -> None:
    """Download the connector ``version`` and its three dependencies from ``repository``
    (a Maven repository's base URL) into ``folder``; each jar lands whole (written aside,
    checked, then renamed) or not at all."""
    pom = _get(_url(repository, *CONNECTOR, version, "pom"))
    for group, artifact, dep_version in [(*CONNECTOR, version), *dependencies(pom)]:
        target = folder / f"{artifact}-{dep_version}.jar"
        if target.exists():
            continue
        url = _url(repository, group, artifact, dep_version, "jar")
        data = _get(url)
        expected = _get(url + ".sha1").decode().split()[0].strip().lower()
        if hashlib.sha1(data).hexdigest() != expected:  # integrity, not security
            raise RuntimeError(f"{url}: SHA-1 mismatch (expected {expected})")
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".part", delete=False) as f:
            f.write(data)
        os.chmod(f.name, 0o644)  # readable by the unprivileged user a worker runs as
        Path(f.name).replace(target)


def dependencies(pom: bytes) -> list[tuple[str, str, str]]:
    """(group, artifact, version) of the wanted compile-scope dependencies that the
    connector's published (flattened) POM names."""
    found = []
    for dep in ET.fromstring(pom).iterfind("m:dependencies/m:dependency", _NS):
        fields = {k: (dep.findtext(f"m:{k}", default="", namespaces=_NS) or "").strip()
                  for k in ("groupId", "artifactId", "version", "scope")}
        if fields["artifactId"] in WANTED and fields["scope"] in ("", "compile"):
            found.append((fields["groupId"], fields["artifactId"], fields["version"]))
    missing = set(WANTED) - {CONNECTOR[1]} - {a for _, a, _ in found}
    if missing or any("${" in v or not v for _, _, v in found):
        raise RuntimeError(f"the connector's POM does not name the versions of {sorted(missing)}"
                           " (or names them by property)")
    return found


def _url(repository: str, group: str, artifact: str, version: str, ext: str) -> str:
    return (f"{repository.rstrip('/')}/{group.replace('.', '/')}/{artifact}/{version}/"
            f"{artifact}-{version}.{ext}")


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            return bytes(response.read())
    except OSError as e:
        raise RuntimeError(f"fetching {url} failed: {e}") from e
