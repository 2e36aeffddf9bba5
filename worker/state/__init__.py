"""Per-key task state: RocksDB stores where tasks run, their snapshots, backups of those
snapshots to a blob store, and restores (SAMZA-2591's commit, SAMZA-1554's host affinity).

* ``keys``: how an entry is stored under its record key (pure);
* ``store``: a task's state store over RocksDB, with the per-key API;
* ``snapshot``: hard-link snapshots named by checkpoint id, and what files they hold;
* ``blobs``: the blob store (``file://`` and ``s3://``) behind one small interface;
* ``backup``: incremental upload of a snapshot and its index (the state marker);
* ``restore``: a task's state from its committed marker, local files first.
"""
