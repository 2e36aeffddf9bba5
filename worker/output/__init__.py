"""Where a worker's output goes: the output topic checked at start, and exactly-once
output (each commit's rows and checkpoint record in one Kafka transaction)."""
