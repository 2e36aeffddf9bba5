"""Checkpoints: v1/v2 types and serde, per-key-bucket resolution across elasticity changes.

The resolution math is pure (``checkpoint.resolution``); stores live in ``checkpoint.store``.
"""
