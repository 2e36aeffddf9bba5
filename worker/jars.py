"""The Spark Kafka connector's jars for the installed PySpark, from a local cache.

``deploy/local/spark/pom.xml`` names the connector; Maven copies the four jars PySpark
does not ship (the connector, its token provider, kafka-clients, commons-pool2) into
``.cache/spark-kafka/{pyspark version}/`` once (``deploy/setup.sh`` does it ahead of time).
A worker without the cache can use ``spark.jars.packages`` instead, when online.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyspark

from common.paths import cache_dir

POM = Path(__file__).resolve().parents[1] / "deploy" / "local" / "spark" / "pom.xml"
WANTED = ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13",
          "kafka-clients", "commons-pool2")


def connector_jars(version: str = pyspark.__version__) -> list[Path]:
    """Absolute paths of the connector's jars, fetched with Maven on first use."""
    folder = cache_dir() / "spark-kafka" / version
    jars = sorted(folder.glob("*.jar"))
    if len(jars) == len(WANTED):
        return jars
    if shutil.which("mvn") is None or not POM.exists():
        raise RuntimeError(
            f"the Spark Kafka connector {version} is not in {folder}: run ./deploy/setup.sh "
            "--dev from a Coxswain checkout (needs Maven), or set spark.jars.packages to "
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}")
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(POM), f"-Dspark.version={version}",
         f"-Dmaven.repo.local={cache_dir() / 'm2'}", "dependency:copy-dependencies",
         f"-DoutputDirectory={folder}", "-DincludeScope=runtime",
         f"-DincludeArtifactIds={','.join(WANTED)}"],
        capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"fetching the Spark Kafka connector {version} failed (is it on "
                           f"Maven Central?):\n{result.stdout}{result.stderr}")
    return sorted(folder.glob("*.jar"))
