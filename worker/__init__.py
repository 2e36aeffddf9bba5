"""The PySpark worker runtime. Arrives with the worker issue (#6)."""
