"""The job's inputs as their systems list them: Kafka partition counts and Kinesis shard
listings, polled by every replica (each one's ``/status`` tells the truth) and acted on by
the leader."""
