"""What a Spark Python worker process does once, at its first Coxswain task.

A reused Python worker runs ``gc.collect()`` after every task (``pyspark.daemon``): a
full collection, which walks every object the process tracks. Once pandas, pyarrow,
confluent-kafka and Coxswain's modules are imported that is some 90 000 objects and
36 ms a task on a quiet host (measured), paid by every Python worker of every batch, two
per Spark task (the source's reader and the tasks' runner), on the cores the batch
needs: a profile of a worker at 40 records/s found its Python workers a third of their
time in that call. Those objects are the modules' and live as long as the process, so
they are frozen (``gc.freeze``: left out of every collection) once, when the first task
has imported them; what tasks make afterwards is collected as before.
"""

from __future__ import annotations

import gc


class _Settled:
    """Whether this process's long-lived objects are frozen yet."""

    done = False


def settle() -> None:
    """Freeze the objects alive now (the imported modules') out of the cyclic garbage
    collector's walks, once per process; cheap after."""
    if _Settled.done:
        return
    _Settled.done = True
    gc.collect()  # garbage made while importing is not frozen for the process's life
    gc.freeze()


def keep_unfrozen() -> None:
    """This process's objects are never frozen: the driver's, which runs small batches
    itself (``worker.runtime.driver_batches``) but lives long and keeps making and
    dropping objects of its own; a frozen cycle would never be collected."""
    _Settled.done = True


__all__ = ["keep_unfrozen", "settle"]
