"""Where a worker's query reads from: Coxswain's Kafka and Kinesis sources for PySpark's
Python data source API, the executors' Kafka consumers, the source plan the runtime
writes for them, and the batch read through Spark's own Kafka connector."""
