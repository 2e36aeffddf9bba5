"""Coordination: leader election, membership leases, metadata stores, job-model lifecycle.

Arrives with the service issue (#3); the pure core it builds on is in ``grouping`` and
``checkpoint``.
"""
