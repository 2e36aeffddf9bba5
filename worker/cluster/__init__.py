"""What a worker does on a Spark cluster master: each stateful task pinned to one
executor while it lives."""
