"""Local services for development and tests: a ZooKeeper from Debian's package and a
single-node KRaft Kafka broker from Maven Central jars, started and stopped by pid, with
their data and downloads under the repository's git-ignored ``.cache/``."""
