"""The worker's Spark JVM: the jars it needs (Spark's Kafka connector, resolved from Maven
once per host) and the class-data-sharing archive that makes its start faster."""
