"""``process_batch``: count records per key in each micro-batch and print the top ones.

    coxswain worker --app examples.word_count_batch:process_batch --kafka-bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

from worker.runtime import BatchContext


def process_batch(df: DataFrame, ctx: BatchContext) -> None:
    """Rows of this processor's key buckets only; Spark does the work in the JVM."""
    top = (df.groupBy(F.col("key").cast("string").alias("key")).count()
           .orderBy(F.desc("count")).limit(5).collect())
    print(f"[{ctx.processor_id} v{ctx.version} batch {ctx.batch_id}] "
          + ", ".join(f"{r['key']}={r['count']}" for r in top), flush=True)
